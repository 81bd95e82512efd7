package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
)

// Two stores (separate pools, as two processes), 16 goroutines each, push
// to one partition: every seq 1..N is taken exactly once.
func TestTwoStoresDenseSeq(t *testing.T) {
	a, b, _ := twoStores(t, 16)
	ctx := t.Context()
	const perWorker = 8
	var (
		mu   sync.Mutex
		seqs = map[int64]string{}
		wg   sync.WaitGroup
		errs = make(chan error, 32)
	)
	start := make(chan struct{})
	for w := 0; w < 32; w++ {
		s := a
		if w%2 == 1 {
			s = b
		}
		wg.Go(func() {
			<-start
			for i := 0; i < perWorker; i++ {
				key := fmt.Sprintf("w%d-%d", w, i)
				seq, err := pushOne(ctx, s, "p", key)
				if err != nil {
					errs <- fmt.Errorf("%s: %w", key, err)
					return
				}
				mu.Lock()
				if other, dup := seqs[seq]; dup {
					errs <- fmt.Errorf("seq %d committed twice (%s and %s)", seq, other, key)
				}
				seqs[seq] = key
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	const n = 32 * perWorker
	for seq := int64(1); seq <= n; seq++ {
		if _, ok := seqs[seq]; !ok {
			t.Fatalf("seq %d missing (%d commits)", seq, len(seqs))
		}
	}
	if p, err := b.ReadPartition(ctx, "p"); err != nil || p.MaxCommitSeq != n {
		t.Fatalf("ReadPartition = %+v, %v; want max %d", p, err, n)
	}
	scan, err := a.ScanChanges(ctx, "p", storage.ChangeQuery{Table: "docs", Scopes: map[string][]string{"project": {"p1"}}, UpToSeq: n, LimitChanges: 10 * n})
	if err != nil {
		t.Fatal(err)
	}
	if len(scan.Commits) != n || scan.Truncated {
		t.Fatalf("ScanChanges: %d commits (truncated %v), want %d", len(scan.Commits), scan.Truncated, n)
	}
	for i, c := range scan.Commits {
		if c.Seq != int64(i+1) {
			t.Fatalf("commit %d has seq %d", i, c.Seq)
		}
		rec, err := b.LookupIdempotency(ctx, "p", "client", seqs[c.Seq])
		if err != nil || rec == nil || rec.CommitSeq != c.Seq {
			t.Fatalf("idempotency of %s = %+v, %v; want seq %d", seqs[c.Seq], rec, err, c.Seq)
		}
	}
}

// The same (clientId, clientCommitId) pushed through both stores at once
// is applied once; the loser finds the winner's record under the lock.
func TestIdempotencyAcrossStores(t *testing.T) {
	a, b, _ := twoStores(t, 4)
	ctx := t.Context()
	const rounds = 20
	for r := 0; r < rounds; r++ {
		key := fmt.Sprintf("k%d", r)
		var wg sync.WaitGroup
		applied := make([]bool, 2)
		errs := make([]error, 2)
		start := make(chan struct{})
		for i, s := range []*postgres.Store{a, b} {
			wg.Go(func() {
				<-start
				applied[i], errs[i] = pushOnce(ctx, s, "p", key)
			})
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", r, err)
			}
		}
		if applied[0] == applied[1] {
			t.Fatalf("round %d: applied by a=%v b=%v, want exactly one", r, applied[0], applied[1])
		}
		rec, err := a.LookupIdempotency(ctx, "p", "client", key)
		if err != nil || rec == nil || rec.CommitSeq != int64(r+1) {
			t.Fatalf("round %d: record %+v, %v; want seq %d", r, rec, err, r+1)
		}
	}
	if p, err := a.ReadPartition(ctx, "p"); err != nil || p.MaxCommitSeq != rounds {
		t.Fatalf("ReadPartition = %+v, %v; want max %d", p, err, rounds)
	}
}

// pushOnce applies key unless PushTx.LookupIdempotency finds it; it
// reports whether it applied.
func pushOnce(ctx context.Context, s *postgres.Store, partition, key string) (bool, error) {
	tx, err := s.BeginPush(ctx, partition)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rec, err := tx.LookupIdempotency(ctx, "client", key)
	if err != nil || rec != nil {
		return false, err
	}
	seq := tx.Partition().MaxCommitSeq + 1
	if err := tx.AppendCommit(ctx, commitRec(seq, key)); err != nil {
		return false, err
	}
	if err := tx.PutIdempotency(ctx, storage.IdempotencyRecord{ClientID: "client", ClientCommitID: key, Status: ssp2.CommitApplied, CommitSeq: seq}); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}

// A context cancelled mid-transaction leaves nothing visible and frees the
// partition for the other store.
func TestCancelMidTransaction(t *testing.T) {
	a, b, sch := twoStores(t, 4)
	docs := sch.Table("docs")
	ctx, cancel := context.WithCancel(t.Context())
	tx, err := a.BeginPush(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.PutRow(ctx, docs, storage.RowRecord{RowID: "half", Version: 1, Values: doc("half", "p1", nil)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.AppendCommit(ctx, commitRec(1, "half")); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("Commit with a cancelled context succeeded")
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatalf("Rollback after failed Commit: %v", err)
	}
	assertEmptyThenWorks(t, b, docs, "p")
}

// A store whose PushTx connection dies (its process crashed, or the server
// killed the backend) leaves nothing visible; the failure is retryable and
// the other store keeps working.
func TestKilledTransaction(t *testing.T) {
	a, b, sch := twoStores(t, 4)
	ctx := t.Context()
	docs := sch.Table("docs")
	tx, err := a.BeginPush(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := tx.PutRow(ctx, docs, storage.RowRecord{RowID: "half", Version: 1, Values: doc("half", "p1", nil)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.AppendCommit(ctx, commitRec(1, "half")); err != nil {
		t.Fatal(err)
	}
	var killed bool
	if err := b.Pool().QueryRow(ctx, `SELECT pg_terminate_backend($1)`, int32(postgres.PushTxPID(tx))).Scan(&killed); err != nil || !killed {
		t.Fatalf("pg_terminate_backend = %v, %v", killed, err)
	}
	assertEmptyThenWorks(t, b, docs, "p")
	err = tx.Commit(ctx)
	if err == nil {
		t.Fatal("Commit on a killed connection succeeded")
	}
	if !postgres.IsRetryable(err) {
		t.Fatalf("Commit on a killed connection: %v is not retryable", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("Rollback after failed Commit: %v", err)
	}
	// a is usable again (its pool dropped the dead connection).
	if seq, err := pushOne(ctx, a, "p", "after"); err != nil || seq != 2 {
		t.Fatalf("push through a after the kill = %d, %v; want 2", seq, err)
	}
}

// assertEmptyThenWorks checks that partition holds no row, commit or seq,
// then pushes seq 1 through s.
func assertEmptyThenWorks(t *testing.T, s *postgres.Store, docs *schema.Table, partition string) {
	t.Helper()
	ctx := t.Context()
	tx, err := s.BeginPush(ctx, partition) // waits for the dead transaction's lock
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if got := tx.Partition().MaxCommitSeq; got != 0 {
		t.Fatalf("MaxCommitSeq = %d after an unfinished transaction", got)
	}
	r, err := tx.GetRow(ctx, docs, "half")
	if err != nil || r != nil {
		t.Fatalf("GetRow(half) = %+v, %v; want nothing", r, err)
	}
	seq, err := int64(1), tx.AppendCommit(ctx, commitRec(1, "other"))
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		t.Fatalf("push seq %d: %v", seq, err)
	}
	scan, err := s.ScanChanges(ctx, partition, storage.ChangeQuery{Table: "docs", UpToSeq: 10, LimitChanges: 10})
	if err != nil || len(scan.Commits) != 1 || scan.Commits[0].Changes[0].RowID != "r1" {
		t.Fatalf("ScanChanges = %+v, %v; want only the new commit", scan, err)
	}
	if rec, err := s.LookupIdempotency(ctx, partition, "client", "half"); err != nil || rec != nil {
		t.Fatalf("idempotency of the unfinished push = %+v, %v", rec, err)
	}
}

// A unique-index violation is ErrConstraint (SQLSTATE 23505, not
// retryable) and the transaction continues after RollbackToSavepoint.
func TestUniqueViolationSavepoint(t *testing.T) {
	a, _, sch := twoStores(t, 2)
	ctx := t.Context()
	docs := sch.Table("docs")
	tx, err := a.BeginPush(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	put := func(id string) error {
		return tx.PutRow(ctx, docs, storage.RowRecord{RowID: id, Version: 1, Values: doc(id, "p1", "same-code")})
	}
	if err := tx.Savepoint(ctx); err != nil {
		t.Fatal(err)
	}
	if err := put("first"); err != nil {
		t.Fatal(err)
	}
	if err := tx.ReleaseSavepoint(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Savepoint(ctx); err != nil {
		t.Fatal(err)
	}
	err = put("second")
	var pgErr *pgconn.PgError
	if !errors.Is(err, storage.ErrConstraint) || !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		t.Fatalf("duplicate code: %v; want ErrConstraint with SQLSTATE 23505", err)
	}
	if postgres.IsRetryable(err) {
		t.Fatalf("constraint violation reported retryable: %v", err)
	}
	if err := tx.RollbackToSavepoint(ctx); err != nil {
		t.Fatal(err)
	}
	if err := put("third"); !errors.Is(err, storage.ErrConstraint) {
		t.Fatalf("second duplicate after rollback: %v", err)
	}
	if err := tx.RollbackToSavepoint(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.PutRow(ctx, docs, storage.RowRecord{RowID: "fourth", Version: 1, Values: doc("fourth", "p1", "other")}); err != nil {
		t.Fatalf("write after RollbackToSavepoint: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := a.ScanRows(ctx, "p", storage.RowQuery{Table: docs, Scopes: map[string][]string{"project": {"p1"}}, Limit: 10})
	if err != nil || len(rows) != 2 || rows[0].RowID != "first" || rows[1].RowID != "fourth" {
		t.Fatalf("rows after commit = %+v, %v; want first and fourth", rows, err)
	}
}

// A statement failing without a savepoint aborts the transaction; Commit
// then reports an error instead of silently rolling back.
func TestCommitAfterUnrecoveredFailure(t *testing.T) {
	a, _, sch := twoStores(t, 2)
	ctx := t.Context()
	docs := sch.Table("docs")
	tx, err := a.BeginPush(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := tx.PutRow(ctx, docs, storage.RowRecord{RowID: "x", Version: 1, Values: ssp2.Row{"x", nil, nil, nil}}); !errors.Is(err, storage.ErrConstraint) {
		t.Fatalf("NULL in NOT NULL column: %v", err)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("Commit of an aborted transaction succeeded")
	}
	if p, err := a.ReadPartition(ctx, "p"); err != nil || p.MaxCommitSeq != 0 {
		t.Fatalf("ReadPartition = %+v, %v", p, err)
	}
}
