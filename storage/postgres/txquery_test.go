package postgres_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

// A registered query run inside a push transaction cannot write, not even
// through a function or a sequence (what a SELECT can reach on
// PostgreSQL): the statement is refused, nothing it touched changes, and
// the push transaction goes on.
func TestTxQueryCannotWrite(t *testing.T) {
	ctx := t.Context()
	name := pgtest.NewSchema(t)
	s := pgtest.OpenSchema(t, name, postgres.Options{MaxConns: 2})
	sch := mustSchema(t)
	if err := s.EnsureSchema(ctx, sch); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	seq, docs := pgx.Identifier{name, "q_seq"}.Sanitize(), pgx.Identifier{name, "docs"}.Sanitize()
	wipe := pgx.Identifier{name, "q_wipe"}.Sanitize()
	for _, stmt := range []string{
		"CREATE SEQUENCE " + seq,
		"CREATE FUNCTION " + wipe + "() RETURNS bigint LANGUAGE sql AS $$ DELETE FROM " + docs + "; SELECT 1::bigint $$",
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	docsT := sch.Table("docs")
	tx, err := s.BeginPush(ctx, "p1")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := tx.PutRow(ctx, docsT, storage.RowRecord{RowID: "d1", Version: 1, Values: doc("d1", "a", nil)}); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		"SELECT nextval('" + seq + "') AS n",
		"SELECT " + wipe + "() AS n",
	} {
		res, err := tx.Query(ctx, storage.Query{MaxRows: 1, Parts: []storage.QueryPart{{Text: sql}}})
		if !errors.Is(err, storage.ErrQueryFailed) || res.Rows != nil {
			t.Fatalf("%s: rows %v err %v, want ErrQueryFailed", sql, res.Rows, err)
		}
	}
	// The staged row survived the refused DELETE and the transaction
	// commits.
	res, err := tx.Query(ctx, storage.Query{MaxRows: 5, Parts: []storage.QueryPart{
		{Text: "SELECT count(*) AS n FROM "}, {Relation: &storage.QueryRelation{Table: docsT, Alias: "d"}}}})
	if err != nil || len(res.Rows) != 1 || res.Rows[0][0] != int64(1) {
		t.Fatalf("count after the refusals: rows %v err %v, want [[1]]", res.Rows, err)
	}
	if err := tx.AppendCommit(ctx, commitRec(1, "k1")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var called bool
	if err := conn.QueryRow(ctx, "SELECT is_called FROM "+seq).Scan(&called); err != nil || called {
		t.Fatalf("sequence advanced by a refused query (is_called %v, err %v)", called, err)
	}
	rows, err := s.ScanRows(ctx, "p1", storage.RowQuery{Table: docsT, Scopes: map[string][]string{"project": {"a"}}, Limit: 5})
	if err != nil || len(rows) != 1 || rows[0].RowID != "d1" {
		t.Fatalf("rows after commit: %v %v, want d1", rows, err)
	}
}
