package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/sqlite"
)

// BenchmarkPushHooks measures push throughput on embedded SQLite without
// hooks and with a no-op row validator that schedules one reaction per
// commit (delivered by the worker to a no-op handler meanwhile). Compare
// the two sub-benchmarks of one run: bench/RESULTS.md records the ratio.
//
//	go test -run='^$' -bench=PushHooks -count=3 ./engine/
func BenchmarkPushHooks(b *testing.B) {
	s, err := schema.Parse([]byte(testSchemaJSON))
	if err != nil {
		b.Fatal(err)
	}
	codec := ssp2.NewRowCodec(s.Table("tasks").Columns)
	for _, mode := range []string{"none", "validator+reaction"} {
		b.Run(mode, func(b *testing.B) {
			st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "b.db"), sqlite.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			var delivered atomic.Int64
			cfg := engine.Config{Schema: s, Store: st, Resolver: engine.AllowAll(s)}
			if mode != "none" {
				cfg.Validators = map[string]engine.RowValidator{"tasks": func(ctx context.Context, w *engine.RowWrite) error {
					return w.React(engine.Reaction{Name: "noop", Payload: []byte(w.RowID)})
				}}
				cfg.Reactions = engine.ReactionConfig{Handlers: map[string]engine.ReactionHandler{
					"noop": func(context.Context, engine.StoredReaction) error { delivered.Add(1); return nil }}}
			}
			eng, err := engine.New(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer eng.Close()
			var clients atomic.Int64
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				cid := fmt.Sprint("c", clients.Add(1))
				id := engine.Identity{ActorID: cid, Partition: "p"}
				rep, err := eng.Sync(ctx, id, &ssp2.Message{WireVersion: 2, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
					&ssp2.ReqHeader{ClientID: cid, SchemaVersion: 1}, &ssp2.PullHeader{Accept: 1}}})
				if err != nil {
					b.Error(err)
					return
				}
				epoch := rep.Header().LogEpoch
				for i := 0; pb.Next(); i++ {
					rid := fmt.Sprintf("%s-%d", cid, i)
					payload, _ := codec.Append(nil, ssp2.Row{rid, "P", "title", nil})
					rep, err := eng.Sync(ctx, id, &ssp2.Message{WireVersion: 2, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
						&ssp2.ReqHeader{ClientID: cid, SchemaVersion: 1, LogEpoch: &epoch},
						&ssp2.PushCommit{ClientCommitID: rid, Operations: []ssp2.Operation{{Table: "tasks", RowID: rid, Op: ssp2.OpUpsert, Payload: payload}}}}})
					if err != nil || rep.Applied != 1 {
						b.Errorf("push %s: %v", rid, err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
			if mode != "none" {
				b.ReportMetric(float64(delivered.Load())/float64(b.N), "delivered/commit")
			}
		})
	}
}
