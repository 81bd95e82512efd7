package main

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/syncerr"
)

// TestKill9MidStormKeepsAnsweredBindings: many fresh clients bootstrap
// concurrently (their bindings written in shared, grouped writes) and the
// server is killed with SIGKILL while requests are in flight. Restarted on
// the same data, every client whose pull was answered before the kill is
// still bound to its actor: the clientId as another actor is refused
// (sync.invalid_client_id), as its own actor it is served. A binding is
// answered only once the grouped write holding it is durable, so none of
// them can be lost; clients not answered may or may not be bound, and are
// not checked. SQLite always; PostgreSQL when configured.
func TestKill9MidStormKeepsAnsweredBindings(t *testing.T) {
	for name, store := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			p := startProc(t, store...)
			const clients, answeredBeforeKill = 48, 300
			var (
				mu       sync.Mutex
				answered = map[string]string{} // clientId → actor
				stop     atomic.Bool
				wg       sync.WaitGroup
				enough   = make(chan struct{})
				once     sync.Once
			)
			for g := range clients {
				wg.Go(func() {
					actor := fmt.Sprint("actor-", g)
					for n := 0; !stop.Load(); n++ {
						cid := fmt.Sprintf("fresh-%d-%d", g, n)
						if err := pullOnce(devClient(p.base, actor, cid)); err != nil {
							if stop.Load() {
								return // the kill: unanswered, not checked
							}
							t.Errorf("%s before the kill: %v", cid, err)
							return
						}
						mu.Lock()
						answered[cid] = actor
						if len(answered) >= answeredBeforeKill {
							once.Do(func() { close(enough) })
						}
						mu.Unlock()
					}
				})
			}
			select {
			case <-enough:
			case <-time.After(60 * time.Second):
				t.Error("the storm answered too few bootstraps in a minute")
			}
			stop.Store(true) // set first: errors after it are the kill's
			p.kill(t)        // SIGKILL with requests in flight
			wg.Wait()
			if t.Failed() {
				return
			}
			mu.Lock()
			got := len(answered)
			mu.Unlock()
			t.Logf("%d bindings answered before kill -9", got)

			p = startProc(t, store...)
			ids := make(chan string)
			var checked atomic.Int64
			var cw sync.WaitGroup
			for range 8 {
				cw.Go(func() {
					for cid := range ids {
						actor := answered[cid]
						err := pullOnce(devClient(p.base, "intruder", cid))
						if syncerr.CodeOf(err) != syncerr.InvalidClientID {
							t.Errorf("%s (answered for %s) as another actor after kill -9: %v, want %s", cid, actor, err, syncerr.InvalidClientID)
							continue
						}
						if err := pullOnce(devClient(p.base, actor, cid)); err != nil {
							t.Errorf("%s as its own actor %s after kill -9: %v", cid, actor, err)
							continue
						}
						checked.Add(1)
					}
				})
			}
			for cid := range answered {
				ids <- cid
			}
			close(ids)
			cw.Wait()
			if n := checked.Load(); n != int64(got) {
				t.Fatalf("%d of %d answered bindings survived kill -9", n, got)
			}
		})
	}
}
