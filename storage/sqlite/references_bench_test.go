package sqlite_test

import (
	"fmt"
	"testing"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/storage/storagetest"
)

// refBenchParents and refBenchChildren shape BenchmarkScanByColumn's
// todos: in each of two partitions, refBenchParents lists of
// refBenchChildren todos each (child j of list i is "t<j><i>", so a
// list's children are spread over the primary key), their rank the
// list's number, and one list "big" of 1,000 todos.
const (
	refBenchParents  = 10_000
	refBenchChildren = 10
	refBenchBig      = 1_000
)

func refBenchRows() []ssp2.Row {
	rows := make([]ssp2.Row, 0, refBenchParents*refBenchChildren+refBenchBig)
	for j := range refBenchChildren {
		for i := range refBenchParents {
			rows = append(rows, ssp2.Row{fmt.Sprintf("t%02d%05d", j, i), "p1", fmt.Sprintf("l%05d", i), nil, int64(i), nil, nil})
		}
	}
	for k := range refBenchBig {
		rows = append(rows, ssp2.Row{fmt.Sprintf("u%05d", k), "p1", "big", nil, int64(-1), nil, nil})
	}
	return rows
}

// BenchmarkScanByColumn measures PushTx.ScanByColumn inside one push
// transaction over 2 × 101,000 todos: the children of one list among
// 10,000 (10 each, through the reference index), a childless list (the
// RESTRICT check of a parent without children), a page of 100 of a list
// of 1,000, and, for comparison, the same 10 todos found by the integer
// column rank, which has no index (the partition is walked).
func BenchmarkScanByColumn(b *testing.B) {
	s := openTemp(b)
	b.Cleanup(func() { _ = s.Close() })
	sch := storagetest.MustParse(storagetest.RefSchemaV1)
	if err := s.EnsureSchema(b.Context(), sch); err != nil {
		b.Fatal(err)
	}
	todos := sch.Table("todos")
	rows := refBenchRows()
	for _, part := range []string{"p", "other"} {
		tx, err := s.BeginPush(b.Context(), part)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range rows {
			if err := tx.PutRow(b.Context(), todos, storage.RowRecord{RowID: r[0].(string), Version: 1, Values: r, ColumnVersions: storage.InsertedColumnVersions()}); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
	benchScanByColumn(b, s, todos)
}

// benchScanByColumn runs the sub-benchmarks of BenchmarkScanByColumn on
// one open push transaction of partition "p".
func benchScanByColumn(b *testing.B, s *sqlite.Store, todos *schema.Table) {
	tx, err := s.BeginPush(b.Context(), "p")
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback(b.Context()) //nolint:errcheck
	scan := func(b *testing.B, col int, value func(n int) any, after func(n int) *string, limit, want int) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			rs, err := tx.ScanByColumn(b.Context(), storage.ColumnQuery{Table: todos, Column: col, Value: value(n), AfterRowID: after(n), Limit: limit})
			if err != nil || len(rs) != want {
				b.Fatalf("ScanByColumn: %d rows, %v; want %d", len(rs), err, want)
			}
			n++
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*max(want, 1)), "ns/row")
	}
	none := func(int) *string { return nil }
	list := func(n int) any { return fmt.Sprintf("l%05d", n*7919%refBenchParents) }
	b.Run("children=10", func(b *testing.B) { scan(b, 2, list, none, 100, refBenchChildren) })
	b.Run("childless", func(b *testing.B) {
		scan(b, 2, func(n int) any { return fmt.Sprintf("x%05d", n%refBenchParents) }, none, 1, 0)
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
		scan(b, 4, func(n int) any { return int64(n * 7919 % refBenchParents) }, none, 100, refBenchChildren)
	})
}
