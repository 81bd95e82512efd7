package engine_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

// Two engines with separate pools on one PostgreSQL database behave as one
// writer per partition: dense, unique commit seqs under concurrent writers
// on both, one applied + one cached for a clientCommitId pushed to both at
// once, and every commit visible through either.
func TestTwoEnginesOnOnePostgres(t *testing.T) {
	schemaName := pgtest.NewSchema(t)
	fa := newFixture(t, pgtest.OpenSchema(t, schemaName, postgres.Options{MaxConns: 8}))
	fb := newFixture(t, pgtest.OpenSchema(t, schemaName, postgres.Options{MaxConns: 8}))

	const writers, each = 16, 10
	var wg sync.WaitGroup
	var mu sync.Mutex
	var seqs []int64
	for _, f := range []*fixture{fa, fb} {
		for w := range writers {
			c := f.client(fmt.Sprintf("actor-%p-%d", f, w), fmt.Sprintf("client-%p-%d", f, w))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					id := fmt.Sprintf("%s-%d", c.cid, i)
					rep, err := c.f.eng.Sync(context.Background(), c.id, mustMsg(t, c, &ssp2.PushCommit{ClientCommitID: id,
						Operations: []ssp2.Operation{upsert("tasks", id, c.f.row(id, "P", "x"), nil)}}))
					if err != nil {
						t.Error(err)
						return
					}
					pr := results(rep)[0]
					if pr.Status != ssp2.CommitApplied {
						t.Errorf("%s: %+v", id, pr)
						return
					}
					mu.Lock()
					seqs = append(seqs, *pr.CommitSeq)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	if len(seqs) != 2*writers*each {
		t.Fatalf("%d commits applied, want %d", len(seqs), 2*writers*each)
	}
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("seqs not dense and unique: position %d holds %d", i, s)
		}
	}

	// The same clientCommitId pushed to both at once.
	ca := fa.client("dup-actor", "dup-client")
	cb := &client{f: fb, id: ca.id, cid: ca.cid, epoch: ca.epoch, wire: ssp2.WireV3, sv: 1}
	for round := range 10 {
		ccid := fmt.Sprintf("dup-%d", round)
		var res [2]*ssp2.PushResult
		var rw sync.WaitGroup
		for i, c := range []*client{ca, cb} {
			rw.Add(1)
			go func() {
				defer rw.Done()
				rep, err := c.f.eng.Sync(context.Background(), c.id, mustMsg(t, c, &ssp2.PushCommit{ClientCommitID: ccid,
					Operations: []ssp2.Operation{upsert("tasks", ccid, c.f.row(ccid, "P", "x"), nil)}}))
				if err != nil {
					t.Error(err)
					return
				}
				res[i] = results(rep)[0]
			}()
		}
		rw.Wait()
		if res[0] == nil || res[1] == nil {
			t.FailNow()
		}
		st := map[ssp2.CommitStatus]int{res[0].Status: 1}
		st[res[1].Status]++
		if st[ssp2.CommitApplied] != 1 || st[ssp2.CommitCached] != 1 || *res[0].CommitSeq != *res[1].CommitSeq {
			t.Fatalf("round %d: %+v / %+v, want one applied and one cached with the same seq", round, res[0], res[1])
		}
	}

	// Every commit is visible through either engine.
	total := int64(2*writers*each + 10)
	for _, f := range []*fixture{fa, fb} {
		c := f.client("reader", "reader-"+fmt.Sprintf("%p", f))
		s := c.pull(ssp2.PullHeader{Accept: 1, LimitCommits: 1000}, sub("s", 0, "P"))["s"]
		if int64(len(s.commits)) != total || s.end.NextCursor != total {
			t.Fatalf("pull saw %d commits (cursor %d), want %d", len(s.commits), s.end.NextCursor, total)
		}
	}
}

