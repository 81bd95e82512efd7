package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

func openGroupStore(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.EnsureSchema(context.Background(), schema.MustDemo()); err != nil {
		t.Fatal(err)
	}
	return s
}

func pushOne(ctx context.Context, s *Store, partition, id string, rollback bool) error {
	tx, err := s.BeginPush(ctx, partition)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if err := stageOne(ctx, tx, id); err != nil {
		return err
	}
	if rollback {
		return tx.Rollback(ctx)
	}
	return tx.Commit(ctx)
}

// stageOne writes row id of todos and appends its commit (client "c",
// client commit id id) with its idempotency record, uncommitted.
func stageOne(ctx context.Context, tx storage.PushTx, id string) error {
	t := schema.MustDemo().Table("todos")
	if err := tx.PutRow(ctx, t, storage.RowRecord{RowID: id, Version: 1, Values: ssp2.Row{id, "L", "x", false, int64(0), int64(0)}}); err != nil {
		return err
	}
	seq := tx.Partition().MaxCommitSeq + 1
	if err := tx.AppendCommit(ctx, storage.CommitRecord{Seq: seq, ActorID: "a", ClientID: "c", ClientCommitID: id,
		Changes: []storage.ChangeRecord{{Table: "todos", RowID: id, Op: ssp2.OpUpsert, RowVersion: 1, Scopes: map[string]string{"list_id": "L"}, Row: []byte{0}}}}); err != nil {
		return err
	}
	return tx.PutIdempotency(ctx, storage.IdempotencyRecord{ClientID: "c", ClientCommitID: id, Status: ssp2.CommitApplied, CommitSeq: seq, Result: []byte{1}})
}

// waitForPushWaiter returns once a BeginPush is queued on the writer.
func waitForPushWaiter(s *Store) {
	for s.pushWaiters.Load() == 0 {
		runtime.Gosched()
	}
}

