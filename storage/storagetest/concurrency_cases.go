package storagetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/synclane/synclane/storage"
)

// counterCommit runs one push on partition: it checks that it holds the
// partition alone (via inside), increments the version of row "counter"
// and appends one commit.
func (e *env) counterCommit(partition, worker string, inside *atomic.Int32) error {
	tx, err := e.b.Log.BeginPush(e.ctx, partition)
	if err != nil {
		return fmt.Errorf("BeginPush: %w", err)
	}
	defer func() { _ = tx.Rollback(e.ctx) }()
	if n := inside.Add(1); n != 1 {
		return fmt.Errorf("%d PushTx hold partition %q at once", n, partition)
	}
	seq := tx.Partition().MaxCommitSeq + 1
	cur, err := tx.GetRow(e.ctx, e.items, "counter")
	if err != nil {
		return err
	}
	var v int64 = 1
	if cur != nil {
		v = cur.Version + 1
	}
	if err := tx.PutRow(e.ctx, e.items, storage.RowRecord{RowID: "counter", Version: v, Values: item("counter", "p1", 1)}); err != nil {
		return err
	}
	err = tx.AppendCommit(e.ctx, storage.CommitRecord{Seq: seq, CreatedAtMs: seq, ActorID: worker, ClientID: worker,
		ClientCommitID: strconv.FormatInt(seq, 10), Changes: []storage.ChangeRecord{upsert("items", "counter", v, sc("project", "p1", "owner", "1"))}})
	if err != nil {
		return fmt.Errorf("AppendCommit(%d): %w", seq, err)
	}
	inside.Add(-1)
	return tx.Commit(e.ctx)
}

// wantDenseLog checks partition's log is exactly seqs 1..n and the
// counter row has version n.
func (e *env) wantDenseLog(partition string, n int64) {
	e.t.Helper()
	scan := e.scanChanges(partition, q("items", 0, n+10, int(n)+10, p1))
	if int64(len(scan.Commits)) != n {
		e.t.Fatalf("%s: %d commits in the log, want %d", partition, len(scan.Commits), n)
	}
	for i, c := range scan.Commits {
		if c.Seq != int64(i+1) {
			e.t.Fatalf("%s: commit %d has seq %d (gap or duplicate)", partition, i, c.Seq)
		}
		if len(c.Changes) != 1 || c.Changes[0].RowVersion != c.Seq {
			e.t.Fatalf("%s: commit %d wrote row version %+v, want %d (lost update)", partition, c.Seq, c.Changes, c.Seq)
		}
	}
	if p := e.readPartition(partition); p.MaxCommitSeq != n {
		e.t.Fatalf("%s: MaxCommitSeq = %d, want %d", partition, p.MaxCommitSeq, n)
	}
	if r := e.committedRow(partition, e.items, "counter"); r == nil || r.Version != n {
		e.t.Fatalf("%s: counter row = %+v, want version %d", partition, r, n)
	}
}

var concurrencyTests = []test{
	{name: "SamePartition", fn: func(e *env) {
		const workers, per = 8, 50
		e.touch("p")
		var inside atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := 0; w < workers; w++ {
			wg.Go(func() {
				for i := 0; i < per; i++ {
					if err := e.counterCommit("p", "w"+strconv.Itoa(w), &inside); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			e.t.Fatal(err)
		}
		e.wantDenseLog("p", workers*per)
	}},
	{name: "DifferentPartitions", fn: func(e *env) {
		const parts, per = 4, 25
		var wg sync.WaitGroup
		errs := make(chan error, parts*2)
		insides := make([]atomic.Int32, parts)
		for p := 0; p < parts; p++ {
			for w := 0; w < 2; w++ {
				wg.Go(func() {
					for i := 0; i < per; i++ {
						if err := e.counterCommit("part"+strconv.Itoa(p), "w", &insides[p]); err != nil {
							errs <- err
							return
						}
					}
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			e.t.Fatal(err)
		}
		for p := 0; p < parts; p++ {
			e.wantDenseLog("part"+strconv.Itoa(p), 2*per)
		}
	}},
	{name: "SecondBeginWaits", fn: func(e *env) {
		e.touch("p")
		tx1 := e.begin("p")
		e.appendNext(tx1)
		// While tx1 holds the lock, a bounded BeginPush must fail.
		ctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
		tx, err := e.b.Log.BeginPush(ctx, "p")
		cancel()
		if err == nil {
			_ = tx.Rollback(e.ctx)
			e.t.Fatal("BeginPush succeeded while another PushTx held the partition")
		}
		// A waiting BeginPush proceeds once tx1 commits, and sees its commit.
		type res struct {
			max int64
			err error
		}
		done := make(chan res, 1)
		go func() {
			tx2, err := e.b.Log.BeginPush(e.ctx, "p")
			if err != nil {
				done <- res{err: err}
				return
			}
			max := tx2.Partition().MaxCommitSeq
			done <- res{max: max, err: tx2.Rollback(e.ctx)}
		}()
		if err := tx1.Commit(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		r := <-done
		if r.err != nil || r.max != 1 {
			e.t.Fatalf("waiting BeginPush: max %d, err %v; want max 1", r.max, r.err)
		}
	}},
	{name: "CancelWhileWaiting", fn: func(e *env) {
		e.touch("p")
		tx1 := e.begin("p")
		ctx, cancel := context.WithCancel(e.ctx)
		done := make(chan error, 1)
		go func() {
			tx, err := e.b.Log.BeginPush(ctx, "p")
			if err == nil {
				_ = tx.Rollback(e.ctx)
				err = errors.New("BeginPush succeeded while the partition was held")
				done <- err
				return
			}
			done <- nil
		}()
		cancel()
		// The goroutine either saw cancellation while waiting or before;
		// either way BeginPush must fail, not block until tx1 ends.
		select {
		case err := <-done:
			if err != nil {
				e.t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			e.t.Fatal("BeginPush ignored context cancellation")
		}
		e.appendNext(tx1)
		if err := tx1.Commit(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		// The cancelled waiter left no lock behind.
		e.push("p", func(tx storage.PushTx) {
			if tx.Partition().MaxCommitSeq != 1 {
				e.t.Fatalf("MaxCommitSeq = %d", tx.Partition().MaxCommitSeq)
			}
		})
	}},
}
