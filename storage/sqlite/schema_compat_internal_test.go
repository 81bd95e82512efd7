package sqlite

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/storagetest"
)

func indexNames(t *testing.T, s *Store) []string {
	t.Helper()
	rows, err := s.conn.QueryContext(t.Context(), `SELECT name || ' on ' || tbl_name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL AND tbl_name IN ('a', 'a__b') ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

// A database created before schema.IndexIdent (indexes named
// "<table>__<index>", the second of a colliding pair never created, no
// schema fingerprint) upgrades in place: every declared index exists under
// its new name and is enforced, the old-named one is dropped, and the
// running schema's fingerprint is adopted and enforced from then on.
func TestLegacyIndexNamesMigrate(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "sync.db")
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sch := storagetest.MustParse(storagetest.CollidingIndexes)
	if err := s.EnsureSchema(ctx, sch); err != nil {
		t.Fatal(err)
	}
	// Rewind to the old layout.
	for _, q := range []string{
		`DROP INDEX "4_a__b_i_c"`, `DROP INDEX "1_a_i_b__c"`,
		`CREATE UNIQUE INDEX "a__b__c" ON "a__b" (partition_id, "x")`,
		`DELETE FROM sync_meta WHERE key = 'schema_fingerprint'`,
	} {
		if _, err := s.conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.EnsureSchema(ctx, sch); err != nil {
		t.Fatal(err)
	}
	want := []string{"1_a_i_b__c on a", "1_a_i_b__i_c on a", "4_a__b_i_c on a__b"}
	if got := indexNames(t, s); !slices.Equal(got, want) {
		t.Fatalf("indexes after upgrade %v, want %v", got, want)
	}
	tx, err := s.BeginPush(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	a := sch.Table("a")
	if err := tx.PutRow(ctx, a, storage.RowRecord{RowID: "r1", Version: 1, Values: ssp2.Row{"r1", "p", "same", "1"}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.PutRow(ctx, a, storage.RowRecord{RowID: "r2", Version: 1, Values: ssp2.Row{"r2", "p", "same", "2"}}); !errors.Is(err, storage.ErrConstraint) {
		t.Fatalf("duplicate on a's unique index b__c: %v, want ErrConstraint", err)
	}
	tx.Rollback(ctx)
	var fp string
	if err := s.conn.QueryRowContext(ctx, `SELECT value FROM sync_meta WHERE key = 'schema_fingerprint'`).Scan(&fp); err != nil || fp != sch.Fingerprint() {
		t.Fatalf("fingerprint %q (%v), want the adopted %q", fp, err, sch.Fingerprint())
	}
	if err := s.EnsureSchema(ctx, storagetest.MustParse(storagetest.SchemaV1)); !errors.Is(err, storage.ErrSchemaChanged) {
		t.Fatalf("another schema at v1 after adoption: %v, want ErrSchemaChanged", err)
	}
}