// wantPushed checks the partition's committed MaxCommitSeq and which of
// the rows ids exist.
func wantPushed(t *testing.T, s *Store, partition string, maxSeq int64, present, absent []string) {
	t.Helper()
	ctx := context.Background()
	info, err := s.ReadPartition(ctx, partition)
	if err != nil {
		t.Fatal(err)
	}
	if info.MaxCommitSeq != maxSeq {
		t.Fatalf("partition %s: MaxCommitSeq %d, want %d", partition, info.MaxCommitSeq, maxSeq)
	}
	rows, err := s.ScanRows(ctx, partition, storage.RowQuery{Table: schema.MustDemo().Table("todos"), Scopes: map[string][]string{}, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, r := range rows {
		have[r.RowID] = true
	}
	for _, id := range present {
		if !have[id] {
			t.Fatalf("partition %s: row %s missing", partition, id)
		}
	}
	for _, id := range absent {
		if have[id] {
			t.Fatalf("partition %s: row %s present", partition, id)
		}
	}
}

// The writer fence is checked per member at Commit, not by the group's
// flush: a push transaction of a fenced partition fails alone with
// storage.ErrWriterFenced and keeps nothing, whether it opened the commit
// group or joined it, and the other push transaction commits.
func TestGroupCommitFencedMemberFailsAlone(t *testing.T) {
	for _, tc := range []struct {
		name        string
		fencedFirst bool
	}{
		{"fenced member joins the group", false},
		{"fenced member opens the group", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := openGroupStore(t, filepath.Join(t.TempDir(), "db.sqlite"))
			// running version 1, fence 2: pushes to "fenced" are refused
			if _, err := s.DeclareCheckpoint(ctx, storage.CheckpointDeclaration{Partition: "fenced", Name: "cp", SchemaVersion: 2}, 1); err != nil {
				t.Fatal(err)
			}
			firstP, secondP := "open", "fenced"
			if tc.fencedFirst {
				firstP, secondP = "fenced", "open"
			}
			first, err := s.BeginPush(ctx, firstP)
			if err != nil {
				t.Fatal(err)
			}
			if err := stageOne(ctx, first, "r1"); err != nil {
				t.Fatal(err)
			}
			type result struct {
				joined bool // second found first's group open
				err    error
			}
			second := make(chan result, 1)
			go func() {
				tx, err := s.BeginPush(ctx, secondP)
				if err != nil {
					second <- result{err: err}
					return
				}
				joined := s.group.has(firstP) // we hold the writer
				if err := stageOne(ctx, tx, "r2"); err != nil {
					tx.Rollback(ctx)
					second <- result{joined, err}
					return
				}
				second <- result{joined, tx.Commit(ctx)}
			}()
			waitForPushWaiter(s)
			errFirst := first.Commit(ctx) // hands the writer to second
			r := <-second
			errFenced, errOpen := r.err, errFirst
			if tc.fencedFirst {
				errFenced, errOpen = errFirst, r.err
			}
			if !errors.Is(errFenced, storage.ErrWriterFenced) {
				t.Fatalf("fenced push: err = %v, want ErrWriterFenced", errFenced)
			}
			if errOpen != nil {
				t.Fatalf("push of the other partition: %v", errOpen)
			}
			if r.joined == tc.fencedFirst {
				t.Fatalf("second push joined first's group = %v, want %v", r.joined, !tc.fencedFirst)
			}
			openRow, fencedRow := "r1", "r2"
			if tc.fencedFirst {
				openRow, fencedRow = "r2", "r1"
			}
			wantPushed(t, s, "open", 1, []string{openRow}, nil)
			wantPushed(t, s, "fenced", 0, nil, []string{fencedRow})
			if rec, err := s.LookupIdempotency(ctx, "fenced", "c", fencedRow); err != nil || rec != nil {
				t.Fatalf("fenced push left idempotency record %+v (%v)", rec, err)
			}
		})
	}
}

// A push transaction of a partition that already committed in the open
// group finishes that group first (the earlier one's log records and
// MaxCommitSeq are written at the group's end), so it reads them: the
// next sequence number and the idempotency record.
func TestGroupCommitSamePartitionTwice(t *testing.T) {
	ctx := context.Background()
	s := openGroupStore(t, filepath.Join(t.TempDir(), "db.sqlite"))
	first, err := s.BeginPush(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if err := stageOne(ctx, first, "r1"); err != nil {
		t.Fatal(err)
	}
	type result struct {
		max  int64
		seen *storage.IdempotencyRecord
		err  error
	}
	second := make(chan result, 1)
	go func() {
		tx, err := s.BeginPush(ctx, "p")
		if err != nil {
			second <- result{err: err}
			return
		}
		r := result{max: tx.Partition().MaxCommitSeq}
		if r.seen, err = tx.LookupIdempotency(ctx, "c", "r1"); err == nil {
			err = stageOne(ctx, tx, "r2")
		}
		if err != nil {
			tx.Rollback(ctx)
			second <- result{err: err}
			return
		}
		r.err = tx.Commit(ctx)
		second <- r
	}()
	waitForPushWaiter(s)
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-second
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.max != 1 || r.seen == nil || r.seen.CommitSeq != 1 {
		t.Fatalf("second push read MaxCommitSeq %d and idempotency record %+v, want 1 and commit 1", r.max, r.seen)
	}
	wantPushed(t, s, "p", 2, []string{"r1", "r2"}, nil)
}

// Push transactions of different partitions share COMMITs, each one's
// Commit returns only once durable, and a rolled-back member does not take
// the others down.
func TestGroupCommitAcrossPartitions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db.sqlite")
	s := openGroupStore(t, path)
	const parts, each = 16, 40
	var wg sync.WaitGroup
	for p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				// every 7th push of a partition is rolled back
				if err := pushOne(context.Background(), s, fmt.Sprintf("p%d", p), fmt.Sprintf("r%d", i), i%7 == 6); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if s.groupMembers.Load() == 0 || s.groupCommits.Load() >= s.groupMembers.Load() {
		t.Fatalf("no grouping: %d commits for %d members", s.groupCommits.Load(), s.groupMembers.Load())
	}
	t.Logf("%d COMMITs carried %d push transactions", s.groupCommits.Load(), s.groupMembers.Load())
	// Reopen: exactly the committed pushes are there.
	s.Close()
	s2 := openGroupStore(t, path)
	want := int64(0)
	for i := range each {
		if i%7 != 6 {
			want++
		}
	}
	for p := range parts {
		rows, err := s2.ScanRows(context.Background(), fmt.Sprintf("p%d", p), storage.RowQuery{Table: schema.MustDemo().Table("todos"), Scopes: map[string][]string{}, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(rows)) != want {
			t.Fatalf("partition p%d has %d rows, want %d", p, len(rows), want)
		}
		info, _ := s2.ReadPartition(context.Background(), fmt.Sprintf("p%d", p))
		if info.MaxCommitSeq != want {
			t.Fatalf("partition p%d max seq %d, want %d", p, info.MaxCommitSeq, want)
		}
	}
}

// A waiter that gives up does not strand the group it was handed.
func TestGroupCommitSurvivesAbandonedWaiter(t *testing.T) {
	s := openGroupStore(t, filepath.Join(t.TempDir(), "db.sqlite"))
	ctx := context.Background()
	holder, err := s.BeginPush(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	type begun struct {
		tx  storage.PushTx
		err error
	}
	gaveUp := make(chan begun, 1)
	go func() {
		tx, err := s.BeginPush(cctx, "b")
		gaveUp <- begun{tx, err}
	}()
	for s.pushWaiters.Load() == 0 {
		runtime.Gosched() // until the second BeginPush is queued on the writer
	}
	done := make(chan error, 1)
	go func() { done <- holder.Commit(ctx) }() // hands off to the waiter ...
	cancel()                                   // ... which gives up
	switch b := <-gaveUp; {
	case b.err == nil:
		// It won the writer before noticing the cancel: as a member of the
		// group it must end its part for the group to commit.
		if err := b.tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	case !errors.Is(b.err, context.Canceled):
		t.Fatalf("abandoned BeginPush: %v", b.err)
	}
	if err := <-done; err != nil {
		t.Fatalf("commit after an abandoned hand-off: %v", err)
	}
	if err := pushOne(ctx, s, "c", "x", false); err != nil {
		t.Fatalf("the writer is stuck: %v", err)
	}
}
