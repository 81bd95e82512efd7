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
				s := startServerWith(t, s0.be, func(cfg *engine.Config) { cfg.Segments.InlineMaxBytes = c.inlineLimit })
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
				before := s.eng.Segments().Stats()
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
				st := s.eng.Segments().Stats()
				built, reused := st.Built-before.Built, st.Reused-before.Reused
				if built != c.wantBuilt || reused != (clients-1)*c.wantBuilt {
					t.Fatalf("built %d reused %d, want %d and %d", built, reused, c.wantBuilt, (clients-1)*c.wantBuilt)
				}
			})
		}
	})
}

// TestReconnectsEncodeTheirInlinePageOnce: clients reconnecting on one
// scope (a fresh pull of a 2,000-row table that fits one inline page, each
// accepting every lane as the official client does) cost one encode of the
// page however many reconnect, at once or one after another, and every one
// converges. The page is kept for its pin and log epoch only: after a
// commit the next reconnect patches the page kept for the old pin with the
// commit (encoding nothing), after an epoch rotation or a restore followed
// by a different commit at the same seq it encodes again, and each carries
// exactly the rows that are there now.
func TestReconnectsEncodeTheirInlinePageOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		const rows = 2000
		seed(t, s, rows)
		limits := ssp2.PullHeader{Accept: ssp2.AcceptInlineRows | ssp2.AcceptRefRows | ssp2.AcceptSQLite, LimitSnapshotRows: 5000, MaxSnapshotPages: 1}
		round := 0
		// reconnect has n fresh clients pull the scope at once and checks
		// what they cost and got: want rows each, titles of the named rows.
		reconnect := func(what string, n int, wantEncoded, wantPatched uint64, want int, titles map[string]string) {
			t.Helper()
			round++
			before := s.eng.Segments().Stats()
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := httpsynctest.NewReplica(s.client("reader", fmt.Sprintf("reconnect-%d-%d", round, i)), s.schema)
					r.Subscribe("todos", "todos", listL())
					r.Limits = limits
					if err := r.SyncUntilIdle(ctx, 10); err != nil {
						errs[i] = err
						return
					}
					got := r.Rows["todos"]
					if len(got) != want {
						errs[i] = fmt.Errorf("client %d has %d rows, want %d", i, len(got), want)
						return
					}
					for id, title := range titles {
						if row, ok := got[id]; title == "" && ok || title != "" && (!ok || row.Values[2] != title) {
							errs[i] = fmt.Errorf("client %d: row %s is %+v (present %v), want title %q", i, id, row.Values, ok, title)
							return
						}
					}
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			after := s.eng.Segments().Stats()
			enc, patched, reused := after.Encoded-before.Encoded, after.Patched-before.Patched, after.InlineReused-before.InlineReused
			if enc != wantEncoded || patched != wantPatched || reused != uint64(n)-wantEncoded-wantPatched {
				t.Fatalf("%s: %d clients encoded %d pages, patched %d and reused %d, want %d, %d and %d", what, n, enc, patched, reused,
					wantEncoded, wantPatched, uint64(n)-wantEncoded-wantPatched)
			}
			if after.Built != before.Built {
				t.Fatalf("%s: %d segments stored for a page under the inline limit", what, after.Built-before.Built)
			}
		}
		reconnect("a storm of reconnects", 8, 1, 0, rows, nil)
		reconnect("reconnects after the storm", 3, 0, 0, rows, nil)

		w := s.client("writer", "cw")
		push1(t, w, commit("c-moved", upsert(t, "t00000", "L", "moved the pin", nil)))
		reconnect("after a commit", 4, 0, 1, rows, map[string]string{"t00000": "moved the pin"})

		if _, err := s.eng.RotateEpoch(ctx, "team"); err != nil {
			t.Fatal(err)
		}
		reconnect("after an epoch rotation", 4, 1, 0, rows, map[string]string{"t00000": "moved the pin"})

		// A restore brings the log back to the capture; the next commit
		// takes the same seq as one made before it, with other rows.
		if err := s.eng.Retention().Capture(ctx, "team"); err != nil {
			t.Fatal(err)
		}
		w = s.client("writer", "cw-before-restore")
		push1(t, w, commit("c-lost", upsert(t, "lost", "L", "lost with the restore", nil)))
		reconnect("before the restore", 2, 0, 1, rows+1, map[string]string{"lost": "lost with the restore"})
		if _, err := s.eng.Retention().Restore(ctx, "team"); err != nil {
			t.Fatal(err)
		}
		w = s.client("writer", "cw-after-restore")
		push1(t, w, commit("c-kept", upsert(t, "kept", "L", "written after the restore", nil)))
		reconnect("after the restore", 2, 1, 0, rows+1, map[string]string{"lost": "", "kept": "written after the restore"})
	})
}
