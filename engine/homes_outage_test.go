package engine_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/homes"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/transport/httperr"
)

// Partitions spread over two PostgreSQL databases (issue 46): while the
// second database is unreachable, a push to a partition it holds is
// answered at once with the retryable sync.internal_error "storage is
// unavailable; retry", details reason "database_unavailable", which HTTP
// answers 503 with Retry-After; a partition of the first database keeps
// serving pushes and pulls meanwhile; once the second is back its
// partitions serve again and nothing committed before the outage is
// lost. Two outages: a second database on the test server refusing
// connections with its sessions ended, and a second PostgreSQL server the
// test owns, stopped and started again (nothing assumes one server).
func TestHomeUnreachableOthersServe(t *testing.T) {
	t.Run("database refuses connections", func(t *testing.T) {
		db := pgtest.NewDatabase(t, pgtest.URL(t))
		homeOutage(t, db.URL, db.RefuseConnections, db.AcceptConnections)
	})
	t.Run("second server stopped", func(t *testing.T) {
		pgtest.URL(t) // PostgreSQL tests run when PostgreSQL is configured
		srv := pgtest.StartServer(t)
		homeOutage(t, srv.URL, srv.Stop, srv.Start)
	})
}

// homeOutage runs the scenario with home "b" on the (empty) database at
// url: down cuts it off, up brings it back.
func homeOutage(t *testing.T, url string, down, up func(testing.TB)) {
	ctx := context.Background()
	mainSt := pgtest.Open(t)
	second, err := postgres.Open(ctx, url, postgres.Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Close() })
	h, err := homes.Open(mainSt, []homes.Home{{Name: "b", Store: second}}, homes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	f := newFixture(t, h, func(c *engine.Config) { c.IdleTimeout = 200 * time.Millisecond })

	// A partition of each home, by the placement rule.
	names := h.Names()
	partOf := map[string]string{}
	for i := 0; len(partOf) < 2; i++ {
		p := fmt.Sprint("part-", i)
		if home := homes.Rendezvous(names, p); partOf[home] == "" {
			partOf[home] = p
		}
	}
	clients := map[string]*client{}
	for home, p := range partOf {
		c := &client{f: f, id: engine.Identity{ActorID: "alice", Partition: p}, cid: "c-" + home, wire: ssp2.WireV3, sv: 1}
		rep, err := c.sync(&ssp2.PullHeader{Accept: 1})
		if err != nil {
			t.Fatalf("%s: epoch acquisition: %v", home, err)
		}
		epoch := rep.Header().LogEpoch
		c.epoch = &epoch
		if pr := c.push("before", upsert("tasks", "before", f.row("before", "P", "x"), nil)); pr.Status != ssp2.CommitApplied {
			t.Fatalf("%s: push before the outage: %+v", home, pr)
		}
		if got, _, err := h.HomeOf(ctx, p); err != nil || got != home {
			t.Fatalf("directory names %q (%v) for %s, want %q", got, err, p, home)
		}
		clients[home] = c
	}

	down(t)
	b, m := clients["b"], clients[homes.Main]
	for attempt := range 3 {
		ccid := fmt.Sprint("during-", attempt)
		started := time.Now()
		_, err := b.f.eng.Sync(ctx, b.id, mustMsg(t, b, &ssp2.PushCommit{ClientCommitID: ccid,
			Operations: []ssp2.Operation{upsert("tasks", ccid, f.row(ccid, "P", "x"), nil)}}))
		se := syncerr.As(err)
		if err == nil || se.Code != syncerr.InternalError || !se.Spec().Retryable || !errors.Is(err, syncerr.ErrUnavailable) ||
			!strings.Contains(string(se.Details), `"reason":"database_unavailable"`) {
			t.Fatalf("push to the unreachable home: %v (details %s), want an unavailable sync.internal_error, reason database_unavailable", err, se.Details)
		}
		rec := httptest.NewRecorder()
		httperr.Write(rec, err)
		if rec.Code != 503 || rec.Header().Get("Retry-After") == "" {
			t.Fatalf("HTTP answer %d (Retry-After %q), want 503 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
		}
		t.Logf("refused in %v", time.Since(started).Round(time.Millisecond))
		// The other home serves.
		if pr := m.push(ccid, upsert("tasks", ccid, f.row(ccid, "P", "x"), nil)); pr.Status != ssp2.CommitApplied {
			t.Fatalf("push to main during the outage: %+v", pr)
		}
	}
	if s := m.pull(ssp2.PullHeader{Accept: 1, LimitCommits: 100}, sub("s", 0, "P"))["s"]; len(s.commits) != 4 {
		t.Fatalf("pull of main's partition during the outage saw %d commits, want 4", len(s.commits))
	}

	up(t)
	eventually(t, "the second home serves again", func() bool {
		rep, err := b.f.eng.Sync(ctx, b.id, mustMsg(t, b, &ssp2.PushCommit{ClientCommitID: "after",
			Operations: []ssp2.Operation{upsert("tasks", "after", f.row("after", "P", "x"), nil)}}))
		return err == nil && len(results(rep)) == 1 && results(rep)[0].Status == ssp2.CommitApplied
	})
	if s := b.pull(ssp2.PullHeader{Accept: 1, LimitCommits: 100}, sub("s", 0, "P"))["s"]; len(s.commits) != 2 || s.end.NextCursor != 2 {
		t.Fatalf("pull of the second home's partition saw %d commits (cursor %d), want 2", len(s.commits), s.end.NextCursor)
	}
}
