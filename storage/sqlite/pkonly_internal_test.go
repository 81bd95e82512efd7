package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/synclane/synclane/storage/storagetest"
)

// A table whose only column is its primary key (a set of tags, say) gets
// its statements like any other: its upsert updates nothing but the row's
// version and column versions on a conflict.
func TestPrimaryKeyOnlyTable(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "sync.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sch := storagetest.MustParse(`{"version": 1, "tables": [{"name": "tags", "columns": [{"name": "id", "type": "string"}],
		"primaryKey": "id", "scopes": ["tag:{id}"]}]}`)
	if err := s.EnsureSchema(ctx, sch); err != nil {
		t.Fatalf("EnsureSchema of a primary-key-only table: %v", err)
	}
	_, tables, _, err := s.current()
	if err != nil {
		t.Fatal(err)
	}
	ts := tables["tags"]
	if ts == nil || ts.upsert == nil {
		t.Fatal("no upsert statement for tags")
	}
	for v := int64(1); v <= 2; v++ { // the second one takes the ON CONFLICT path
		if _, err := ts.upsert.ExecContext(ctx, "p", "t1", v, nil); err != nil {
			t.Fatalf("upsert version %d: %v", v, err)
		}
	}
	var id string
	var version int64
	var colVersions any
	if err := ts.get.QueryRowContext(ctx, "p", "t1").Scan(&id, &version, &colVersions); err != nil {
		t.Fatal(err)
	}
	if id != "t1" || version != 2 {
		t.Fatalf("row %q at version %d after two upserts, want t1 at 2", id, version)
	}
}
