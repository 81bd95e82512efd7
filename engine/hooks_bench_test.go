package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/reactions"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/sqlite"
)

// BenchmarkPushHooks measures push throughput on embedded SQLite without
// hooks and with a no-op row validator that schedules one reaction per
// commit (delivered by the worker to a no-op handler meanwhile), as two
// sub-benchmarks. BenchmarkPushHooksInterleaved below gives the ratio
// under the same machine noise.
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
			cfg := engine.Config{Schema: s, Backend: st.Backend(), Resolver: engine.AllowAll(s)}
			if mode != "none" {
				cfg.Validators = map[string]engine.RowValidator{"tasks": func(ctx context.Context, w *engine.RowWrite) error {
					return w.React(engine.Reaction{Name: "noop", Payload: []byte(w.RowID)})
				}}
				cfg.Reactions = reactions.Options{Handlers: map[string]reactions.Handler{
					"noop": func(context.Context, reactions.Stored) error { delivered.Add(1); return nil }}}
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
				rep, err := eng.Sync(ctx, id, &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
					&ssp2.ReqHeader{ClientID: cid, SchemaVersion: 1}, &ssp2.PullHeader{Accept: 1}}})
				if err != nil {
					b.Error(err)
					return
				}
				epoch := rep.Header().LogEpoch
				for i := 0; pb.Next(); i++ {
					rid := fmt.Sprintf("%s-%d", cid, i)
					payload, _ := codec.AppendSparse(nil, ssp2.Row{rid, "P", "title", nil}, nil, 0)
					rep, err := eng.Sync(ctx, id, &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
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

// hookBench is one engine of BenchmarkPushHooksInterleaved with its
// clients.
type hookBench struct {
	eng       *engine.Engine
	clients   []engine.Identity
	epochs    []string
	next      int
	delivered atomic.Int64
}

func newHookBench(b *testing.B, s *schema.Schema, hooks bool, nclients int) *hookBench {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), fmt.Sprint("b", hooks, ".db")), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	h := &hookBench{}
	cfg := engine.Config{Schema: s, Backend: st.Backend(), Resolver: engine.AllowAll(s)}
	if hooks {
		cfg.Validators = map[string]engine.RowValidator{"tasks": func(ctx context.Context, w *engine.RowWrite) error {
			return w.React(engine.Reaction{Name: "noop", Payload: []byte(w.RowID)})
		}}
		cfg.Reactions = reactions.Options{Handlers: map[string]reactions.Handler{
			"noop": func(context.Context, reactions.Stored) error { h.delivered.Add(1); return nil }}}
	}
	if h.eng, err = engine.New(context.Background(), cfg); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.eng.Close() })
	for i := range nclients {
		cid := fmt.Sprint("c", i)
		id := engine.Identity{ActorID: cid, Partition: "p"}
		rep, err := h.eng.Sync(context.Background(), id, &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
			&ssp2.ReqHeader{ClientID: cid, SchemaVersion: 1}, &ssp2.PullHeader{Accept: 1}}})
		if err != nil {
			b.Fatal(err)
		}
		h.clients, h.epochs = append(h.clients, id), append(h.epochs, rep.Header().LogEpoch)
	}
	return h
}

// block pushes per commits from every client concurrently and returns the
// wall time.
func (h *hookBench) block(b *testing.B, codec *ssp2.RowCodec, per int) time.Duration {
	start := time.Now()
	var wg sync.WaitGroup
	base := h.next
	h.next += per
	for i, id := range h.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range per {
				rid := fmt.Sprintf("%s-%d", id.ActorID, base+k)
				payload, _ := codec.AppendSparse(nil, ssp2.Row{rid, "P", "title", nil}, nil, 0)
				rep, err := h.eng.Sync(context.Background(), id, &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
					&ssp2.ReqHeader{ClientID: id.ActorID, SchemaVersion: 1, LogEpoch: &h.epochs[i]},
					&ssp2.PushCommit{ClientCommitID: rid, Operations: []ssp2.Operation{{Table: "tasks", RowID: rid, Op: ssp2.OpUpsert, Payload: payload}}}}})
				if err != nil || rep.Applied != 1 {
					b.Errorf("push %s: %v", rid, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// BenchmarkPushHooksInterleaved alternates blocks of 200 commits (4
// clients × 50) between an engine without hooks and one with a no-op
// validator scheduling one reaction per commit (its worker delivering
// meanwhile), so both see the same machine noise, and reports the
// throughput ratio hooks/plain (target ≥ 0.8). One op is one pair of
// blocks.
//
//	go test -run='^$' -bench=PushHooksInterleaved -benchtime=20x ./engine/
func BenchmarkPushHooksInterleaved(b *testing.B) {
	s, err := schema.Parse([]byte(testSchemaJSON))
	if err != nil {
		b.Fatal(err)
	}
	codec := ssp2.NewRowCodec(s.Table("tasks").Columns)
	const clients, per = 4, 50
	plain, hooked := newHookBench(b, s, false, clients), newHookBench(b, s, true, clients)
	var tPlain, tHooked time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 { // alternate which goes first
			tPlain += plain.block(b, codec, per)
			tHooked += hooked.block(b, codec, per)
		} else {
			tHooked += hooked.block(b, codec, per)
			tPlain += plain.block(b, codec, per)
		}
	}
	b.StopTimer()
	n := float64(b.N * clients * per)
	b.ReportMetric(n/tPlain.Seconds(), "plain-commits/s")
	b.ReportMetric(n/tHooked.Seconds(), "hooks-commits/s")
	b.ReportMetric(tPlain.Seconds()/tHooked.Seconds(), "hooks/plain")
	b.ReportMetric(float64(hooked.delivered.Load())/n, "delivered/commit")
}
