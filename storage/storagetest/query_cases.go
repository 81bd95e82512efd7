package storagetest

import (
	"errors"
	"reflect"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// Registered queries (storage.Querier, the Queries role): they run on the
// backends that have the role (SQLite, PostgreSQL).

// runQuery runs q on partition with an open gate check.
func (e *env) runQuery(partition string, q storage.Query) (storage.QueryResult, error) {
	e.t.Helper()
	return e.b.Queries.Query(e.ctx, partition, e.sch.Version, q, func(storage.ServeGate) error { return nil })
}

// itemsRel is a relation part over items aliased as alias.
func (e *env) itemsRel(alias string, filters ...storage.ScopeFilter) storage.QueryPart {
	return storage.QueryPart{Relation: &storage.QueryRelation{Table: e.items, Alias: alias, Filters: filters}}
}

func txt(s string) storage.QueryPart { return storage.QueryPart{Text: s} }

var bindPart = storage.QueryPart{Bind: true}

// seedQueryRows commits items a1, a2 (project a, owner 7) and b1 (project
// b, owner 8) to partition p1 and x1 (project a) to p2; it returns p1's
// max commit seq.
func (e *env) seedQueryRows() int64 {
	e.t.Helper()
	var seq int64
	e.push("p1", func(tx storage.PushTx) {
		for _, r := range []ssp2.Row{item("a1", "a", 7), item("a2", "a", 7), item("b1", "b", 8)} {
			r[3] = "title " + r[0].(string)
			e.put(tx, e.items, 1, r)
		}
		seq = e.appendNext(tx)
	})
	e.push("p2", func(tx storage.PushTx) {
		e.put(tx, e.items, 1, item("x1", "a", 7))
		e.appendNext(tx)
		e.appendNext(tx)
	})
	return seq
}

func idsOf(e *env, res storage.QueryResult) []string {
	e.t.Helper()
	var out []string
	for _, r := range res.Rows {
		s, ok := r[0].(string)
		if !ok {
			e.t.Fatalf("id column scanned as %T", r[0])
		}
		out = append(out, s)
	}
	return out
}

var queryTests = []test{
	{name: "RelationIsThePartitionsRows", fn: func(e *env) {
		seq := e.seedQueryRows()
		res, err := e.runQuery("p1", storage.Query{MaxRows: 10, Parts: []storage.QueryPart{
			txt("SELECT id, title FROM "), e.itemsRel("i"), txt(" ORDER BY id")}})
		if err != nil {
			e.t.Fatalf("Query: %v", err)
		}
		if got, want := idsOf(e, res), []string{"a1", "a2", "b1"}; !reflect.DeepEqual(got, want) {
			e.t.Fatalf("rows = %v, want %v (p2's x1 must not appear)", got, want)
		}
		if !reflect.DeepEqual(res.Columns, []string{"id", "title"}) || res.MaxCommitSeq != seq {
			e.t.Fatalf("columns %v max %d, want [id title] %d", res.Columns, res.MaxCommitSeq, seq)
		}
		if res.Rows[0][1] != "title a1" {
			e.t.Fatalf("title = %#v", res.Rows[0][1])
		}
	}},
	{name: "ScopeFiltersAndBinds", fn: func(e *env) {
		e.seedQueryRows()
		project := storage.ScopeFilter{Column: e.items.ScopeVar("project").Column, Values: []string{"a"}}
		owner := func(v ...string) storage.ScopeFilter {
			return storage.ScopeFilter{Column: e.items.ScopeVar("owner").Column, Values: v}
		}
		cases := []struct {
			name    string
			filters []storage.ScopeFilter
			args    []any
			want    []string
		}{
			{"text scope", []storage.ScopeFilter{project}, []any{""}, []string{"a1", "a2"}},
			{"integer scope", []storage.ScopeFilter{owner("8")}, []any{""}, []string{"b1"}},
			{"non-canonical integer matches nothing", []storage.ScopeFilter{owner("08", "x")}, []any{""}, nil},
			{"both scopes and a bound value", []storage.ScopeFilter{project, owner("7", "8")}, []any{"a1"}, []string{"a2"}},
		}
		for _, c := range cases {
			res, err := e.runQuery("p1", storage.Query{MaxRows: 10, Args: c.args, Parts: []storage.QueryPart{
				txt("SELECT id FROM "), e.itemsRel("i", c.filters...), txt(" WHERE id > "), bindPart, txt(" ORDER BY id")}})
			if err != nil {
				e.t.Fatalf("%s: %v", c.name, err)
			}
			if got := idsOf(e, res); !reflect.DeepEqual(got, c.want) {
				e.t.Fatalf("%s: rows = %v, want %v", c.name, got, c.want)
			}
		}
	}},
	{name: "TooLargeReturnsNothing", fn: func(e *env) {
		e.seedQueryRows()
		for _, c := range []struct {
			max     int
			tooMany bool
		}{{2, true}, {3, false}} {
			res, err := e.runQuery("p1", storage.Query{MaxRows: c.max, Parts: []storage.QueryPart{txt("SELECT id FROM "), e.itemsRel("items")}})
			if c.tooMany != errors.Is(err, storage.ErrQueryTooLarge) || (c.tooMany && res.Rows != nil) {
				e.t.Fatalf("MaxRows %d: err %v rows %v", c.max, err, res.Rows)
			}
			if !c.tooMany && (err != nil || len(res.Rows) != 3) {
				e.t.Fatalf("MaxRows %d: err %v rows %v", c.max, err, res.Rows)
			}
		}
	}},
	{name: "GateCheckedInTheSnapshot", fn: func(e *env) {
		e.seedQueryRows()
		qr := e.b.Queries
		refused := errors.New("refused")
		var seen storage.ServeGate
		res, err := qr.Query(e.ctx, "p1", e.sch.Version, storage.Query{MaxRows: 1, Parts: []storage.QueryPart{txt("SELECT 1 AS one")}},
			func(g storage.ServeGate) error { seen = g; return refused })
		if !errors.Is(err, refused) || res.Rows != nil {
			e.t.Fatalf("refusing check: err %v rows %v", err, res.Rows)
		}
		if want := e.readPartition("p1").LogEpoch; seen.LogEpoch != want || seen.StoredSchemaVersion != e.sch.Version {
			e.t.Fatalf("gate seen %+v, want epoch %q version %d", seen, want, e.sch.Version)
		}
	}},
	{name: "FailuresAreQueryFailed", fn: func(e *env) {
		e.seedQueryRows()
		for _, sql := range []string{"SELECT nosuchcolumn FROM ", "DELETE FROM "} {
			_, err := e.runQuery("p1", storage.Query{MaxRows: 1, Parts: []storage.QueryPart{txt(sql), e.itemsRel("i")}})
			if !errors.Is(err, storage.ErrQueryFailed) {
				e.t.Fatalf("%q: err %v, want ErrQueryFailed", sql, err)
			}
		}
		if got := e.committedRow("p1", e.items, "a1"); got == nil {
			e.t.Fatal("a1 gone after a failed DELETE query")
		}
		// The store keeps serving queries after a failed one.
		res, err := e.runQuery("p1", storage.Query{MaxRows: 5, Parts: []storage.QueryPart{txt("SELECT id FROM "), e.itemsRel("i")}})
		if err != nil || len(res.Rows) != 3 {
			e.t.Fatalf("after failures: err %v rows %d", err, len(res.Rows))
		}
	}},
	{name: "UnknownPartitionIsEmpty", fn: func(e *env) {
		res, err := e.runQuery("never", storage.Query{MaxRows: 5, Parts: []storage.QueryPart{txt("SELECT id FROM "), e.itemsRel("i")}})
		if err != nil || len(res.Rows) != 0 || res.MaxCommitSeq != 0 {
			e.t.Fatalf("err %v rows %v max %d", err, res.Rows, res.MaxCommitSeq)
		}
		for _, max := range []int{0, storage.MaxQueryRows + 1} {
			_, err := e.runQuery("never", storage.Query{MaxRows: max, Parts: []storage.QueryPart{txt("SELECT 1 AS one")}})
			if err == nil || errors.Is(err, storage.ErrQueryFailed) {
				e.t.Fatalf("MaxRows %d: err %v, want a refusal before execution", max, err)
			}
		}
	}},
}
