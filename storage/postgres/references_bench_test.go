package postgres_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/storage/storagetest"
)

// BenchmarkScanByColumn measures PushTx.ScanByColumn inside one push
// transaction over 2 × 101,000 todos (the SQLite benchmark's shape: in
// each of two partitions 10,000 lists of 10 todos, child j of list i
// being "t<j><i>" so a list's children are spread over the primary key,
// rank the list's number, and one list "big" of 1,000 todos; loaded by
// one INSERT, then ANALYZE): the children of one list among 10,000, a
// childless list, a page of 100 of the list of 1,000, and, for
// comparison, the same 10 todos found by the integer column rank, which
// has no index.
func BenchmarkScanByColumn(b *testing.B) {
	name := pgtest.NewSchema(b)
	s := pgtest.OpenSchema(b, name, postgres.Options{MaxConns: 4})
	sch := storagetest.MustParse(storagetest.RefSchemaV1)
	ctx := b.Context()
	if err := s.EnsureSchema(ctx, sch); err != nil {
		b.Fatal(err)
	}
	todos := sch.Table("todos")
	table := pgx.Identifier{name, "todos"}.Sanitize()
	for _, q := range []string{
		`INSERT INTO ` + table + ` (partition_id, id, project, list_id, rank, _sync_version, _sync_column_versions)
		SELECT p, 't' || lpad(j::text, 2, '0') || lpad(i::text, 5, '0'), 'p1', 'l' || lpad(i::text, 5, '0'), i, 1, '\x0101'::bytea
		FROM unnest(ARRAY['p', 'other']) AS p, generate_series(0, 9) AS j, generate_series(0, 9999) AS i
		UNION ALL
		SELECT p, 'u' || lpad(k::text, 5, '0'), 'p1', 'big', -1, 1, '\x0101'::bytea
		FROM unnest(ARRAY['p', 'other']) AS p, generate_series(0, 999) AS k`,
		`VACUUM ANALYZE ` + table,
	} {
		if _, err := s.Pool().Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	tx, err := s.BeginPush(ctx, "p")
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	scan := func(b *testing.B, col int, value func(n int) any, after func(n int) *string, limit, want int) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			rs, err := tx.ScanByColumn(ctx, storage.ColumnQuery{Table: todos, Column: col, Value: value(n), AfterRowID: after(n), Limit: limit})
			if err != nil || len(rs) != want {
				b.Fatalf("ScanByColumn: %d rows, %v; want %d", len(rs), err, want)
			}
			n++
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*max(want, 1)), "ns/row")
	}
	none := func(int) *string { return nil }
	list := func(n int) any { return fmt.Sprintf("l%05d", n*7919%10_000) }
	b.Run("children=10", func(b *testing.B) { scan(b, 2, list, none, 100, 10) })
	b.Run("childless", func(b *testing.B) {
		scan(b, 2, func(n int) any { return fmt.Sprintf("x%05d", n%10_000) }, none, 1, 0)
	})
	b.Run("page=100-of-1000", func(b *testing.B) {
		scan(b, 2, func(int) any { return "big" }, func(n int) *string {
			if n%10 == 0 {
				return nil
			}
			id := fmt.Sprintf("u%05d", (n%10)*100-1)
			return &id
		}, 100, 100)
	})
	b.Run("unindexed-rank-children=10", func(b *testing.B) {
		scan(b, 4, func(n int) any { return int64(n * 7919 % 10_000) }, none, 100, 10)
	})
}
