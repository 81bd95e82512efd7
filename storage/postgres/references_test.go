package postgres_test

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/storage/storagetest"
)

// refIndexes returns "table: index(columns)" of every reference index
// (kind r) of the schema's tables, sorted, and each index's oid by name.
// Every one must be a valid, non-unique btree.
func refIndexes(t *testing.T, s *postgres.Store, schemaName string) ([]string, map[string]uint32) {
	t.Helper()
	rows, err := s.Pool().Query(t.Context(), `SELECT t.relname::text, c.relname::text, c.oid::int8, i.indisunique, i.indisvalid, am.amname::text,
		(SELECT string_agg(a.attname::text, ',' ORDER BY k.n) FROM unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
		   JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum)
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_am am ON am.oid = c.relam
		WHERE n.nspname = $1 AND c.relname ~ '^[0-9]+_.*_r_' ORDER BY 1, 2`, schemaName)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	oids := map[string]uint32{}
	for rows.Next() {
		var tbl, name, am, cols string
		var oid int64
		var unique, valid bool
		if err := rows.Scan(&tbl, &name, &oid, &unique, &valid, &am, &cols); err != nil {
			t.Fatal(err)
		}
		if unique || !valid || am != "btree" {
			t.Fatalf("index %s: unique %v, valid %v, %s; want a valid non-unique btree", name, unique, valid, am)
		}
		out = append(out, fmt.Sprintf("%s: %s(%s)", tbl, name, cols))
		oids[name] = uint32(oid)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out, oids
}

// wantRefIndexes is refIndexes' answer for sch.
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

func pushRows(t testing.TB, s *postgres.Store, partition string, tb *schema.Table, rows ...ssp2.Row) {
	t.Helper()
	tx, err := s.BeginPush(t.Context(), partition)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context()) //nolint:errcheck
	for _, r := range rows {
		if err := tx.PutRow(t.Context(), tb, storage.RowRecord{RowID: r[tb.PK].(string), Version: 1, Values: r}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestReferenceIndexes checks EnsureSchema creates an index on
// (partition_id, column, primary key) per declared reference: on new
// tables, and when a bump declares a reference on an existing column of a
// table holding rows or on a column the bump adds; an EnsureSchema at the
// same version, by this process or another, creates nothing (the
// indexes keep their oids).
func TestReferenceIndexes(t *testing.T) {
	v1, v2 := storagetest.MustParse(storagetest.RefSchemaV1), storagetest.MustParse(storagetest.RefSchemaV2)
	name := pgtest.NewSchema(t)
	s := pgtest.OpenSchema(t, name, postgres.Options{MaxConns: 4})
	if err := s.EnsureSchema(t.Context(), v1); err != nil {
		t.Fatal(err)
	}
	if got, _ := refIndexes(t, s, name); !slices.Equal(got, wantRefIndexes(v1)) {
		t.Fatalf("after v1: reference indexes %q, want %q", got, wantRefIndexes(v1))
	}
	pushRows(t, s, "p", v1.Table("notes"), ssp2.Row{"n1", "p1", "L1"}, ssp2.Row{"n2", "p1", nil})
	if err := s.EnsureSchema(t.Context(), v2); err != nil {
		t.Fatal(err)
	}
	got, oids := refIndexes(t, s, name)
	if !slices.Equal(got, wantRefIndexes(v2)) {
		t.Fatalf("after v2: reference indexes %q, want %q", got, wantRefIndexes(v2))
	}
	other := pgtest.OpenSchema(t, name, postgres.Options{MaxConns: 2})
	for _, h := range []*postgres.Store{s, other} {
		if err := h.EnsureSchema(t.Context(), v2); err != nil {
			t.Fatal(err)
		}
		again, oidsAgain := refIndexes(t, s, name)
		if !slices.Equal(again, got) || !maps.Equal(oidsAgain, oids) {
			t.Fatalf("EnsureSchema at the same version changed the reference indexes: %q %v, was %q %v", again, oidsAgain, got, oids)
		}
	}
}

// TestBumpAddingReferenceOverOversizedValue: a bump that declares a
// reference on a column holding a value PostgreSQL's btree cannot index
// (about 2.7 kB; no parent key is that long, CheckRow refuses such a
// reference value from then on) fails, naming the index, and changes
// nothing: the stored schema stays the older one and serves, with its
// rows. Once the row is gone, and vacuumed (CREATE INDEX indexes the dead
// row versions VACUUM has not removed yet), the bump succeeds.
func TestBumpAddingReferenceOverOversizedValue(t *testing.T) {
	v1, v2 := storagetest.MustParse(storagetest.RefSchemaV1), storagetest.MustParse(storagetest.RefSchemaV2)
	// A database of its own: VACUUM below must be able to remove the
	// deleted row's version, which an open transaction of any other test
	// in a shared database would keep.
	db := pgtest.NewDatabase(t, pgtest.URL(t))
	s, err := postgres.Open(t.Context(), db.URL, postgres.Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.EnsureSchema(t.Context(), v1); err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 3000)
	_, _ = rand.Read(raw)
	huge := base64.StdEncoding.EncodeToString(raw) // 4,000 bytes that do not compress
	notes := v1.Table("notes")
	pushRows(t, s, "p", notes, ssp2.Row{"n1", "p1", huge}, ssp2.Row{"n2", "p1", "L1"})
	err = s.EnsureSchema(t.Context(), v2)
	if err == nil || !strings.Contains(err.Error(), v2.Table("notes").ReferenceIndexIdent(2)) {
		t.Fatalf("EnsureSchema(v2) over an oversized value = %v, want an error naming the index", err)
	}
	if errors.Is(err, storage.ErrSchemaNewer) || errors.Is(err, storage.ErrSchemaChanged) {
		t.Fatalf("EnsureSchema(v2): %v", err)
	}
	// Nothing changed: v1 is still the stored schema, and serves.
	if err := s.EnsureSchema(t.Context(), v1); err != nil {
		t.Fatalf("EnsureSchema(v1) after the failed bump: %v", err)
	}
	tx, err := s.BeginPush(t.Context(), "p")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := tx.ScanByColumn(t.Context(), storage.ColumnQuery{Table: notes, Column: 2, Value: huge, Limit: 10})
	if err != nil || len(rs) != 1 || rs[0].RowID != "n1" {
		t.Fatalf("v1 ScanByColumn of the oversized value = %v, %v", rs, err)
	}
	if err := tx.DeleteRow(t.Context(), notes, "n1", tx.Partition().MaxCommitSeq+1); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	exec(t, s, "VACUUM notes")
	if err := s.EnsureSchema(t.Context(), v2); err != nil {
		t.Fatalf("EnsureSchema(v2) once the row is gone: %v", err)
	}
}

// TestScanByColumnPlan checks the statements ScanByColumn runs on a
// reference column (first page, later page) are an ordered range scan of
// the reference index stopped by the limit (no Sort, no Seq Scan, no
// bitmap scan that would need one), with custom and generic plans,
// with no statistics and after ANALYZE, for a value with 10,000 children
// and one with one: todos holds, in the partition and in another, one
// list of 10,000 todos and 10,000 lists of one.
func TestScanByColumnPlan(t *testing.T) {
	name := pgtest.NewSchema(t)
	s := pgtest.OpenSchema(t, name, postgres.Options{MaxConns: 2})
	sch := storagetest.MustParse(storagetest.RefSchemaV1)
	if err := s.EnsureSchema(t.Context(), sch); err != nil {
		t.Fatal(err)
	}
	todos := sch.Table("todos")
	table := pgx.Identifier{name, "todos"}.Sanitize()
	exec(t, s, "ALTER TABLE "+table+" SET (autovacuum_enabled = false, toast.autovacuum_enabled = false)")
	exec(t, s, `INSERT INTO `+table+` (partition_id, id, project, list_id, parent_id, _sync_version)
		SELECT p, 'big' || lpad(i::text, 5, '0'), 'p1', 'big', 'one' || lpad(i::text, 5, '0'), 1
		FROM unnest(ARRAY['p', 'other']) AS p, generate_series(0, 9999) AS i
		UNION ALL
		SELECT p, 'one' || lpad(i::text, 5, '0'), 'p1', 'l' || lpad(i::text, 5, '0'), NULL, 1
		FROM unnest(ARRAY['p', 'other']) AS p, generate_series(0, 9999) AS i`)
	conn, err := s.Pool().Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// Each statement is prepared on one connection and explained through
	// EXECUTE, so plan_cache_mode decides between a plan for the values
	// and the generic one (which shows $n).
	check := func(when string) {
		for _, r := range todos.References {
			col := todos.Columns[r.Column].Name
			for _, after := range []bool{false, true} {
				q, err := postgres.ColumnScanSQL(s, "todos", r.Column, after)
				if err != nil {
					t.Fatal(err)
				}
				stmt := fmt.Sprintf("scan_%s_%v", col, after)
				if _, err := conn.Exec(t.Context(), "PREPARE "+stmt+" AS "+q); err != nil {
					t.Fatal(err)
				}
				for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
					if _, err := conn.Exec(t.Context(), "SET plan_cache_mode = "+mode); err != nil {
						t.Fatal(err)
					}
					values := map[string][]string{"list_id": {"big", "l00005"}, "parent_id": {"one00005", "nobody"}}[col]
					for _, v := range values {
						args := "'p', '" + v + "'"
						if after {
							args += ", 'big00100'"
						}
						rows, err := conn.Query(t.Context(), "EXPLAIN EXECUTE "+stmt+"("+args+", 100)")
						if err != nil {
							t.Fatal(err)
						}
						lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
						if err != nil {
							t.Fatal(err)
						}
						plan := strings.Join(lines, "\n")
						what := fmt.Sprintf("%s, %s, %s = %q, after %v", when, mode, col, v, after)
						t.Logf("%s:\n%s", what, plan)
						if !strings.Contains(plan, fmt.Sprintf("Index Scan using %q on todos", todos.ReferenceIndexIdent(r.Column))) ||
							strings.Contains(plan, "Sort") || strings.Contains(plan, "Seq Scan") || strings.Contains(plan, "Bitmap") {
							t.Fatalf("%s: the plan is not an ordered scan of the reference index:\n%s", what, plan)
						}
						if generic := strings.Contains(plan, "$2"); generic != (mode == "force_generic_plan") {
							t.Fatalf("%s: generic plan %v:\n%s", what, generic, plan)
						}
					}
				}
				if _, err := conn.Exec(t.Context(), "DEALLOCATE "+stmt); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	check("no statistics")
	exec(t, s, "ANALYZE "+table)
	check("after ANALYZE")
}