// Killing one instance mid-push (its pool closed under in-flight pushes)
// leaves nothing half-written, and the other instance keeps serving.
func TestKilledEngineLeavesNoHalfCommit(t *testing.T) {
	schemaName := pgtest.NewSchema(t)
	stA, err := postgres.Open(context.Background(), pgtest.URL(t), postgres.Options{Schema: schemaName, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	fa := newFixture(t, stA)
	fb := newFixture(t, pgtest.OpenSchema(t, schemaName, postgres.Options{MaxConns: 4}))

	var wg sync.WaitGroup
	applied := make(chan int64, 1000)
	started := make(chan struct{})
	var once sync.Once
	for w := range 4 {
		c := fa.client(fmt.Sprintf("a%d", w), fmt.Sprintf("ca%d", w))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				id := fmt.Sprintf("%s-%d", c.cid, i)
				ops := []ssp2.Operation{
					upsert("tasks", id+"-x", c.f.row(id+"-x", "P", "x"), nil),
					upsert("tasks", id+"-y", c.f.row(id+"-y", "P", "y"), nil),
				}
				rep, err := c.f.eng.Sync(context.Background(), c.id, mustMsg(t, c, &ssp2.PushCommit{ClientCommitID: id, Operations: ops}))
				once.Do(func() { close(started) })
				if err != nil {
					return // the instance died under us
				}
				if pr := results(rep)[0]; pr.Status == ssp2.CommitApplied {
					applied <- *pr.CommitSeq
				}
			}
		}()
	}
	<-started
	stA.Close() // kill: the pool goes away under in-flight pushes
	wg.Wait()
	close(applied)

	// The survivor serves a push and sees a consistent log.
	cb := fb.client("b", "cb")
	if pr := cb.push("after-kill", upsert("tasks", "survivor", fb.row("survivor", "P", "ok"), nil)); pr.Status != ssp2.CommitApplied {
		t.Fatalf("survivor push: %+v", pr)
	}
	s := cb.pull(ssp2.PullHeader{Accept: 1, LimitCommits: 1000}, sub("s", 0, "P"))["s"]
	seen := map[int64]bool{}
	for i, c := range s.commits {
		if c.CommitSeq != int64(i+1) {
			t.Fatalf("log has a gap: position %d holds seq %d", i, c.CommitSeq)
		}
		seen[c.CommitSeq] = true
		if c.ActorID != "b" && len(c.Changes) != 2 {
			t.Fatalf("commit %d is half-written: %d of 2 changes", c.CommitSeq, len(c.Changes))
		}
	}
	for seq := range applied {
		if !seen[seq] {
			t.Fatalf("commit %d was answered applied but is not in the log", seq)
		}
	}
	rows, err := fb.store.Rows.ScanRows(context.Background(), "p1", storage.RowQuery{Table: fb.schema.Table("tasks"), Scopes: map[string][]string{"project_id": {"P"}}, Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	if want := 2*(len(s.commits)-1) + 1; len(rows) != want {
		t.Fatalf("%d rows for %d commits: rows and log disagree", len(rows), len(s.commits))
	}
}

// A commit made through one engine reaches the other engine's OnCommit
// hook through the PostgreSQL commit feed.
func TestCommitFeedAcrossEngines(t *testing.T) {
	schemaName := pgtest.NewSchema(t)
	fa := newFixture(t, pgtest.OpenSchema(t, schemaName, postgres.Options{MaxConns: 4}))
	stB := pgtest.OpenSchema(t, schemaName, postgres.Options{MaxConns: 4})
	seen := make(chan int64, 16)
	fb := newFixture(t, stB, func(c *engine.Config) {
		c.Feed = stB
		c.OnCommit = func(p string, seq int64) {
			if p == "p1" {
				seen <- seq
			}
		}
	})
	// The feed subscribes asynchronously: keep committing through A until
	// B reports one of A's commits.
	ca := fa.client("alice", "ca")
	deadline := time.After(20 * time.Second)
	for i := 0; ; i++ {
		ccid := fmt.Sprintf("c%d", i)
		pr := ca.push(ccid, upsert("tasks", ccid, fa.row(ccid, "P", "x"), nil))
		select {
		case seq := <-seen:
			if seq < 1 || seq > *pr.CommitSeq {
				t.Fatalf("feed reported seq %d, last commit was %d", seq, *pr.CommitSeq)
			}
			if fb.eng.Metrics().RemoteCommits == 0 {
				t.Fatal("remote commit not counted")
			}
			return
		case <-deadline:
			t.Fatal("engine B never heard of engine A's commits")
		case <-time.After(50 * time.Millisecond):
		}
	}
}
