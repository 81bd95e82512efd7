package sqlite

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/storagetest"
)

// refIndexes returns "table: index(columns)" of every reference index
// (kind r) in s's file, sorted, the columns as the index stores its key
// (pragma_index_xinfo: the WITHOUT ROWID tables' primary key included).
func refIndexes(t *testing.T, s *Store) []string {
	t.Helper()
	rows, err := s.rdb.QueryContext(t.Context(), `SELECT m.tbl_name, m.name, group_concat(x.name, ',')
		FROM sqlite_master m, pragma_index_xinfo(m.name) x
		WHERE m.type = 'index' AND m.name GLOB '[0-9]*_r_*' AND x.key
		GROUP BY m.name ORDER BY m.tbl_name, m.name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var tbl, name, cols string
		if err := rows.Scan(&tbl, &name, &cols); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s: %s(%s)", tbl, name, cols))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// wantRefIndexes is refIndexes' answer for sch: one index per reference,
// keyed (partition_id, column, primary key).
func wantRefIndexes(sch *schema.Schema) []string {
	var out []string
	for _, t := range sch.Tables {
		for _, r := range t.References {
			out = append(out, fmt.Sprintf("%s: %s(partition_id,%s,%s)", t.Name, t.ReferenceIndexIdent(r.Column), t.Columns[r.Column].Name, t.Columns[t.PK].Name))
		}
	}
	slices.Sort(out)
	return out
}

func schemaCookie(t *testing.T, s *Store) int64 {
	t.Helper()
	var v int64
	if err := s.rdb.QueryRowContext(t.Context(), "PRAGMA schema_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestReferenceIndexes checks EnsureSchema creates an index per declared
// reference, in every file of a directory: on new tables, and when a bump
// declares a reference on an existing column of a table holding rows or
// on a column the bump adds; a same-version EnsureSchema changes nothing
// in any file (SQLite's schema cookie stays).
func TestReferenceIndexes(t *testing.T) {
	v1, v2 := storagetest.MustParse(storagetest.RefSchemaV1), storagetest.MustParse(storagetest.RefSchemaV2)
	d, err := OpenDir(t.Context(), t.TempDir(), DirOptions{Files: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	b := d.Backend()
	if err := b.Lifecycle.EnsureSchema(t.Context(), v1); err != nil {
		t.Fatal(err)
	}
	for i := range d.Files() {
		if got, want := refIndexes(t, d.File(i)), wantRefIndexes(v1); !slices.Equal(got, want) {
			t.Fatalf("file %d after v1: reference indexes %q, want %q", i, got, want)
		}
	}
	// Rows in every file, in the column v2 declares a reference on.
	files := map[int]bool{}
	for i := 0; len(files) < d.Files(); i++ {
		part := fmt.Sprintf("p%d", i)
		files[FileOf(part, d.Files())] = true
		pushRows(t, b.Log, part, v1.Table("notes"), ssp2.Row{"n1", "p1", "L1"}, ssp2.Row{"n2", "p1", nil})
	}
	if err := b.Lifecycle.EnsureSchema(t.Context(), v2); err != nil {
		t.Fatal(err)
	}
	cookies := map[int]int64{}
	for i := range d.Files() {
		if got, want := refIndexes(t, d.File(i)), wantRefIndexes(v2); !slices.Equal(got, want) {
			t.Fatalf("file %d after v2: reference indexes %q, want %q", i, got, want)
		}
		cookies[i] = schemaCookie(t, d.File(i))
	}
	if err := b.Lifecycle.EnsureSchema(t.Context(), v2); err != nil {
		t.Fatal(err)
	}
	for i := range d.Files() {
		if c := schemaCookie(t, d.File(i)); c != cookies[i] {
			t.Fatalf("file %d: EnsureSchema at the same version changed the schema (cookie %d -> %d)", i, cookies[i], c)
		}
	}
}

// pushRows commits rows of t in partition.
func pushRows(t *testing.T, log storage.Log, partition string, tb *schema.Table, rows ...ssp2.Row) {
	t.Helper()
	tx, err := log.BeginPush(t.Context(), partition)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context()) //nolint:errcheck
	for _, r := range rows {
		id := r[tb.PK].(string)
		if err := tx.PutRow(t.Context(), tb, storage.RowRecord{RowID: id, Version: 1, Values: r}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestScanByColumnUsesReferenceIndex checks the statements ScanByColumn
// runs on a reference column, first page and later pages, search the
// reference index for the partition, the value and the primary-key range,
// in index order (no temporary b-tree for the ORDER BY, no SCAN of the
// table), before and after ANALYZE of a skewed table: one list with 3,000
// todos and 3,000 lists of one, in the partition and in another.
func TestScanByColumnUsesReferenceIndex(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "sync.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sch := storagetest.MustParse(storagetest.RefSchemaV1)
	if err := s.EnsureSchema(ctx, sch); err != nil {
		t.Fatal(err)
	}
	todos := sch.Table("todos")
	for _, part := range []string{"p", "other"} {
		var rows []ssp2.Row
		for i := range 3000 {
			rows = append(rows, ssp2.Row{fmt.Sprintf("big%05d", i), "p1", "big", fmt.Sprintf("one%05d", i), nil, nil, nil})
			rows = append(rows, ssp2.Row{fmt.Sprintf("one%05d", i), "p1", fmt.Sprintf("l%05d", i), nil, nil, nil, nil})
		}
		pushRows(t, s.Backend().Log, part, todos, rows...)
	}
	_, tables, _, err := s.current()
	if err != nil {
		t.Fatal(err)
	}
	ts := tables["todos"]
	check := func(when string) {
		for _, r := range todos.References {
			col := todos.Columns[r.Column].Name
			for _, after := range []bool{false, true} {
				args := []any{"p", "big"}
				want := fmt.Sprintf("SEARCH todos USING INDEX %s (partition_id=? AND %s=?)", todos.ReferenceIndexIdent(r.Column), col)
				if after {
					args = append(args, "big00100")
					want = strings.TrimSuffix(want, ")") + " AND id>?)"
				}
				args = append(args, 100)
				plan := queryPlan(t, s, columnScanSQL(ts, r.Column, after), args...)
				t.Logf("%s, %s, after %v: %s", when, col, after, plan)
				if plan != want {
					t.Fatalf("%s: plan of ScanByColumn on %s (after %v) = %q, want %q", when, col, after, plan, want)
				}
			}
		}
	}
	check("no statistics")
	if _, err := s.conn.ExecContext(ctx, "ANALYZE"); err != nil {
		t.Fatal(err)
	}
	check("after ANALYZE")
	// The statements prepared for the references are these ones.
	for col, cs := range ts.byColumn {
		if cs.first == nil || cs.after == nil {
			t.Fatalf("column %d: statements not prepared", col)
		}
	}
	if got := slices.Sorted(maps.Keys(ts.byColumn)); !slices.Equal(got, []int{2, 3}) {
		t.Fatalf("prepared scans of columns %v, want the references' [2 3]", got)
	}
}
