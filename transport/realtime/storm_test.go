package realtime_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
	"github.com/synclane/synclane/transport/realtime"
)

// guarded is a replica Follow updates while the test reads it.
type guarded struct {
	mu sync.Mutex
	r  *httpsynctest.Replica
}

func (g *guarded) ApplyDelta(m *ssp2.Message) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.r.ApplyDelta(m)
}
func (g *guarded) CatchUp(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.r.CatchUp(ctx)
}
func (g *guarded) Cursor() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.r.Cursor()
}
func (g *guarded) ResetEpoch(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.r.ResetEpoch(ctx)
}

// rows renders the replica's todos of list as id → title@version.
func (g *guarded) rows(list string) map[string]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]string{}
	for id, r := range g.r.Rows["todos"] {
		if r.Values[1] == list {
			out[id] = fmt.Sprintf("%v@%d", r.Values[2], r.Version)
		}
	}
	return out
}

// serverRows reads the partition's todos of list from storage.
func serverRows(t *testing.T, ctx context.Context, st testStore, list string) map[string]string {
	t.Helper()
	recs, err := st.Backend().Rows.ScanRows(ctx, auth.DefaultPartition, storage.RowQuery{Table: rowTable, Scopes: map[string][]string{"list_id": {list}}, Limit: 100_000})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range recs {
		out[r.RowID] = fmt.Sprintf("%v@%d", r.Values[2], r.Version)
	}
	return out
}

func sameRows(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A reconnect storm: 20 clients connect, catch up (over HTTP or socket
// rounds), follow for a while and drop their socket (cleanly or not), five
// times each, while four writers push. At the end every client holds one
// socket, registered once on its list's key, and every replica converges
// to the server's rows through deltas and wake-ups alone.
func TestReconnectStorm(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := ctxT(t)
	const clients, rounds, writers, each = 20, 5, 4, 25
	lists := []string{"l0", "l1", "l2", "l3"}
	reps := make([]*guarded, clients)
	for i := range reps {
		reps[i] = &guarded{r: f.replica(fmt.Sprintf("actor-%d", i), fmt.Sprintf("c%d", i), lists[i%len(lists)])}
	}
	var wg sync.WaitGroup
	writersDone := make(chan struct{})
	var ww sync.WaitGroup
	for w := range writers {
		ww.Add(1)
		go func() {
			defer ww.Done()
			c := f.httpClient(fmt.Sprintf("writer-%d", w), fmt.Sprintf("w%d", w))
			for i := range each {
				// Rows are rewritten (versions move), each in its own list:
				// a row's scope column never changes (SPEC §6.2).
				id := fmt.Sprintf("w%d-%d", w, i%7)
				push(t, ctx, c, id, lists[(w+i%7)%len(lists)], fmt.Sprintf("v%d", i))
			}
		}()
	}
	go func() { ww.Wait(); close(writersDone) }()
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := reps[i]
			for round := range rounds {
				c, err := f.dial(ctx, fmt.Sprintf("actor-%d", i), fmt.Sprintf("c%d", i))
				if err != nil {
					t.Error(err)
					return
				}
				g.mu.Lock()
				if (i+round)%2 == 0 {
					g.r.Client.Rounds = c
				} else {
					g.r.Client.Rounds = nil
				}
				g.mu.Unlock()
				fctx, cancel := context.WithCancel(ctx)
				events := 0
				go func() {
					// Follow until a few events went by or the writers are done.
					select {
					case <-writersDone:
					case <-fctx.Done():
					}
					cancel()
				}()
				_ = c.Follow(fctx, g, func(any) {
					if events++; events >= 3 {
						cancel()
					}
				})
				cancel()
				if round%2 == 0 {
					c.CloseNow()
				} else {
					_ = c.Close()
				}
			}
		}()
	}
	wg.Wait()
	<-writersDone

	// Final connections: follow until converged.
	want := map[string]map[string]string{}
	for _, l := range lists {
		want[l] = serverRows(t, ctx, f.store, l)
	}
	finals := make([]*realtime.Client, clients)
	var fw sync.WaitGroup
	fctx, stop := context.WithCancel(ctx)
	for i := range clients {
		c := f.mustDial(ctx, fmt.Sprintf("actor-%d", i), fmt.Sprintf("c%d", i))
		finals[i] = c
		reps[i].mu.Lock()
		reps[i].r.Client.Rounds = c
		reps[i].mu.Unlock()
		fw.Add(1)
		go func() {
			defer fw.Done()
			_ = c.Follow(fctx, reps[i], nil)
		}()
	}
	for i, g := range reps {
		l := lists[i%len(lists)]
		waitFor(t, fmt.Sprintf("client c%d to converge", i), 20*time.Second, func() bool { return sameRows(g.rows(l), want[l]) })
	}
	// Checked while the final sockets are still followed: stopping a
	// Follow that is still in its first catch-up round closes its socket
	// (an abandoned round), which a loaded machine makes likely for the
	// last client to connect.
	sessions := f.hub.Sessions(auth.DefaultPartition)
	waitFor(t, "dropped sockets to be unregistered and the final ones registered", 30*time.Second, func() bool {
		sessions = f.hub.Sessions(auth.DefaultPartition)
		if len(sessions) != clients || f.hub.Stats().Sockets != clients {
			return false // (a socket is counted until just after it is unregistered)
		}
		for _, s := range sessions {
			if len(s.Keys) == 0 {
				return false
			}
		}
		return true
	})
	seen := map[string]int{}
	for _, s := range sessions {
		seen[s.ClientID]++
		i := 0
		fmt.Sscanf(s.ClientID, "c%d", &i)
		if len(s.Keys) != 1 || s.Keys[0] != "list:"+lists[i%len(lists)] {
			t.Errorf("%s registered on %v", s.ClientID, s.Keys)
		}
	}
	for i := range clients {
		if n := seen[fmt.Sprintf("c%d", i)]; n != 1 {
			t.Errorf("c%d registered %d times", i, n)
		}
	}
	stop()
	fw.Wait()
}

// Two engines (two "processes") on one PostgreSQL schema: a commit made
// through one reaches a socket held by the other, through LISTEN/NOTIFY.
func TestCrossProcessPostgres(t *testing.T) {
	name := pgtest.NewSchema(t)
	open := func() *postgres.Store {
		return pgtest.OpenSchema(t, name, postgres.Options{MaxConns: 4, NotifyChannel: name})
	}
	s1, s2 := open(), open()
	f1 := newFixture(t, fixtureOpts{store: s1, ownStore: true, feed: s1})
	f2 := newFixture(t, fixtureOpts{store: s2, ownStore: true, feed: s2})
	ctx := ctxT(t)
	b := f2.replica("bob", "b", "groceries")
	if err := b.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	bs := f2.mustDial(ctx, "bob", "b")
	f2.waitLive(t, "b")
	a := f1.httpClient("ada", "a")
	for i := range 3 {
		seq := push(t, ctx, a, fmt.Sprintf("t%d", i), "groceries", "milk")
		d := nextDelta(t, ctx, bs)
		cm := commits(d.Message)
		if len(cm) != 1 || cm[0].CommitSeq != seq || cm[0].ActorID != "ada" || d.Cursor() != seq {
			t.Fatalf("delta in the other process: %+v up to %d, want seq %d", cm, d.Cursor(), seq)
		}
		if err := b.ApplyDelta(d.Message); err != nil {
			t.Fatal(err)
		}
		if err := bs.Ack(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	if !sameRows(serverRows(t, ctx, s1, "groceries"), (&guarded{r: b}).rows("groceries")) {
		t.Fatal("B did not converge through cross-process deltas")
	}
}
