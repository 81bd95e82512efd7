package sqlite

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/storagetest"
)

// TestDurabilitySettings checks the writer runs WAL with synchronous=FULL
// and that data and the schema version survive a reopen.
func TestDurabilitySettings(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "sync.db")
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mode string
	var sync int
	if err := s.conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v", mode, err)
	}
	if err := s.conn.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil || sync != 2 {
		t.Fatalf("synchronous = %d, %v; want 2 (FULL)", sync, err)
	}
	if err := s.EnsureSchema(ctx, storagetest.MustParse(storagetest.SchemaV2)); err != nil {
		t.Fatal(err)
	}
	p, err := s.TouchPartition(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.EnsureSchema(ctx, storagetest.MustParse(storagetest.SchemaV1)); !errors.Is(err, storage.ErrSchemaNewer) {
		t.Fatalf("EnsureSchema(v1) after reopen of v2 database: %v", err)
	}
	if err := s.EnsureSchema(ctx, storagetest.MustParse(storagetest.SchemaV2)); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ReadPartition(ctx, "p"); err != nil || got != p {
		t.Fatalf("partition after reopen = %+v, %v; want %+v", got, err, p)
	}
}

// TestScanChangesUsesScopeIndex checks the candidate query is answered
// from sync_change_scopes' primary key, never by scanning sync_changes.
func TestScanChangesUsesScopeIndex(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "sync.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rows, err := s.rdb.QueryContext(ctx, `EXPLAIN QUERY PLAN SELECT DISTINCT commit_seq FROM sync_change_scopes WHERE partition_id = ? AND table_name = ? AND scope_key IN (?, ?)
		AND commit_seq > ? AND commit_seq <= ? ORDER BY commit_seq LIMIT ?`, "p", "items", "a", "b", 0, 10, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	joined := strings.Join(plan, "; ")
	if !strings.Contains(joined, "SEARCH sync_change_scopes USING PRIMARY KEY") || strings.Contains(joined, "SCAN ") {
		t.Fatalf("candidate query plan does not use the scope index: %s", joined)
	}
}
