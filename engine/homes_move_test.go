package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/homes"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

// moveFixture is an engine over two homes, "main" and "b" (a database of
// its own on the test server), with a partition placed in main that a
// first client pulled and pushed to.
type moveFixture struct {
	f     *fixture
	h     *homes.Homes
	b     *postgres.Store
	part  string
	first *client
	epoch string
}

func newMoveFixture(t *testing.T) *moveFixture {
	ctx := context.Background()
	mainSt := pgtest.Open(t)
	db := pgtest.NewDatabase(t, pgtest.URL(t))
	second, err := postgres.Open(ctx, db.URL, postgres.Options{MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Close() })
	h, err := homes.Open(mainSt, []homes.Home{{Name: "b", Store: second}}, homes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	f := newFixture(t, h)
	var part string
	for i := 0; part == ""; i++ {
		if p := fmt.Sprint("mv-", i); homes.Rendezvous(h.Names(), p) == homes.Main {
			part = p
		}
	}
	c := &client{f: f, id: engine.Identity{ActorID: "alice", Partition: part}, cid: "first", wire: ssp2.WireV3, sv: 1}
	rep, err := c.sync(&ssp2.PullHeader{Accept: 1})
	if err != nil {
		t.Fatal(err)
	}
	epoch := rep.Header().LogEpoch
	c.epoch = &epoch
	for i := range 20 {
		id := fmt.Sprint("seed-", i)
		if pr := c.push(id, upsert("tasks", id, f.row(id, "P", "x"), nil)); pr.Status != ssp2.CommitApplied {
			t.Fatalf("seed push: %+v", pr)
		}
	}
	return &moveFixture{f: f, h: h, b: second, part: part, first: c, epoch: epoch}
}

// pushRetrying pushes one commit, retrying while the answer is a
// retryable unavailability (the move's pause); it returns the status.
func (m *moveFixture) pushRetrying(ctx context.Context, c *client, ccid string) (ssp2.CommitStatus, int, error) {
	retries := 0
	for {
		rep, err := m.f.eng.Sync(ctx, c.id, mustMsg(nil, c, &ssp2.PushCommit{ClientCommitID: ccid,
			Operations: []ssp2.Operation{upsert("tasks", ccid, m.f.row(ccid, "P", "x"), nil)}}))
		if err != nil {
			se := syncerr.As(err)
			if errors.Is(err, syncerr.ErrUnavailable) && se != nil && se.Spec().Retryable && retries < 1000 {
				retries++
				time.Sleep(2 * time.Millisecond) // the client's back-off
				continue
			}
			return 0, retries, err
		}
		rs := results(rep)
		if len(rs) != 1 {
			return 0, retries, fmt.Errorf("push %s: %d results", ccid, len(rs))
		}
		return rs[0].Status, retries, nil
	}
}

// pullAll pulls every commit from cursor on, page by page.
func pullAll(t *testing.T, c *client, cursor int64) ([]*ssp2.Commit, *ssp2.SubStart) {
	t.Helper()
	var out []*ssp2.Commit
	var first *ssp2.SubStart
	for {
		s := c.pull(ssp2.PullHeader{Accept: 1, LimitCommits: 500}, sub("s", cursor, "P"))["s"]
		if first == nil {
			first = s.start
		}
		out = append(out, s.commits...)
		if len(s.commits) == 0 || s.end == nil || s.end.NextCursor == cursor {
			return out, first
		}
		cursor = s.end.NextCursor
	}
}

// A partition moved from main to home b under 8 concurrent writers,
// through the engine: every acknowledged commit is in the log once, the
// seqs are dense, the log epoch is the one before the move, a client that
// pulled before the move pulls incrementally after it (no reset), the
// directory names b, and main holds nothing of the partition. Writers
// meet at most a retryable 503 (partition_moving) during the switch.
func TestMovePartitionUnderWriters(t *testing.T) {
	ctx := context.Background()
	m := newMoveFixture(t)
	before, _ := pullAll(t, m.first, 0)
	cursor := before[len(before)-1].CommitSeq

	const writers, each = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	var mu sync.Mutex
	acked := map[string]bool{}
	retried := 0
	start := make(chan struct{})
	// The move starts once a quarter of the commits are acknowledged.
	quarter := make(chan struct{})
	var quarterOnce sync.Once
	for w := range writers {
		c := &client{f: m.f, id: engine.Identity{ActorID: "alice", Partition: m.part}, cid: fmt.Sprint("w", w), wire: ssp2.WireV3, sv: 1, epoch: &m.epoch}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range each {
				id := fmt.Sprintf("w%d-%d", w, i)
				st, n, err := m.pushRetrying(ctx, c, id)
				if err != nil {
					errs <- err
					return
				}
				if st != ssp2.CommitApplied {
					errs <- fmt.Errorf("push %s: status %v", id, st)
					return
				}
				mu.Lock()
				acked[id] = true
				retried += n
				if len(acked) >= writers*each/4 {
					quarterOnce.Do(func() { close(quarter) })
				}
				mu.Unlock()
			}
		}()
	}
	close(start)
	<-quarter
	res, err := m.h.Move(ctx, m.part, "b", homes.MoveOptions{})
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if err != nil {
		t.Fatalf("move: %v", err)
	}
	t.Logf("move: %+v; writers retried %d times", res, retried)
	if res.MaxSeq >= int64(20+writers*each) {
		t.Fatalf("the switch saw max seq %d: every commit was made before it, the test proves nothing", res.MaxSeq)
	}
	if home, _, err := m.h.HomeOf(ctx, m.part); err != nil || home != "b" {
		t.Fatalf("directory names %q (%v), want b", home, err)
	}
	var left int
	if err := m.h.Main().Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM sync_commits WHERE partition = $1) + (SELECT count(*) FROM sync_clients WHERE partition = $1) + (SELECT count(*) FROM sync_partitions WHERE partition = $1)`, m.part).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("main still holds %d rows of the moved partition", left)
	}

	// The client that pulled before the move pulls on from its cursor.
	after, start2 := pullAll(t, m.first, cursor)
	if start2 == nil || start2.Status != ssp2.SubActive || start2.Bootstrap {
		t.Fatalf("incremental pull after the move: start %+v, want no reset", start2)
	}
	if rep, err := m.first.sync(&ssp2.PullHeader{Accept: 1}); err != nil || rep.Header().LogEpoch != m.epoch {
		t.Fatalf("log epoch after the move %q (%v), want %q", rep.Header().LogEpoch, err, m.epoch)
	}
	seen := map[string]bool{}
	next := cursor + 1
	for _, c := range after {
		if c.CommitSeq != next {
			t.Fatalf("commit seq %d, want %d (dense)", c.CommitSeq, next)
		}
		next++
		for _, ch := range c.Changes {
			if seen[ch.RowID] {
				t.Fatalf("row %s committed twice", ch.RowID)
			}
			seen[ch.RowID] = true
		}
	}
	for id := range acked {
		if !seen[id] {
			t.Errorf("acknowledged commit %s lost", id)
		}
	}
	if len(seen) != writers*each || len(after) != writers*each {
		t.Fatalf("pulled %d commits of %d rows, want %d", len(after), len(seen), writers*each)
	}
}

// A move stopped after each of its steps (the mover gone, as kill -9
// leaves it) is finished or undone by running it again: exactly one home
// holds the partition, writes go on, and nothing is lost.
func TestMoveInterruptedThenRerun(t *testing.T) {
	for step := 1; step <= 6; step++ {
		t.Run(fmt.Sprint("after step ", step), func(t *testing.T) {
			ctx := context.Background()
			m := newMoveFixture(t)
			_, err := m.h.Move(ctx, m.part, "b", homes.MoveOptions{StopAfter: step})
			if !homes.IsStopped(err) {
				t.Fatalf("move stopped after step %d: %v", step, err)
			}
			// A write while the move is stopped: served (before the fence),
			// or refused with a retryable 503 (fenced, not switched).
			c := &client{f: m.f, id: engine.Identity{ActorID: "alice", Partition: m.part}, cid: "during", wire: ssp2.WireV3, sv: 1, epoch: &m.epoch}
			_, err = m.f.eng.Sync(ctx, c.id, mustMsg(nil, c, &ssp2.PushCommit{ClientCommitID: "during",
				Operations: []ssp2.Operation{upsert("tasks", "during", m.f.row("during", "P", "x"), nil)}}))
			if err != nil && !errors.Is(err, syncerr.ErrUnavailable) {
				t.Fatalf("push while stopped after step %d: %v", step, err)
			}
			// A push whose only commit is rejected (a stale base version)
			// writes only its idempotency record: refused as well while fenced.
			_, rerr := m.f.eng.Sync(ctx, c.id, mustMsg(nil, c, &ssp2.PushCommit{ClientCommitID: "stale",
				Operations: []ssp2.Operation{upsert("tasks", "seed-0", m.f.row("seed-0", "P", "y"), ver(999))}}))
			if fenced := step == 4 || step == 5; fenced != (rerr != nil) || (rerr != nil && !errors.Is(rerr, syncerr.ErrUnavailable)) {
				t.Fatalf("rejected push while stopped after step %d: %v", step, rerr)
			}
			// Fenced and not switched (after steps 4 and 5): refused.
			if fenced := step == 4 || step == 5; fenced != (err != nil) {
				t.Fatalf("push while stopped after step %d: %v", step, err)
			}
			if refused := m.h.Stats()[0].MoveRefused; (err != nil) != (refused > 0) {
				t.Fatalf("main's move guard refused %d writes; the push's error: %v", refused, err)
			}
			want := ssp2.CommitCached // taken before the re-run: its idempotency record moved too
			if err != nil {
				want = ssp2.CommitApplied
			}
			res, err := m.h.Move(ctx, m.part, "b", homes.MoveOptions{})
			if err != nil {
				t.Fatalf("re-run: %v", err)
			}
			t.Logf("re-run: recovered %q", res.Recovered)
			if st, _, err := m.pushRetrying(ctx, c, "during"); err != nil || st != want {
				t.Fatalf("push after the re-run: %v %v, want status %v", st, err, want)
			}
			if home, _, err := m.h.HomeOf(ctx, m.part); err != nil || home != "b" {
				t.Fatalf("directory names %q (%v), want b", home, err)
			}
			var inMain, inB int
			q := `SELECT count(*) FROM sync_commits WHERE partition = $1`
			if err := m.h.Main().Pool().QueryRow(ctx, q, m.part).Scan(&inMain); err != nil {
				t.Fatal(err)
			}
			if err := m.b.Pool().QueryRow(ctx, q, m.part).Scan(&inB); err != nil {
				t.Fatal(err)
			}
			if inMain != 0 || inB != 21 {
				t.Fatalf("commits: main %d, b %d; want 0 and 21", inMain, inB)
			}
			all, _ := pullAll(t, m.first, 0)
			for i, c := range all {
				if c.CommitSeq != int64(i+1) {
					t.Fatalf("commit %d has seq %d", i, c.CommitSeq)
				}
			}
			if len(all) != 21 {
				t.Fatalf("pulled %d commits, want 21", len(all))
			}
		})
	}
}

// RebalancePlan evens the homes out: six partitions gathered in main by
// moves give three moves to b, after which the homes hold three each and
// the plan is empty.
func TestRebalance(t *testing.T) {
	ctx := context.Background()
	m := newMoveFixture(t) // one partition, in main
	for i := range 5 {
		p := fmt.Sprint("rb-", i)
		if _, err := m.h.TouchPartition(ctx, p, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := m.h.Move(ctx, p, homes.Main, homes.MoveOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	plan, err := m.h.RebalancePlan(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 3 {
		t.Fatalf("plan %+v, want 3 moves", plan)
	}
	for _, mv := range plan {
		if mv.From != homes.Main || mv.To != "b" {
			t.Fatalf("planned move %+v, want main -> b", mv)
		}
		if _, err := m.h.Move(ctx, mv.Partition, mv.To, homes.MoveOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	counts, err := m.h.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(counts) != "[{main 3} {b 3}]" {
		t.Fatalf("counts after the rebalance: %v", counts)
	}
	if plan, err := m.h.RebalancePlan(ctx, 0); err != nil || len(plan) != 0 {
		t.Fatalf("plan after the rebalance: %+v %v", plan, err)
	}
	if _, err := m.h.Move(ctx, m.part, "nowhere", homes.MoveOptions{}); err == nil {
		t.Fatal("a move to an unknown home succeeded")
	}
}
