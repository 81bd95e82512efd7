// Package legacydb gives tests the databases synclane wrote before column
// versions and delete tombstones existed (wire v3, issue 41), so they can
// check that an upgraded build opens and serves them: a SQLite data
// directory and a PostgreSQL schema, both written by `synclane serve` of
// branch main at commit Commit for one fixed script of pushes
// (testdata/generate/main.go; testdata/README.md says how to make them
// again). Its helpers only copy or load the fixtures: the files under
// testdata are never opened in place.
//
// Each of Partitions holds the same rows: Rows (list "L1" of the demo
// schema's todos), after MaxCommitSeq commits, one of which deleted
// DeletedRow (no tombstone: the build that wrote it had none). The
// PostgreSQL schema also holds a test-control capture of partition
// "default" taken by that build (its snapshot tables have no column
// versions).
package legacydb

import (
	"bytes"
	"compress/gzip"
	"context"
	"embed"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/storage/sqlite"
)

//go:embed testdata/sqlite/*.db.gz testdata/postgres/schema.sql
var fixtures embed.FS

// Commit is the commit of branch main whose code wrote the fixtures.
const Commit = "8c41686"

// Partitions are the fixture's partitions. In the SQLite directory
// (two files) "default" is in file 0 and "acme" in file 1.
var Partitions = []string{"default", "acme"}

// MaxCommitSeq is every partition's max commit seq: the script's five
// commits, none pruned (horizon 0).
const MaxCommitSeq = 5

// DeletedRow is the row commit 4 of every partition deleted; a database
// written before tombstones has none for it.
const DeletedRow = "t3"

// CapturedPartition is the partition whose test-control capture the
// PostgreSQL fixture holds (taken after the script).
const CapturedPartition = "default"

// Row is one todo every partition of the fixtures holds.
type Row struct {
	ID       string
	Title    string
	Position int64
	// Version is the row's server_version: the number of times it was
	// written.
	Version int64
}

// Rows are the rows of every partition, ordered by ID.
var Rows = []Row{
	{ID: "t1", Title: "t1 v3", Position: 1, Version: 3},
	{ID: "t2", Title: "t2 v1", Position: 2, Version: 1},
	{ID: "t4", Title: "t4 v2", Position: 4, Version: 2},
}

// Values returns r's stored values in the demo schema's column order
// (id, list_id, title, done, position, updated_at_ms).
func (r Row) Values() ssp2.Row {
	return ssp2.Row{r.ID, "L1", r.Title, false, r.Position, int64(1_700_000_000_000) + r.Position}
}

// Schema returns the schema the fixtures were written with: the built-in
// demo schema `synclane serve` runs without --schema (table todos).
func Schema() *schema.Schema { return schema.MustDemo() }

// SQLiteDir writes a copy of the SQLite fixture, the data directory
// `synclane serve --data` creates by default (two database files,
// synclane.db and synclane-1.db), to a fresh temporary directory of t and
// returns it.
func SQLiteDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range sqlite.DirFileNames(2) {
		gz, err := fixtures.ReadFile("testdata/sqlite/" + name + ".gz")
		if err != nil {
			t.Fatalf("legacydb: %v", err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(gz))
		if err != nil {
			t.Fatalf("legacydb: %s: %v", name, err)
		}
		b, err := io.ReadAll(zr)
		if err != nil {
			t.Fatalf("legacydb: %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatalf("legacydb: %v", err)
		}
	}
	return dir
}

// OpenSQLite opens a copy of the SQLite fixture (SQLiteDir) with opts,
// closed when t ends; EnsureSchema has not run.
func OpenSQLite(t testing.TB, opts sqlite.DirOptions) *sqlite.Dir {
	t.Helper()
	d, err := sqlite.OpenDir(t.Context(), SQLiteDir(t), opts)
	if err != nil {
		t.Fatalf("legacydb: open the SQLite fixture: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("legacydb: close: %v", err)
		}
	})
	return d
}

// fixtureSchema is the schema name the dump was taken from; loading
// replaces it with the test's own.
const fixtureSchema = "v2fixture_src"

// PostgresSchema loads the PostgreSQL fixture into a fresh schema of the
// test server (pgtest.NewSchema: dropped when t ends; t is skipped, or
// failed under SYNCLANE_REQUIRE_POSTGRES=1, without
// SYNCLANE_TEST_POSTGRES) and returns the schema's name.
func PostgresSchema(t testing.TB) string {
	t.Helper()
	name := pgtest.NewSchema(t)
	dump, err := fixtures.ReadFile("testdata/postgres/schema.sql")
	if err != nil {
		t.Fatalf("legacydb: %v", err)
	}
	sql := strings.ReplaceAll(string(dump), fixtureSchema, pgx.Identifier{name}.Sanitize())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatalf("legacydb: connect: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	// One multi-statement simple-protocol query: the dump's statements
	// run in order, in one implicit transaction.
	if _, err := conn.PgConn().Exec(ctx, sql).ReadAll(); err != nil {
		t.Fatalf("legacydb: load the PostgreSQL fixture: %v", err)
	}
	return name
}

// OpenPostgres loads the PostgreSQL fixture into a fresh schema
// (PostgresSchema) and opens a store on it with opts (pgtest.OpenSchema:
// closed when t ends); EnsureSchema has not run.
func OpenPostgres(t testing.TB, opts postgres.Options) *postgres.Store {
	t.Helper()
	return pgtest.OpenSchema(t, PostgresSchema(t), opts)
}
