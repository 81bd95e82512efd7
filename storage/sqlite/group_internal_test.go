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
	t := schema.MustDemo().Table("todos")
	if err := tx.PutRow(ctx, t, storage.RowRecord{RowID: id, Version: 1, Values: ssp2.Row{id, "L", "x", false, int64(0), int64(0)}}); err != nil {
		return err
	}
	seq := tx.Partition().MaxCommitSeq + 1
	if err := tx.AppendCommit(ctx, storage.CommitRecord{Seq: seq, ActorID: "a", ClientID: "c", ClientCommitID: id,
		Changes: []storage.ChangeRecord{{Table: "todos", RowID: id, Op: ssp2.OpUpsert, RowVersion: 1, Scopes: map[string]string{"list_id": "L"}, Row: []byte{0}}}}); err != nil {
		return err
	}
	if rollback {
		return tx.Rollback(ctx)
	}
	return tx.Commit(ctx)
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
