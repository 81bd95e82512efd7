package storagetest

import (
	"errors"
	"slices"

	"github.com/synclane/synclane/storage"
)

// visitRowsTests check Rows.VisitRows: VisitRows yields exactly the
// rows of ScanRows for the same query, and a callback error stops it.
var visitRowsTests = []test{
	{name: "SameRowsAsScanRows", fn: func(e *env) {
		e.rowFixture()
		v := e.visitor()
		for _, c := range e.rowQueryCases() {
			want := e.scanRows(c.part, c.q)
			var got []storage.RowRecord
			err := v.VisitRows(e.ctx, c.part, c.q, func(rec storage.RowRecord) error {
				// Values may be reused after the call: keep a copy.
				rec.Values = slices.Clone(rec.Values)
				got = append(got, rec)
				return nil
			})
			if err != nil {
				e.t.Fatalf("%s: VisitRows: %v", c.name, err)
			}
			if ids(got) != ids(want) || len(got) != len(want) {
				e.t.Fatalf("%s: VisitRows rows = [%s], ScanRows = [%s]", c.name, ids(got), ids(want))
			}
			for i := range want {
				e.wantRow(c.name, &got[i], want[i])
			}
		}
	}},
	{name: "CallbackErrorStops", fn: func(e *env) {
		e.rowFixture()
		stop := errors.New("enough")
		calls := 0
		err := e.visitor().VisitRows(e.ctx, "p", storage.RowQuery{Table: e.items, Scopes: p1, Limit: 100}, func(storage.RowRecord) error {
			calls++
			if calls == 2 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) {
			e.t.Fatalf("VisitRows = %v, want the callback's error", err)
		}
		if calls != 2 {
			e.t.Fatalf("callback ran %d times after returning an error at 2", calls)
		}
	}},
}

// rowQueryCase is a row query of the row fixture (rowFixture).
type rowQueryCase struct {
	name string
	part string
	q    storage.RowQuery
}

// rowQueryCases are the queries VisitRows and EncodeRows are checked
// with: paging, limits, other partitions and tables, and queries that
// match nothing.
func (e *env) rowQueryCases() []rowQueryCase {
	return []rowQueryCase{
		{"all of p1", "p", storage.RowQuery{Table: e.items, Scopes: p1, Limit: 100}},
		{"after B, limit 3", "p", storage.RowQuery{Table: e.items, Scopes: p1, AfterRowID: ptr("B"), Limit: 3}},
		{"limit 1", "p", storage.RowQuery{Table: e.items, Scopes: p1, Limit: 1}},
		{"other partition", "other", storage.RowQuery{Table: e.items, Scopes: p1, Limit: 100}},
		{"undeclared var", "p", storage.RowQuery{Table: e.items, Scopes: map[string][]string{"nope": {"p1"}}, Limit: 100}},
		{"no values", "p", storage.RowQuery{Table: e.items, Scopes: map[string][]string{"project": {}}, Limit: 100}},
		{"after last", "p", storage.RowQuery{Table: e.items, Scopes: p1, AfterRowID: ptr("ü"), Limit: 10}},
		{"other table", "p", storage.RowQuery{Table: e.notes, Scopes: p1, Limit: 10}},
	}
}

// visitor returns the backend's Rows role (every backend has it).
func (e *env) visitor() storage.Rows { return e.b.Rows }
