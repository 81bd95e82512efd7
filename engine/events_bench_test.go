package engine_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
)

// BenchmarkPushEventRing measures push throughput with the event ring off,
// on, and on with a live subscriber draining it, in one run. One push in
// ten is rejected (unknown table), so the ring is written on the push
// path; 8 partitions push in parallel. Compare ns/op between the
// sub-benchmarks (ratios, not absolute figures: the machine is shared).
func BenchmarkPushEventRing(b *testing.B) {
	sch, err := schema.Parse([]byte(testSchemaJSON))
	if err != nil {
		b.Fatal(err)
	}
	codec := ssp2.NewRowCodec(sch.Table("tasks").Columns)
	for _, mode := range []string{"off", "on", "on+subscriber"} {
		b.Run("ring="+mode, func(b *testing.B) {
			var ring *events.Ring
			if mode != "off" {
				ring = events.NewRing(events.DefaultSize, nil)
			}
			if mode == "on+subscriber" {
				sub := ring.Subscribe(events.MaxSubscriberBuffer)
				done := make(chan struct{})
				go func() {
					defer close(done)
					for range sub.C() {
					}
				}()
				defer func() { sub.Close(); <-done }()
			}
			eng, err := engine.New(context.Background(), engine.Config{Schema: sch, Backend: memory.New().Backend(),
				Resolver: engine.AllowAll(sch), Events: ring, SlowRequest: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer eng.Close()
			var next atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				w := next.Add(1)
				id := engine.Identity{ActorID: "bench", Partition: fmt.Sprint("p", w%8)}
				cid := fmt.Sprint("client-", w)
				hello, err := eng.Sync(context.Background(), id, &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest,
					Frames: []ssp2.Frame{&ssp2.ReqHeader{ClientID: cid, SchemaVersion: 1}, &ssp2.PullHeader{Accept: 1}}})
				if err != nil {
					b.Error(err)
					return
				}
				epoch := &hello.Header().LogEpoch
				for i := 0; pb.Next(); i++ {
					rid := fmt.Sprint("r", w, "-", i)
					op := ssp2.Operation{Table: "tasks", RowID: rid, Op: ssp2.OpUpsert}
					if i%10 == 0 {
						op.Table = "no_such_table"
					} else if op.Payload, err = codec.AppendSparse(nil, ssp2.Row{rid, "P", "t", nil}, nil, 0); err != nil {
						b.Error(err)
						return
					}
					frames := []ssp2.Frame{&ssp2.ReqHeader{ClientID: cid, SchemaVersion: 1, LogEpoch: epoch},
						&ssp2.PushCommit{ClientCommitID: fmt.Sprint("c", i), Operations: []ssp2.Operation{op}}}
					rep, err := eng.Sync(context.Background(), id, &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: frames})
					if err != nil {
						b.Error(err)
						return
					}
					if rep.Rejected+rep.Applied != 1 {
						b.Errorf("push %d: %d applied, %d rejected", i, rep.Applied, rep.Rejected)
						return
					}
				}
			})
			b.StopTimer()
			st := ring.Stats()
			if mode != "off" && st.Emitted == 0 {
				b.Fatal("no event emitted: the benchmark does not exercise the ring")
			}
			b.ReportMetric(float64(st.Emitted)/float64(b.N), "events/op")
		})
	}
}
