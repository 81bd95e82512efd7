package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/synclane/synclane/storage"
)

// PutClients in a push transaction keeps bindings, skips unstorable
// records, and is durable exactly when the transaction commits.
func TestPushTxPutClients(t *testing.T) {
	ctx := context.Background()
	s := openGroupStore(t, filepath.Join(t.TempDir(), "db.sqlite"))
	if _, err := s.BindClient(ctx, "p", "c1", "ada", 1); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		rollback bool
	}{{"commit", false}, {"rollback", true}}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tx, err := s.BeginPush(ctx, "p")
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			w := tx
			fresh := fmt.Sprintf("c%d", i+2)
			err = w.PutClients(ctx,
				storage.ClientRecord{ClientID: "c1", ActorID: "eve", Cursor: int64(7 + i), Subscriptions: []byte(`[]`)},
				storage.ClientRecord{ClientID: fresh, ActorID: "bob", Cursor: 3},
				storage.ClientRecord{ClientID: strings.Repeat("x", storage.MaxIdentifierBytes+1), ActorID: "bob"})
			if !errors.Is(err, storage.ErrUnstorable) {
				t.Fatalf("unstorable record: %v, want ErrUnstorable", err)
			}
			if rec, err := s.GetClient(ctx, "p", fresh); err != nil || rec != nil {
				t.Fatalf("record visible before the commit: %+v, %v", rec, err)
			}
			if c.rollback {
				err = tx.Rollback(ctx)
			} else {
				err = tx.Commit(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.GetClient(ctx, "p", fresh)
			if err != nil {
				t.Fatal(err)
			}
			if c.rollback != (got == nil) {
				t.Fatalf("after %s the new record is %+v", c.name, got)
			}
			c1, err := s.GetClient(ctx, "p", "c1")
			if err != nil || c1 == nil || c1.ActorID != "ada" {
				t.Fatalf("binding after PutClients: %+v, %v (want actor ada)", c1, err)
			}
			if want := int64(7 + i); !c.rollback && c1.Cursor != want {
				t.Fatalf("cursor %d, want %d", c1.Cursor, want)
			}
			if c.rollback && c1.Cursor == int64(7+i) {
				t.Fatalf("a rolled-back write is visible: %+v", c1)
			}
		})
	}
}

// The second member of a commit group reads the gate from the group (its
// own epoch and horizon, the shared marker and checkpoints), and after
// the group's COMMIT every member that read the gate has it read again,
// as Store.ReadServeGate would read it then.
func TestGroupGateReadsOnceAndAfterCommit(t *testing.T) {
	ctx := context.Background()
	s := openGroupStore(t, filepath.Join(t.TempDir(), "db.sqlite"))
	const running = 1
	for _, p := range []string{"a", "b"} {
		if err := pushOne(ctx, s, p, "seed", false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.DeclareCheckpoint(ctx, storage.CheckpointDeclaration{Partition: "a", Name: "proj", SchemaVersion: running}, 1); err != nil {
		t.Fatal(err)
	}
	first, err := s.BeginPush(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	ga, err := first.(*pushTx).ReadServeGate(ctx, running)
	if err != nil {
		t.Fatal(err)
	}
	type begun struct {
		tx  storage.PushTx
		err error
	}
	second := make(chan begun, 1)
	go func() {
		tx, err := s.BeginPush(ctx, "b")
		second <- begun{tx, err}
	}()
	for s.pushWaiters.Load() == 0 {
		runtime.Gosched() // until the second BeginPush waits for the writer
	}
	committed := make(chan error, 1)
	go func() { committed <- first.Commit(ctx) }() // hands the writer to "b", same group
	b := <-second
	if b.err != nil {
		t.Fatal(b.err)
	}
	if s.group == nil || s.group.gate == nil {
		t.Fatal(`"b" did not join the group whose gate "a" read`)
	}
	gb, err := b.tx.(*pushTx).ReadServeGate(ctx, running)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		partition string
		tx        storage.PushTx
		inTx      storage.ServeGate
	}{{"a", first, ga}, {"b", b.tx, gb}} {
		fresh, err := s.ReadServeGate(ctx, c.partition, running)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(c.inTx, fresh) || len(fresh.Pending) != 1 || fresh.LogEpoch == "" {
			t.Fatalf("%s: gate in the transaction %+v, read directly %+v", c.partition, c.inTx, fresh)
		}
		after, ok := c.tx.CommittedGate()
		if !ok || !reflect.DeepEqual(after, fresh) {
			t.Fatalf("%s: gate after commit %+v (%v), read directly %+v", c.partition, after, ok, fresh)
		}
	}
	if ga.LogEpoch == gb.LogEpoch {
		t.Fatal("two partitions read one epoch")
	}

	// Before Commit, or without a gate read: nothing after the commit.
	for _, read := range []bool{true, false} {
		tx, err := s.BeginPush(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		if read {
			if _, err := tx.(*pushTx).ReadServeGate(ctx, running); err != nil {
				t.Fatal(err)
			}
			if g, ok := tx.CommittedGate(); ok {
				t.Fatalf("a gate after commit before Commit: %+v", g)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if g, ok := tx.CommittedGate(); ok != read {
			t.Fatalf("gate read in the transaction %v: gate after commit %+v, %v", read, g, ok)
		}
	}
}

// PutClient calls of many partitions that wait for the writer together
// are written as one member of the commit group, and each returns with
// its records durable.
func TestPutClientBatchesPartitions(t *testing.T) {
	ctx := context.Background()
	s := openGroupStore(t, filepath.Join(t.TempDir(), "db.sqlite"))
	holder, err := s.BeginPush(ctx, "h")
	if err != nil {
		t.Fatal(err)
	}
	const parts = 16
	errs := make(chan error, parts)
	for i := range parts {
		go func() {
			errs <- s.PutClient(ctx, fmt.Sprintf("p%d", i), storage.ClientRecord{ClientID: "c", ActorID: "ada", Cursor: int64(i)})
		}()
	}
	for joined := 0; joined < parts; {
		runtime.Gosched() // until every call joined the batch waiting for the writer
		s.writeBacks.mu.Lock()
		if b := s.writeBacks.open; b != nil {
			joined = len(b.parts)
		}
		s.writeBacks.mu.Unlock()
	}
	members := s.groupMembers.Load()
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for range parts {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := s.groupMembers.Load() - members; got != 2 {
		t.Fatalf("%d group members for one push and %d write-backs, want 2 (the push and one batch)", got, parts)
	}
	for i := range parts {
		rec, err := s.GetClient(ctx, fmt.Sprintf("p%d", i), "c")
		if err != nil || rec == nil || rec.Cursor != int64(i) {
			t.Fatalf("p%d: %+v, %v", i, rec, err)
		}
	}
}
