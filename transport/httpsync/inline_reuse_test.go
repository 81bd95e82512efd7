package httpsync_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
)

// TestInlineStormReusesLargePages: inline-only clients bootstrapping one
// scope at one pin get each page over the inline limit built once (stored
// like the same page by reference) and read back by every later client,
// whether a request carries one page or streams several; pages under the
// limit are built per request and never stored. Every client converges.
func TestInlineStormReusesLargePages(t *testing.T) {
	cases := []struct {
		name        string
		inlineLimit int
		pagesPerReq int32
		wantBuilt   uint64 // full pages of 500 rows (~40 KB each) stored
	}{
		{"one page per request, over the limit", 16 << 10, 1, 3},
		{"streamed pages, over the limit", 16 << 10, 3, 3},
		{"pages under the limit", 1 << 20, 3, 0},
	}
	forEachBackend(t, func(t *testing.T, s0 *server) {
		s0.stop()
		for ci, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				s := startServerWith(t, s0.be, func(cfg *engine.Config) { cfg.InlineSegmentMaxBytes = c.inlineLimit })
				const clients = 8
				seed(t, s, 1500) // idempotent across cases (same commit ids)
				// One new row per case moves the pin, so no case reuses the
				// pages of another (the PostgreSQL segment table outlives a
				// server); the last page of 1-3 rows stays under any limit.
				id := fmt.Sprintf("extra-%d", ci)
				if _, err := s.client("writer", "cw").Push(context.Background(), framesToCommits([]ssp2.Frame{commit("c"+id, upsert(t, id, "L", "row "+id, nil))})...); err != nil {
					t.Fatal(err)
				}
				n := 1500 + ci + 1
				before := s.eng.SegmentStats()
				var wg sync.WaitGroup
				errs := make([]error, clients)
				for i := range errs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r := httpsynctest.NewReplica(s.client("reader", fmt.Sprintf("inline-storm-%d", i)), s.schema)
						r.Subscribe("todos", "todos", listL())
						r.Limits = ssp2.PullHeader{Accept: ssp2.AcceptInlineRows, LimitSnapshotRows: 500, MaxSnapshotPages: c.pagesPerReq}
						if err := r.SyncUntilIdle(context.Background(), 10); err != nil {
							errs[i] = err
							return
						}
						if len(r.Rows["todos"]) != n {
							errs[i] = fmt.Errorf("client %d has %d rows, want %d", i, len(r.Rows["todos"]), n)
						}
					}()
				}
				wg.Wait()
				if err := errors.Join(errs...); err != nil {
					t.Fatal(err)
				}
				st := s.eng.SegmentStats()
				built, reused := st.Built-before.Built, st.Reused-before.Reused
				if built != c.wantBuilt || reused != (clients-1)*c.wantBuilt {
					t.Fatalf("built %d reused %d, want %d and %d", built, reused, c.wantBuilt, (clients-1)*c.wantBuilt)
				}
			})
		}
	})
}
