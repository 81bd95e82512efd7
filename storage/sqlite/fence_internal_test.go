package sqlite

import (
	"errors"
	"path/filepath"
	"testing"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/storagetest"
)

// TestFenceRawWriters: writers unaware of the fence (NULL or version-0
// writer_version, inserted directly) pass without a fence and are rejected
// by the trigger with SQLITE_CONSTRAINT_TRIGGER once the partition is
// fenced, also after activation.
func TestFenceRawWriters(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "sync.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.EnsureSchema(ctx, storagetest.MustParse(storagetest.SchemaV1)); err != nil {
		t.Fatal(err)
	}
	raw := func(seq int64, wv any) error {
		if err := s.lock(ctx); err != nil {
			return err
		}
		defer s.unlock()
		_, err := s.conn.ExecContext(ctx, `INSERT INTO sync_commits(partition_id, seq, created_at_ms, actor_id, client_id, client_commit_id, writer_version)
			VALUES('p', ?, 0, 'old', 'old', 'old', ?)`, seq, wv)
		return err
	}
	wantRejected := func(what string, err error) {
		t.Helper()
		var se *sqlite.Error
		if !errors.As(err, &se) || se.Code() != sqlite3.SQLITE_CONSTRAINT_TRIGGER {
			t.Fatalf("%s: err = %v, want SQLITE_CONSTRAINT_TRIGGER", what, err)
		}
		if !errors.Is(classifyAppend(err, 0), storage.ErrWriterFenced) {
			t.Fatalf("%s: not classified as ErrWriterFenced", what)
		}
	}
	if err := raw(1, nil); err != nil {
		t.Fatalf("NULL writer without a fence: %v", err)
	}
	if err := raw(2, 0); err != nil {
		t.Fatalf("version-0 writer without a fence: %v", err)
	}
	d := storage.CheckpointDeclaration{Partition: "p", Name: "proj", SchemaVersion: 1}
	if _, err := s.DeclareCheckpoint(ctx, d, 1); err != nil {
		t.Fatal(err)
	}
	wantRejected("NULL writer under fence 1", raw(3, nil))
	wantRejected("version-0 writer under fence 1", raw(3, 0))
	if err := raw(3, 1); err != nil {
		t.Fatalf("version-1 writer under fence 1: %v", err)
	}
	if out, err := s.ActivateCheckpoint(ctx, "p", "proj", 0, 0, nil, 2); err != nil || out != storage.Activated {
		t.Fatalf("activate = %s, %v", out, err)
	}
	wantRejected("NULL writer after activation", raw(4, nil))
	wantRejected("version-0 writer after activation", raw(4, 0))
	// a constraint violation of another kind is not a fence rejection
	err = raw(3, 1) // duplicate primary key
	if errors.Is(classifyAppend(err, 3), storage.ErrWriterFenced) {
		t.Fatalf("duplicate key classified as fenced: %v", err)
	}
}
