package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

// RFC 0007 notes §7 items 14-16 on a real server.

func schemaV2(t testing.TB) *schema.Schema {
	t.Helper()
	s, err := schema.Parse([]byte(strings.Replace(testSchema, `"version": 1`, `"version": 2`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rawAppend inserts a commit row directly, as a writer unaware of the
// fence would (writerVersion nil = NULL).
func rawAppend(ctx context.Context, s *postgres.Store, schemaName, partition string, seq int64, writerVersion any) error {
	_, err := s.Pool().Exec(ctx, `INSERT INTO `+pgx.Identifier{schemaName, "sync_commits"}.Sanitize()+`
(partition, seq, created_at_ms, actor_id, client_id, client_commit_id, writer_version) VALUES ($1, $2, 0, 'old', 'old', 'old', $3)`,
		partition, seq, writerVersion)
	return err
}

func wantFenceRejected(t *testing.T, what string, err error) {
	t.Helper()
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || pg.Code != "SL001" || pg.Message != "sync.storage.writer_fence_rejected" {
		t.Fatalf("%s: err = %v, want SQLSTATE SL001 sync.storage.writer_fence_rejected", what, err)
	}
}

func TestWriterFenceRawWriters(t *testing.T) {
	ctx := t.Context()
	name := pgtest.NewSchema(t)
	s := pgtest.OpenSchema(t, name, postgres.Options{MaxConns: 4})
	if err := s.EnsureSchema(ctx, mustSchema(t)); err != nil {
		t.Fatal(err)
	}
	// no fence: NULL and version-0 writers are allowed
	if err := rawAppend(ctx, s, name, "p", 1, nil); err != nil {
		t.Fatalf("NULL writer without a fence: %v", err)
	}
	if err := rawAppend(ctx, s, name, "p", 2, 0); err != nil {
		t.Fatalf("version-0 writer without a fence: %v", err)
	}
	d := storage.CheckpointDeclaration{Partition: "p", Name: "proj", SchemaVersion: 1}
	if _, err := s.DeclareCheckpoint(ctx, d, 1); err != nil {
		t.Fatal(err)
	}
	wantFenceRejected(t, "NULL writer under fence 1", rawAppend(ctx, s, name, "p", 3, nil))
	wantFenceRejected(t, "version-0 writer under fence 1", rawAppend(ctx, s, name, "p", 3, 0))
	if err := rawAppend(ctx, s, name, "p", 3, 1); err != nil {
		t.Fatalf("version-1 writer under fence 1: %v", err)
	}
	// an aware append, then a raw old one right after
	if _, err := pushOne(ctx, s, "q", "k1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeclareCheckpoint(ctx, storage.CheckpointDeclaration{Partition: "q", Name: "proj", SchemaVersion: 1}, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := pushOne(ctx, s, "q", "k2"); err != nil {
		t.Fatalf("aware append under fence 1: %v", err)
	}
	wantFenceRejected(t, "raw old append after an aware one", rawAppend(ctx, s, name, "q", 3, nil))
	c, err := s.ClaimCheckpoint(ctx, d, 2)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := s.ActivateCheckpoint(ctx, "p", "proj", c.OwnerEpoch, 0, nil, 3); err != nil || out != storage.Activated {
		t.Fatalf("activate = %s, %v", out, err)
	}
	wantFenceRejected(t, "NULL writer after activation", rawAppend(ctx, s, name, "p", 4, nil))
	wantFenceRejected(t, "version-0 writer after activation", rawAppend(ctx, s, name, "p", 4, 0))
	// fence 99 rejects this store's version-1 pushes, from Commit
	if _, err := s.DeclareCheckpoint(ctx, storage.CheckpointDeclaration{Partition: "q", Name: "future", SchemaVersion: 99}, 1); err != nil {
		t.Fatal(err)
	}
	_, err = pushOne(ctx, s, "q", "k3")
	if !errors.Is(err, storage.ErrWriterFenced) {
		t.Fatalf("version-1 push under fence 99: %v, want ErrWriterFenced", err)
	}
	var pe *postgres.Error
	if !errors.As(err, &pe) || pe.Code != "SL001" || postgres.IsRetryable(err) {
		t.Fatalf("fenced push error %#v: want a non-retryable *postgres.Error with code SL001", err)
	}
}

func TestSourceWriteBetweenClaimAndActivate(t *testing.T) {
	ctx := t.Context()
	s := pgtest.Open(t)
	if err := s.EnsureSchema(ctx, mustSchema(t)); err != nil {
		t.Fatal(err)
	}
	d := storage.CheckpointDeclaration{Partition: "p", Name: "proj", SchemaVersion: 1}
	if _, err := s.DeclareCheckpoint(ctx, d, 1); err != nil {
		t.Fatal(err)
	}
	c, err := s.ClaimCheckpoint(ctx, d, 2)
	if err != nil {
		t.Fatal(err)
	}
	seq, err := pushOne(ctx, s, "p", "k1")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := s.ActivateCheckpoint(ctx, "p", "proj", c.OwnerEpoch, 0, []string{"docs"}, 3); err != nil || out != storage.Stale {
		t.Fatalf("activate at 0 after a source write = %s, %v; want stale", out, err)
	}
	if out, err := s.ActivateCheckpoint(ctx, "p", "proj", c.OwnerEpoch, seq, []string{"docs"}, 3); err != nil || out != storage.Activated {
		t.Fatalf("activate at %d = %s, %v; want activated", seq, out, err)
	}
}

// TestBumpBlocksOldWriter is B1: while a V2 bump holds the EXCLUSIVE lock
// on sync_partitions, a writer of a process still running V1 waits at
// BeginPush, then its append is rejected by the fence the bump installed,
// leaving no rows and no commits.
func TestBumpBlocksOldWriter(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	name := pgtest.NewSchema(t)
	a := pgtest.OpenSchema(t, name, postgres.Options{MaxConns: 4})
	b := pgtest.OpenSchema(t, name, postgres.Options{MaxConns: 4})
	for _, s := range []*postgres.Store{a, b} {
		if err := s.EnsureSchema(ctx, mustSchema(t)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pushOne(ctx, b, "p", "before"); err != nil {
		t.Fatal(err)
	}
	locked, release := make(chan struct{}), make(chan struct{})
	postgres.SetBumpHook(a, func(context.Context) {
		close(locked)
		<-release
	})
	bumped := make(chan error, 1)
	go func() {
		bumped <- a.EnsureSchema(ctx, schemaV2(t), storage.CheckpointDeclaration{Partition: "p", Name: "proj", SchemaVersion: 2})
	}()
	select {
	case <-locked:
	case err := <-bumped:
		t.Fatalf("bump finished without reaching the hook: %v", err)
	}

	type result struct {
		beginErr, putErr, appendErr, commitErr error
	}
	began := make(chan struct{})
	done := make(chan result, 1)
	go func() {
		var r result
		tx, err := b.BeginPush(ctx, "p")
		close(began)
		if r.beginErr = err; err != nil {
			done <- r
			return
		}
		defer func() { _ = tx.Rollback(ctx) }()
		r.putErr = tx.PutRow(ctx, mustSchema(t).Table("docs"), storage.RowRecord{RowID: "old", Version: 1, Values: doc("old", "p1", nil)})
		r.appendErr = tx.AppendCommit(ctx, commitRec(tx.Partition().MaxCommitSeq+1, "old"))
		r.commitErr = tx.Commit(ctx)
		done <- r
	}()
	select {
	case <-began:
		t.Fatal("BeginPush of the old writer did not wait for the bump's EXCLUSIVE lock")
	case <-time.After(300 * time.Millisecond):
	}
	// the old writer waits on a lock held by the bump
	var waiting bool
	if err := a.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'
AND query LIKE '%sync_partitions%FOR UPDATE%')`).Scan(&waiting); err != nil || !waiting {
		t.Fatalf("old writer not seen waiting on a lock: %v, %v", waiting, err)
	}
	close(release)
	if err := <-bumped; err != nil {
		t.Fatalf("bump: %v", err)
	}
	r := <-done
	if r.beginErr != nil || r.putErr != nil || r.appendErr != nil {
		t.Fatalf("old writer: begin %v, put %v, append %v", r.beginErr, r.putErr, r.appendErr)
	}
	if !errors.Is(r.commitErr, storage.ErrWriterFenced) {
		t.Fatalf("old writer's Commit: %v, want ErrWriterFenced", r.commitErr)
	}
	q := func(table string) string { return pgx.Identifier{name, table}.Sanitize() }
	var commits, rows int
	var fence, marker int32
	if err := a.Pool().QueryRow(ctx, `SELECT
	(SELECT count(*) FROM `+q("sync_commits")+` WHERE partition = 'p' AND client_commit_id = 'old'),
	(SELECT count(*) FROM `+q("docs")+` WHERE partition_id = 'p' AND id = 'old'),
	(SELECT required_writer_version FROM `+q("sync_writer_fence")+` WHERE partition = 'p'),
	(SELECT schema_version FROM `+q("sync_schema_meta")+` WHERE id = 1)`).Scan(&commits, &rows, &fence, &marker); err != nil {
		t.Fatal(err)
	}
	if commits != 0 || rows != 0 || fence != 2 || marker != 2 {
		t.Fatalf("after B1: %d old commits, %d old rows, fence %d, marker %d; want 0, 0, 2, 2", commits, rows, fence, marker)
	}
	if p, err := a.ReadPartition(ctx, "p"); err != nil || p.MaxCommitSeq != 1 {
		t.Fatalf("partition after B1: %+v, %v", p, err)
	}
}
