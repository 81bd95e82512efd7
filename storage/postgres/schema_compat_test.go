package postgres_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/storage/storagetest"
)

// A database created before schema.IndexIdent (indexes named
// "<table>__i_<index>" and "<table>__s_<column>", a meta table without the
// fingerprint column) upgrades in place: its indexes are renamed (not
// rebuilt), and the running schema's fingerprint is adopted and enforced
// from then on.
func TestLegacyIndexNamesMigrate(t *testing.T) {
	ctx := t.Context()
	name := pgtest.NewSchema(t)
	s := pgtest.OpenSchema(t, name, postgres.Options{})
	sch := storagetest.MustParse(storagetest.SchemaV1)
	if err := s.EnsureSchema(ctx, sch); err != nil {
		t.Fatal(err)
	}
	q := func(sql string) {
		t.Helper()
		if _, err := s.Pool().Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	ident := func(n string) string { return pgx.Identifier{name, n}.Sanitize() }
	// Rewind to the old layout.
	q(`ALTER INDEX ` + ident("5_items_i_items_code") + ` RENAME TO "items__i_items_code"`)
	q(`ALTER INDEX ` + ident("5_items_s_owner") + ` RENAME TO "items__s_owner"`)
	q(`ALTER TABLE ` + ident("sync_schema_meta") + ` DROP COLUMN schema_fingerprint`)
	var oid uint32
	if err := s.Pool().QueryRow(ctx, `SELECT to_regclass($1)::oid`, ident("items__i_items_code")).Scan(&oid); err != nil {
		t.Fatal(err)
	}

	s2 := pgtest.OpenSchema(t, name, postgres.Options{})
	if err := s2.EnsureSchema(ctx, sch); err != nil {
		t.Fatal(err)
	}
	rows, err := s.Pool().Query(ctx, `SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = to_regclass($1) ORDER BY 1`, ident("items"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"5_items_i_items_code", "5_items_i_items_title", "5_items_s_owner", "5_items_s_project", "items_pkey"}
	if !slices.Equal(got, want) {
		t.Fatalf("indexes after upgrade %v, want %v", got, want)
	}
	var after uint32
	if err := s.Pool().QueryRow(ctx, `SELECT to_regclass($1)::oid`, ident("5_items_i_items_code")).Scan(&after); err != nil || after != oid {
		t.Fatalf("index oid %d (%v), want %d: renamed, not rebuilt", after, err, oid)
	}
	var fp string
	if err := s.Pool().QueryRow(ctx, `SELECT schema_fingerprint FROM `+ident("sync_schema_meta")).Scan(&fp); err != nil || fp != sch.Fingerprint() {
		t.Fatalf("fingerprint %q (%v), want the adopted %q", fp, err, sch.Fingerprint())
	}
	if err := s2.EnsureSchema(ctx, storagetest.MustParse(storagetest.CollidingIndexes)); !errors.Is(err, storage.ErrSchemaChanged) {
		t.Fatalf("another schema at v1 after adoption: %v, want ErrSchemaChanged", err)
	}
}
