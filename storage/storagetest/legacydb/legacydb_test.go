package legacydb_test

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/storage/storagetest/legacydb"
)

// A database written before column versions and tombstones, opened and
// ensured by this build: the row tables gain the column without a row
// being rewritten, every old row reads as legacy (nil column versions),
// every stored value and record is what it was, and new writes store
// column versions and tombstones.

// checkServes checks the ensured fixture through b: the old rows with nil
// column versions and no tombstones, the log and the client records
// intact; then new writes (an update of an old row, an insert, a delete)
// store their column versions and tombstone.
func checkServes(t *testing.T, b storage.Backend) {
	t.Helper()
	ctx := t.Context()
	todos := legacydb.Schema().Table("todos")
	for _, p := range legacydb.Partitions {
		info, err := b.Log.ReadPartition(ctx, p)
		if err != nil || !info.Exists || info.MaxCommitSeq != legacydb.MaxCommitSeq || info.HorizonSeq != 0 {
			t.Fatalf("%s: partition %+v, %v", p, info, err)
		}
		tx, err := b.Log.BeginPush(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range legacydb.Rows {
			got, err := tx.GetRow(ctx, todos, r.ID)
			if err != nil || got == nil {
				t.Fatalf("%s: GetRow(%s) = %v, %v", p, r.ID, got, err)
			}
			if got.Version != r.Version || fmt.Sprintf("%#v", got.Values) != fmt.Sprintf("%#v", r.Values()) {
				t.Fatalf("%s: row %s = v%d %v, want v%d %v", p, r.ID, got.Version, got.Values, r.Version, r.Values())
			}
			if got.ColumnVersions != nil {
				t.Fatalf("%s: row %s written before column versions has %x, want nil (legacy)", p, r.ID, got.ColumnVersions)
			}
		}
		if seq, err := tx.Tombstone(ctx, todos, legacydb.DeletedRow); err != nil || seq != 0 {
			t.Fatalf("%s: Tombstone of the row deleted before tombstones = %d, %v; want 0", p, seq, err)
		}
		if r, err := tx.GetRow(ctx, todos, legacydb.DeletedRow); err != nil || r != nil {
			t.Fatalf("%s: the deleted row reads %+v, %v", p, r, err)
		}
		scanned, err := tx.ScanRows(ctx, storage.RowQuery{Table: todos, Scopes: map[string][]string{"list_id": {"L1"}}, Limit: 10})
		if err != nil || len(scanned) != len(legacydb.Rows) {
			t.Fatalf("%s: PushTx.ScanRows = %d rows, %v", p, len(scanned), err)
		}
		for _, r := range scanned {
			if r.ColumnVersions != nil {
				t.Fatalf("%s: PushTx.ScanRows row %s has column versions %x, want nil", p, r.RowID, r.ColumnVersions)
			}
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		for i := int64(1); i <= legacydb.MaxCommitSeq; i++ {
			rec, err := b.Log.LookupIdempotency(ctx, p, "writer-"+p, fmt.Sprint("c", i))
			if err != nil || rec == nil || rec.Status != ssp2.CommitApplied || rec.CommitSeq != i {
				t.Fatalf("%s: idempotency record c%d = %+v, %v", p, i, rec, err)
			}
		}
		ch, err := b.Log.ScanChanges(ctx, p, storage.ChangeQuery{Table: "todos", Scopes: map[string][]string{"list_id": {"L1"}}, UpToSeq: legacydb.MaxCommitSeq, LimitChanges: 100})
		if err != nil || len(ch.Commits) != legacydb.MaxCommitSeq || ch.Commits[3].Changes[0].Op != ssp2.OpDelete {
			t.Fatalf("%s: ScanChanges = %+v, %v", p, ch, err)
		}
		if c, err := b.Clients.GetClient(ctx, p, "writer-"+p); err != nil || c == nil || c.ActorID != "ada" {
			t.Fatalf("%s: client record %+v, %v", p, c, err)
		}
	}

	// New writes: an old row updated, a new row, a delete.
	p := legacydb.Partitions[0]
	old := legacydb.Rows[0]
	updated := storage.EncodeColumnVersions([]int64{1, 1, old.Version + 1, 1, 1, old.Version + 1}, old.Version+1)
	tx, err := b.Log.BeginPush(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	seq := tx.Partition().MaxCommitSeq + 1
	vals := old.Values()
	vals[2] = "patched"
	steps := []error{
		tx.PutRow(ctx, todos, storage.RowRecord{RowID: old.ID, Version: old.Version + 1, Values: vals, ColumnVersions: updated}),
		tx.ClearTombstone(ctx, todos, "t9"),
		tx.PutRow(ctx, todos, storage.RowRecord{RowID: "t9", Version: 1, Values: legacydb.Row{ID: "t9", Title: "new", Position: 9}.Values(), ColumnVersions: storage.InsertedColumnVersions()}),
		tx.DeleteRow(ctx, todos, legacydb.Rows[1].ID, seq),
		tx.AppendCommit(ctx, storage.CommitRecord{Seq: seq, CreatedAtMs: 1, ActorID: "ada", ClientID: "upgraded", ClientCommitID: "u1"}),
	}
	for i, err := range steps {
		if err != nil {
			t.Fatalf("write %d on the upgraded database: %v", i, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err = b.Log.BeginPush(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for id, want := range map[string]storage.ColumnVersions{old.ID: updated, "t9": storage.InsertedColumnVersions(), legacydb.Rows[2].ID: nil} {
		r, err := tx.GetRow(ctx, todos, id)
		if err != nil || r == nil || (r.ColumnVersions == nil) != (want == nil) || string(r.ColumnVersions) != string(want) {
			t.Fatalf("after new writes: row %s = %+v, %v; want column versions %x", id, r, err, want)
		}
	}
	if got, err := tx.Tombstone(ctx, todos, legacydb.Rows[1].ID); err != nil || got != seq {
		t.Fatalf("after new writes: tombstone of %s = %d, %v; want %d", legacydb.Rows[1].ID, got, err, seq)
	}
}

// sqliteFile is the raw state of one database file: its tables' rows
// (the row table's by the columns it had before), its tables' columns,
// and the bytes of the row table's b-tree root page.
type sqliteFile struct {
	tables  map[string]string // name → rows
	columns map[string]string // name → column names
	root    []byte
}

// readSQLiteFile reads the file at path directly (read-only). cols, when
// set, gives the columns to read of each table (else every one).
func readSQLiteFile(t *testing.T, path string, cols map[string]string) sqliteFile {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	f := sqliteFile{tables: map[string]string{}, columns: map[string]string{}}
	names, err := column[string](db.Query(`SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		cs, err := column[string](db.Query(`SELECT name FROM pragma_table_info(?) ORDER BY cid`, n))
		if err != nil {
			t.Fatal(err)
		}
		f.columns[n] = strings.Join(cs, ",")
		sel := f.columns[n]
		if c, ok := cols[n]; ok {
			sel = c
		}
		where := ""
		if n == "sync_meta" {
			// A Dir's EnsureSchema gives every file a new checkpoint
			// generation (dir_gate.go), as the old build did.
			where = ` WHERE key <> 'checkpoint_gen'`
		}
		rows, err := db.Query(`SELECT ` + sel + ` FROM "` + n + `"` + where + ` ORDER BY 1, 2`)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		var b strings.Builder
		for rows.Next() {
			vals := make([]any, len(strings.Split(sel, ",")))
			ptrs := make([]any, len(vals))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%#v\n", vals)
		}
		rows.Close()
		f.tables[n] = b.String()
	}
	var root, pageSize int64
	if err := db.QueryRow(`SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = 'todos'`).Scan(&root); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`PRAGMA page_size`).Scan(&pageSize); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f.root = raw[(root-1)*pageSize : root*pageSize]
	return f
}

func column[T any](rows *sql.Rows, err error) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// TestSQLite opens the data directory written by branch main, ensures the
// same schema and checks, in each file read directly after the upgrade,
// that the todos table gained _sync_column_versions and the database
// sync_tombstones, nothing else, with the todos b-tree's root page (which
// holds every row) byte for byte the same and every table's rows the
// same; then that it serves (checkServes).
func TestSQLite(t *testing.T) {
	ctx := t.Context()
	dir := legacydb.SQLiteDir(t)
	before := map[string]sqliteFile{}
	for _, name := range sqlite.DirFileNames(2) {
		before[name] = readSQLiteFile(t, filepath.Join(dir, name), nil)
	}
	d, err := sqlite.OpenDir(ctx, dir, sqlite.DirOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Files() != 2 {
		t.Fatalf("the fixture opens with %d files, want 2", d.Files())
	}
	if err := d.EnsureSchema(ctx, legacydb.Schema()); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range sqlite.DirFileNames(2) {
		b := before[name]
		a := readSQLiteFile(t, filepath.Join(dir, name), b.columns)
		for n, cols := range b.columns {
			want := cols
			if n == "todos" {
				want += ",_sync_column_versions"
			}
			if a.columns[n] != want {
				t.Errorf("%s: table %s has columns %s, want %s", name, n, a.columns[n], want)
			}
			if a.tables[n] != b.tables[n] {
				t.Errorf("%s: table %s changed:\n%s\nwant\n%s", name, n, a.tables[n], b.tables[n])
			}
		}
		for n := range a.columns {
			if _, ok := b.columns[n]; !ok && n != "sync_tombstones" {
				t.Errorf("%s: new table %s", name, n)
			}
		}
		if a.columns["sync_tombstones"] == "" {
			t.Errorf("%s: no sync_tombstones table", name)
		}
		if !strings.Contains(b.tables["todos"], "t1 v3") {
			t.Fatalf("%s: the fixture's todos are not what the test expects:\n%s", name, b.tables["todos"])
		}
		if string(a.root) != string(b.root) {
			t.Errorf("%s: the todos table's root page (every row) was rewritten", name)
		}
	}
	d, err = sqlite.OpenDir(ctx, dir, sqlite.DirOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.EnsureSchema(ctx, legacydb.Schema()); err != nil {
		t.Fatal(err)
	}
	checkServes(t, d.Backend())
}

// pgRowState reads what proves a row table untouched: its relfilenode (a
// table rewrite changes it) and each row's ctid and xmin (an update
// changes them), with the rows' values, and the rows of every other
// table.
func pgRowState(t *testing.T, schemaName string) map[string]string {
	t.Helper()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	q := func(sql string, args ...any) string {
		rows, err := conn.Query(ctx, sql, args...)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		var b strings.Builder
		for rows.Next() {
			v, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%v\n", v)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	schemaIdent := pgx.Identifier{schemaName}.Sanitize()
	out := map[string]string{
		"relfilenode": q(`SELECT relfilenode FROM pg_class WHERE oid = to_regclass($1)`, schemaIdent+".todos"),
		"todos": q(`SELECT ctid::text, xmin::text, partition_id, id, list_id, title, done, position, updated_at_ms, _sync_version FROM ` +
			schemaIdent + `.todos ORDER BY partition_id, id`),
	}
	tables := q(`SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_name <> 'todos' ORDER BY 1`, schemaName)
	for _, n := range strings.Fields(strings.NewReplacer("[", " ", "]", " ").Replace(tables)) {
		out[n] = q(`SELECT * FROM ` + schemaIdent + `.` + pgx.Identifier{n}.Sanitize() + ` ORDER BY 1`)
	}
	return out
}

// TestPostgres loads the schema written by branch main, ensures the same
// schema and checks that no row of todos was rewritten (same
// relfilenode, every row's ctid and xmin the same), every other table's
// rows are the same, and the store serves (checkServes); then that the
// capture the old build took restores (its snapshot table has no column
// versions: the rows come back legacy) and a new capture and restore work
// on it.
func TestPostgres(t *testing.T) {
	ctx := t.Context()
	name := legacydb.PostgresSchema(t)
	before := pgRowState(t, name)
	if !strings.Contains(before["todos"], "t1 v3") || !strings.Contains(before["sync_snapshot__todos"], "t1 v3") {
		t.Fatalf("the fixture is not what the test expects: %v", before)
	}
	s := pgtest.OpenSchema(t, name, postgres.Options{MaxConns: 4})
	if err := s.EnsureSchema(ctx, legacydb.Schema()); err != nil {
		t.Fatal(err)
	}
	after := pgRowState(t, name)
	if _, ok := after["sync_tombstones"]; !ok {
		t.Fatal("EnsureSchema created no sync_tombstones table")
	}
	for n, v := range before {
		if after[n] != v {
			t.Errorf("%s changed:\n%s\nwant\n%s", n, after[n], v)
		}
	}
	for n := range after {
		if _, ok := before[n]; !ok && n != "sync_tombstones" {
			t.Errorf("new table %s", n)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	checkServes(t, s.Backend())

	// The old build's capture of "default" restores: the rows as they
	// were captured, legacy.
	todos := legacydb.Schema().Table("todos")
	p := legacydb.CapturedPartition
	if _, err := s.RestorePartition(ctx, p, 1); err != nil {
		t.Fatalf("restore of the old build's capture: %v", err)
	}
	wantRows := func(what string, cv map[string]storage.ColumnVersions) {
		t.Helper()
		tx, err := s.BeginPush(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		for _, r := range legacydb.Rows {
			got, err := tx.GetRow(ctx, todos, r.ID)
			if err != nil || got == nil || got.Version != r.Version || string(got.ColumnVersions) != string(cv[r.ID]) || (got.ColumnVersions == nil) != (cv[r.ID] == nil) {
				t.Fatalf("%s: row %s = %+v, %v; want v%d, column versions %x", what, r.ID, got, err, r.Version, cv[r.ID])
			}
		}
		if r, err := tx.GetRow(ctx, todos, "t9"); err != nil || r != nil {
			t.Fatalf("%s: row t9, written after the capture: %+v, %v", what, r, err)
		}
	}
	wantRows("after restoring the old capture", nil)
	// A capture by this build (into the old build's snapshot tables),
	// after writing column versions and a tombstone, restores them.
	cv := storage.EncodeColumnVersions([]int64{1, 1, 9}, 9)
	tx, err := s.BeginPush(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	r := legacydb.Rows[0]
	if err := tx.PutRow(ctx, todos, storage.RowRecord{RowID: r.ID, Version: r.Version, Values: r.Values(), ColumnVersions: cv}); err != nil {
		t.Fatal(err)
	}
	if err := tx.DeleteRow(ctx, todos, "gone", 7); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.CapturePartition(ctx, p); err != nil {
		t.Fatalf("capture into the old build's snapshot tables: %v", err)
	}
	tx, err = s.BeginPush(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.PutRow(ctx, todos, storage.RowRecord{RowID: r.ID, Version: r.Version, Values: r.Values()}); err != nil {
		t.Fatal(err)
	}
	if err := tx.ClearTombstone(ctx, todos, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RestorePartition(ctx, p, 2); err != nil {
		t.Fatal(err)
	}
	wantRows("after a new capture and restore", map[string]storage.ColumnVersions{r.ID: cv})
	tx, err = s.BeginPush(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if seq, err := tx.Tombstone(ctx, todos, "gone"); err != nil || seq != 7 {
		t.Fatalf("tombstone after the restore: %d, %v; want 7", seq, err)
	}
}
