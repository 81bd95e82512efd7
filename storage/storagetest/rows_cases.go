package storagetest

import (
	"strings"

	"github.com/synclane/synclane/storage"
)

// rowIDs are inserted in this order; byte order is 10 9 B Z a b é ü.
var rowIDs = []string{"a", "B", "é", "10", "9", "Z", "b", "ü"}

var rowsByteOrder = []string{"10", "9", "B", "Z", "a", "b", "é", "ü"}

func (e *env) rowFixture() {
	e.push("p", func(tx storage.PushTx) {
		for i, id := range rowIDs {
			e.put(tx, e.items, int64(i+1), item(id, "p1", int64(i%2)))
		}
		e.put(tx, e.items, 1, item("x-p2", "p2", 1))
		e.put(tx, e.notes, 1, note("note", "p1", "n"))
	})
	e.push("other", func(tx storage.PushTx) { e.put(tx, e.items, 1, item("o", "p1", 1)) })
}

func ids(rs []storage.RowRecord) string {
	var s []string
	for _, r := range rs {
		s = append(s, r.RowID)
	}
	return strings.Join(s, ",")
}

var scanRowsTests = []test{
	{name: "OrderAndPaging", fn: func(e *env) {
		e.rowFixture()
		all := e.scanRows("p", storage.RowQuery{Table: e.items, Scopes: p1, Limit: 100})
		if got, want := ids(all), strings.Join(rowsByteOrder, ","); got != want {
			e.t.Fatalf("ScanRows order = %s, want %s", got, want)
		}
		for i, r := range all {
			j := 0
			for rowIDs[j] != r.RowID {
				j++
			}
			e.wantRow("ScanRows value", &all[i], storage.RowRecord{RowID: r.RowID, Version: int64(j + 1), Values: item(r.RowID, "p1", int64(j%2))})
		}
		var paged []string
		var after *string
		for pages := 0; ; pages++ {
			if pages > len(rowsByteOrder) {
				e.t.Fatal("paging does not terminate")
			}
			page := e.scanRows("p", storage.RowQuery{Table: e.items, Scopes: p1, AfterRowID: after, Limit: 3})
			if len(page) > 3 {
				e.t.Fatalf("page of %d rows over limit 3", len(page))
			}
			if len(page) == 0 {
				break
			}
			for _, r := range page {
				paged = append(paged, r.RowID)
			}
			after = ptr(page[len(page)-1].RowID)
		}
		if got, want := strings.Join(paged, ","), strings.Join(rowsByteOrder, ","); got != want {
			e.t.Fatalf("paged order = %s, want %s", got, want)
		}
		cases := []struct {
			name  string
			after *string
			limit int
			want  string
		}{
			{"after B", ptr("B"), 3, "Z,a,b"},
			{"after absent key", ptr("A"), 2, "B,Z"},
			{"after empty string", ptr(""), 1, "10"},
			{"after last", ptr("ü"), 10, ""},
			{"limit 1", nil, 1, "10"},
		}
		for _, c := range cases {
			got := e.scanRows("p", storage.RowQuery{Table: e.items, Scopes: p1, AfterRowID: c.after, Limit: c.limit})
			if ids(got) != c.want {
				e.t.Fatalf("%s: got %s, want %s", c.name, ids(got), c.want)
			}
		}
	}},
	{name: "Scopes", fn: func(e *env) {
		e.rowFixture()
		cases := []struct {
			name   string
			table  string
			scopes map[string][]string
			want   string
		}{
			{"other project", "items", map[string][]string{"project": {"p2"}}, "x-p2"},
			{"two projects", "items", p12, "10,9,B,Z,a,b,x-p2,é,ü"},
			{"integer scope", "items", map[string][]string{"owner": {"1"}}, "10,B,Z,x-p2,ü"},
			{"cross product", "items", map[string][]string{"project": {"p1"}, "owner": {"0", "7"}}, "9,a,b,é"},
			{"non-numeric integer value", "items", map[string][]string{"owner": {"abc"}}, ""},
			{"non-canonical integer value", "items", map[string][]string{"owner": {"01", "+1", " 1"}}, ""},
			{"no match", "items", map[string][]string{"project": {"nope"}}, ""},
			{"notes table", "notes", p1, "note"},
		}
		for _, c := range cases {
			got := e.scanRows("p", storage.RowQuery{Table: e.sch.Table(c.table), Scopes: c.scopes, Limit: 100})
			if ids(got) != c.want {
				e.t.Fatalf("%s: got %s, want %s", c.name, ids(got), c.want)
			}
		}
		if got := e.scanRows("other", storage.RowQuery{Table: e.items, Scopes: p1, Limit: 100}); ids(got) != "o" {
			e.t.Fatalf("other partition: got %s", ids(got))
		}
		if got := e.scanRows("never", storage.RowQuery{Table: e.items, Scopes: p1, Limit: 100}); len(got) != 0 {
			e.t.Fatalf("untouched partition: got %s", ids(got))
		}
	}},
	{name: "ManyScopeValues", fn: func(e *env) {
		e.rowFixture()
		cases := []struct {
			name   string
			scopes map[string][]string
			limit  int
			want   string
		}{
			{"string var", map[string][]string{"project": manyValues("p2")}, 100, "x-p2"},
			{"integer var", map[string][]string{"owner": manyValues("1")}, 100, "10,B,Z,x-p2,ü"},
			{"two vars", map[string][]string{"project": manyValues("p1"), "owner": manyValues("1")}, 100, "10,B,Z,ü"},
			{"limit", map[string][]string{"project": manyValues("p1")}, 2, "10,9"},
			{"none matching", map[string][]string{"project": manyValues("zzz")}, 100, ""},
		}
		for _, c := range cases {
			got, err := e.b.Rows.ScanRows(e.ctx, "p", storage.RowQuery{Table: e.items, Scopes: c.scopes, Limit: c.limit})
			if err != nil {
				e.t.Fatalf("%s: ScanRows: %v", c.name, err)
			}
			if ids(got) != c.want {
				e.t.Fatalf("%s: got %s, want %s", c.name, ids(got), c.want)
			}
		}
	}},
	{name: "SeesOnlyCommitted", fn: func(e *env) {
		e.rowFixture()
		tx := e.begin("p")
		defer func() { _ = tx.Rollback(e.ctx) }()
		e.put(tx, e.items, 1, item("0-uncommitted", "p1", 1))
		e.appendNext(tx, upsert("items", "0-uncommitted", 1, sc("project", "p1", "owner", "1")))
		if got := e.scanRows("p", storage.RowQuery{Table: e.items, Scopes: p1, Limit: 1}); ids(got) != "10" {
			e.t.Fatalf("ScanRows saw an uncommitted row: %s", ids(got))
		}
		if got := e.scanChanges("p", q("items", 0, 10, 10, p1)); len(got.Commits) != 0 {
			e.t.Fatalf("ScanChanges saw an uncommitted commit: %s", fmtCommits(got.Commits))
		}
		if p := e.readPartition("p"); p.MaxCommitSeq != 0 {
			e.t.Fatalf("ReadPartition saw an uncommitted seq: %+v", p)
		}
	}},
}
