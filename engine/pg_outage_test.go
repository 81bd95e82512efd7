package engine_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

// A PostgreSQL outage with more idle partitions than pool connections:
// while the database is gone every push is answered at once with the
// retryable sync.internal_error "storage is unavailable; retry", and once
// it is back every partition serves within 3s (issue 48: a push
// transaction used to wait for a second pool connection while holding
// one, so MaxConns partitions whose actors had restarted during the
// outage held the whole pool until their 30s storage deadline). Nothing
// committed before the outage is lost. Two outages: the test's own
// database refusing connections with its sessions ended, and a real
// restart of a throwaway server the test owns.
func TestPostgresOutageIdlePartitionsResume(t *testing.T) {
	t.Run("database refuses connections", func(t *testing.T) {
		db := pgtest.NewDatabase(t, pgtest.URL(t))
		outageResumes(t, db.URL, db.RefuseConnections, db.AcceptConnections)
	})
	t.Run("server restart", func(t *testing.T) {
		pgtest.URL(t) // PostgreSQL tests run when PostgreSQL is configured
		srv := pgtest.StartServer(t)
		outageResumes(t, srv.URL, srv.Stop, srv.Start)
	})
}

// outageResumes runs the outage scenario on the (empty) database at url:
// down cuts it off, up brings it back (returning once it accepts
// connections).
func outageResumes(t *testing.T, url string, down, up func(testing.TB)) {
	const (
		partitions = 21 // more than the pool: every connection is contended
		maxConns   = 8
		before     = 3 // commits per partition before the outage
		resumeMax  = 3 * time.Second
	)
	st, err := postgres.Open(context.Background(), url, postgres.Options{MaxConns: maxConns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := newFixture(t, st, func(c *engine.Config) {
		c.IdleTimeout = 200 * time.Millisecond
		c.Feed = st // the LISTEN/NOTIFY notifier reconnects across the outage too
	})
	clients := make([]*client, partitions)
	for i := range clients {
		c := &client{f: f, id: engine.Identity{ActorID: "alice", Partition: fmt.Sprint("part-", i)}, cid: fmt.Sprint("c", i), wire: ssp2.WireV3, sv: 1}
		rep, err := c.sync(&ssp2.PullHeader{Accept: 1})
		if err != nil {
			t.Fatalf("epoch acquisition: %v", err)
		}
		epoch := rep.Header().LogEpoch
		c.epoch = &epoch
		for k := range before {
			id := fmt.Sprint("before-", k)
			if pr := c.push(id, upsert("tasks", id, f.row(id, "P", "x"), nil)); pr.Status != ssp2.CommitApplied {
				t.Fatalf("push %s: %+v", id, pr)
			}
		}
		clients[i] = c
	}
	eventually(t, "every partition actor passivated", func() bool { return f.eng.ActorStats().LiveActors == 0 })

	down(t)
	// Each partition's client pushes until its commit is applied: during
	// the outage every attempt must fail at once with the retryable
	// storage error; from the moment the database is back, the time to
	// the first applied push is what is measured.
	var backAt atomic.Int64 // UnixNano when up returned; 0 during the outage
	// restoring is set just before up is called: a push may apply as soon
	// as the database accepts connections, before up has returned.
	var restoring atomic.Bool
	failures := make([]atomic.Int32, partitions)
	var slowestRefusal atomic.Int64 // ns: the longest an outage answer took
	served := make([]time.Duration, partitions)
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for attempt := 0; ; attempt++ {
				if attempt > 2000 {
					t.Errorf("partition %d: no push applied after %d attempts", i, attempt)
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				sent := time.Now()
				rep, err := f.eng.Sync(ctx, c.id, mustMsg(t, c, &ssp2.PushCommit{ClientCommitID: "after",
					Operations: []ssp2.Operation{upsert("tasks", "after", f.row("after", "P", "x"), nil)}}))
				cancel()
				back, coming := backAt.Load(), restoring.Load()
				if err == nil && len(results(rep)) == 1 && results(rep)[0].Status != ssp2.CommitRejected {
					if !coming {
						t.Errorf("partition %d: a push was applied during the outage", i)
						return
					}
					if back != 0 {
						served[i] = time.Since(time.Unix(0, back))
					} // else applied while up was restoring it: at once
					return
				}
				if !coming { // answered during the outage
					se := syncerr.As(err)
					if se == nil || se.Code != syncerr.InternalError || !se.Spec().Retryable || se.Message != "storage is unavailable; retry" {
						t.Errorf("partition %d during the outage: %v, want a retryable sync.internal_error %q", i, err, "storage is unavailable; retry")
						return
					}
					failures[i].Add(1)
					for took := int64(time.Since(sent)); ; {
						if old := slowestRefusal.Load(); took <= old || slowestRefusal.CompareAndSwap(old, took) {
							break
						}
					}
				}
				time.Sleep(20 * time.Millisecond) // a client's retry interval
			}
		}()
	}
	// The outage lasts until every partition's actor has been started
	// (and failed to load) and every client has been refused a few times.
	eventually(t, "every partition refused during the outage", func() bool {
		for i := range failures {
			if failures[i].Load() < 3 {
				return false
			}
		}
		return true
	})
	restoring.Store(true)
	up(t)
	backAt.Store(time.Now().UnixNano())
	wg.Wait()
	if t.Failed() {
		return
	}
	sorted := slices.Clone(served)
	slices.Sort(sorted)
	t.Logf("outage answers: slowest %v; first applied push after the database came back, over %d partitions: min %v, median %v, max %v",
		time.Duration(slowestRefusal.Load()).Round(time.Millisecond),
		partitions, sorted[0].Round(time.Millisecond), sorted[partitions/2].Round(time.Millisecond), sorted[partitions-1].Round(time.Millisecond))
	if worst := sorted[partitions-1]; worst > resumeMax {
		t.Errorf("a partition first served %v after the database came back, want <= %v (per partition: %v)", worst, resumeMax, served)
	}
	// Nothing committed is lost: each partition holds its commits, dense.
	for i, c := range clients {
		s := c.pull(ssp2.PullHeader{Accept: 1, LimitCommits: 100}, sub("s", 0, "P"))["s"]
		if len(s.commits) != before+1 || s.end.NextCursor != before+1 {
			t.Errorf("partition %d: pull saw %d commits (cursor %d), want %d", i, len(s.commits), s.end.NextCursor, before+1)
		}
	}
}
