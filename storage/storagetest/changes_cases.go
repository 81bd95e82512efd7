package storagetest

import (
	"strconv"

	"github.com/synclane/synclane/storage"
)

// manyValues returns 40,000 distinct scope values (decimal numbers from
// 100000 up, and words) with the matches spread among them.
func manyValues(matches ...string) []string {
	const n = 40_000
	vals := make([]string, 0, n)
	for i := range n - len(matches) {
		if i%2 == 0 {
			vals = append(vals, strconv.Itoa(100_000+i))
		} else {
			vals = append(vals, "v"+strconv.Itoa(i))
		}
		if j := i / (n / (len(matches) + 1)); i%(n/(len(matches)+1)) == 0 && j >= 1 && j <= len(matches) {
			vals = append(vals, matches[len(matches)-j]) // in reverse order
		}
	}
	return vals
}

// changeLog is the fixture ScanChanges cases query, on partition "p":
//
//	seq 1: items i1 {p1,1}, notes n1 {p1}
//	seq 2: items i2 {p2,1}
//	seq 3: items i3 {p1,2}, items i4 {p3,1}
//	seq 4: notes n2 {p1}
//	seq 5: items i5 {p1,1}, i6 {p2,2}, i7 {p1,2}
//	seq 6: (no changes)
//	seq 7: delete items i1 {p1,1}
//
// and partition "other" holds seq 1: items i1 {p1,1}.
type changeLog struct {
	i1, n1, i2, i3, i4, n2, i5, i6, i7, d1 storage.ChangeRecord
}

func (e *env) changeFixture() changeLog {
	s2 := func(p, o string) map[string]string { return sc("project", p, "owner", o) }
	l := changeLog{
		i1: upsert("items", "i1", 1, s2("p1", "1")), n1: upsert("notes", "n1", 1, sc("project", "p1")),
		i2: upsert("items", "i2", 1, s2("p2", "1")),
		i3: upsert("items", "i3", 2, s2("p1", "2")), i4: upsert("items", "i4", 1, s2("p3", "1")),
		n2: upsert("notes", "n2", 1, sc("project", "p1")),
		i5: upsert("items", "i5", 1, s2("p1", "1")), i6: upsert("items", "i6", 1, s2("p2", "2")), i7: upsert("items", "i7", 1, s2("p1", "2")),
		d1: del("items", "i1", s2("p1", "1")),
	}
	e.commitChanges("other", upsert("items", "i1", 1, s2("p1", "1")))
	e.commitChanges("p", l.i1, l.n1)
	e.commitChanges("p", l.i2)
	// two commits in one transaction
	e.push("p", func(tx storage.PushTx) {
		e.appendNext(tx, l.i3, l.i4)
		e.appendNext(tx, l.n2)
	})
	e.commitChanges("p", l.i5, l.i6, l.i7)
	e.commitChanges("p")
	e.commitChanges("p", l.d1)
	return l
}

func q(table string, after, upTo int64, limit int, scopes map[string][]string) storage.ChangeQuery {
	return storage.ChangeQuery{Table: table, Scopes: scopes, AfterSeq: after, UpToSeq: upTo, LimitChanges: limit}
}

var (
	p1   = map[string][]string{"project": {"p1"}}
	p12  = map[string][]string{"project": {"p1", "p2"}}
	f, t = ptr(false), ptr(true)
)

var scanChangesTests = []test{
	{name: "Filters", fn: func(e *env) {
		l := e.changeFixture()
		cases := []struct {
			name  string
			q     storage.ChangeQuery
			trunc *bool
			want  []storage.CommitChanges
		}{
			{"table and one scope", q("items", 0, 7, 100, p1), f,
				[]storage.CommitChanges{cc(1, l.i1), cc(3, l.i3), cc(5, l.i5, l.i7), cc(7, l.d1)}},
			{"other table", q("notes", 0, 7, 100, p1), f,
				[]storage.CommitChanges{cc(1, l.n1), cc(4, l.n2)}},
			{"cross product", q("items", 0, 7, 100, map[string][]string{"project": {"p1", "p2"}, "owner": {"1"}}), f,
				[]storage.CommitChanges{cc(1, l.i1), cc(2, l.i2), cc(5, l.i5), cc(7, l.d1)}},
			{"integer var alone", q("items", 0, 7, 100, map[string][]string{"owner": {"2"}}), f,
				[]storage.CommitChanges{cc(3, l.i3), cc(5, l.i6, l.i7)}},
			{"two values two vars", q("items", 0, 7, 100, map[string][]string{"project": {"p3", "p2"}, "owner": {"2", "1"}}), f,
				[]storage.CommitChanges{cc(2, l.i2), cc(3, l.i4), cc(5, l.i6)}},
			{"after bound exclusive", q("items", 1, 7, 100, p1), f,
				[]storage.CommitChanges{cc(3, l.i3), cc(5, l.i5, l.i7), cc(7, l.d1)}},
			{"upTo bound inclusive", q("items", 0, 5, 100, p1), f,
				[]storage.CommitChanges{cc(1, l.i1), cc(3, l.i3), cc(5, l.i5, l.i7)}},
			{"narrow window", q("items", 2, 4, 100, p1), f, []storage.CommitChanges{cc(3, l.i3)}},
			{"empty window", q("items", 7, 7, 100, p1), f, nil},
			{"beyond max", q("items", 7, 100, 100, p1), f, nil},
			{"unknown value", q("items", 0, 7, 100, map[string][]string{"project": {"zzz"}}), f, nil},
			{"value matching another var only", q("items", 0, 7, 100, map[string][]string{"owner": {"p1"}}), f, nil},
			{"non-canonical integer", q("items", 0, 7, 100, map[string][]string{"owner": {"01"}}), f, nil},
		}
		for _, c := range cases {
			e.wantScan(c.name, e.scanChanges("p", c.q), c.trunc, c.want...)
		}
		e.wantScan("other partition", e.scanChanges("other", q("items", 0, 7, 100, p1)), f,
			cc(1, upsert("items", "i1", 1, sc("project", "p1", "owner", "1"))))
	}},
	{name: "ManyScopeValues", fn: func(e *env) {
		l := e.changeFixture()
		// 40,000 values per var (more than SQLite's default bound-parameter
		// limit of 32,766), one of them matching.
		cases := []struct {
			name string
			q    storage.ChangeQuery
			want []storage.CommitChanges
		}{
			{"string var", q("items", 0, 7, 100, map[string][]string{"project": manyValues("p1")}),
				[]storage.CommitChanges{cc(1, l.i1), cc(3, l.i3), cc(5, l.i5, l.i7), cc(7, l.d1)}},
			{"integer var", q("items", 0, 7, 100, map[string][]string{"owner": manyValues("2")}),
				[]storage.CommitChanges{cc(3, l.i3), cc(5, l.i6, l.i7)}},
			{"two vars", q("items", 0, 7, 100, map[string][]string{"project": manyValues("p1"), "owner": manyValues("1")}),
				[]storage.CommitChanges{cc(1, l.i1), cc(5, l.i5), cc(7, l.d1)}},
			{"limit", q("items", 0, 7, 2, map[string][]string{"project": manyValues("p1")}),
				[]storage.CommitChanges{cc(1, l.i1), cc(3, l.i3)}},
			{"two matching values", q("items", 0, 7, 100, map[string][]string{"project": manyValues("p1", "p2")}),
				[]storage.CommitChanges{cc(1, l.i1), cc(2, l.i2), cc(3, l.i3), cc(5, l.i5, l.i6, l.i7), cc(7, l.d1)}},
			{"two matching values, limit", q("items", 0, 7, 2, map[string][]string{"project": manyValues("p1", "p2")}),
				[]storage.CommitChanges{cc(1, l.i1), cc(2, l.i2)}},
			{"none matching", q("items", 0, 7, 100, map[string][]string{"project": manyValues("zzz")}), nil},
		}
		for _, c := range cases {
			got, err := e.b.Log.ScanChanges(e.ctx, "p", c.q)
			if err != nil {
				e.t.Fatalf("%s: ScanChanges: %v", c.name, err)
			}
			e.wantScan(c.name, got, nil, c.want...)
		}
	}},
	{name: "Limit", fn: func(e *env) {
		l := e.changeFixture()
		// items with project p1 or p2: seq1 [i1], seq2 [i2], seq3 [i3], seq5 [i5 i6 i7], seq7 [d1]
		cases := []struct {
			name  string
			q     storage.ChangeQuery
			trunc *bool
			want  []storage.CommitChanges
		}{
			{"stops at limit", q("items", 0, 7, 2, p12), t, []storage.CommitChanges{cc(1, l.i1), cc(2, l.i2)}},
			{"never splits a commit", q("items", 2, 7, 3, p12), t, []storage.CommitChanges{cc(3, l.i3), cc(5, l.i5, l.i6, l.i7)}},
			{"big commit alone", q("items", 3, 7, 1, p12), t, []storage.CommitChanges{cc(5, l.i5, l.i6, l.i7)}},
			{"big commit at upTo", q("items", 3, 5, 1, p12), f, []storage.CommitChanges{cc(5, l.i5, l.i6, l.i7)}},
			{"limit reached exactly at upTo", q("items", 2, 5, 4, p12), f, []storage.CommitChanges{cc(3, l.i3), cc(5, l.i5, l.i6, l.i7)}},
			{"limit not reached", q("items", 0, 7, 7, p12), f,
				[]storage.CommitChanges{cc(1, l.i1), cc(2, l.i2), cc(3, l.i3), cc(5, l.i5, l.i6, l.i7), cc(7, l.d1)}},
			{"limit one", q("items", 0, 7, 1, p12), t, []storage.CommitChanges{cc(1, l.i1)}},
			{"limit counts only selected changes", q("notes", 0, 7, 1, p1), t, []storage.CommitChanges{cc(1, l.n1)}},
		}
		for _, c := range cases {
			e.wantScan(c.name, e.scanChanges("p", c.q), c.trunc, c.want...)
		}
	}},
}

// latestScopeCommitTests check Log.LatestScopeCommit (the SQLite-lane
// scope pin of SPEC §4.7) on changeFixture: the newest commit up to a
// bound whose change of the table carries one of the values of the
// variable, deletes included, from the scope index; 0 when none.
var latestScopeCommitTests = []test{
	{name: "LatestScopeCommit", fn: func(e *env) {
		e.changeFixture()
		cases := []struct {
			name      string
			partition string
			table, v  string
			vals      []string
			upTo      int64
			want      int64
		}{
			{"the delete at 7 carries p1", "p", "items", "project", []string{"p1"}, 7, 7},
			{"bounded by upTo", "p", "items", "project", []string{"p1"}, 6, 5},
			{"another value", "p", "items", "project", []string{"p2"}, 7, 5},
			{"the newest of several values", "p", "items", "project", []string{"p9", "p3"}, 7, 3},
			{"another variable", "p", "items", "owner", []string{"2"}, 7, 5},
			{"another table", "p", "notes", "project", []string{"p1"}, 7, 4},
			{"a value no change carries", "p", "notes", "project", []string{"p2"}, 7, 0},
			{"nothing at or below upTo", "p", "items", "project", []string{"p1"}, 0, 0},
			{"an unstorable value matches nothing", "p", "items", "project", []string{"p\x00"}, 7, 0},
			{"no values", "p", "items", "project", nil, 7, 0},
			{"an unknown table", "p", "nope", "project", []string{"p1"}, 7, 0},
			{"another partition", "other", "items", "project", []string{"p1"}, 7, 1},
			{"a partition never created", "never", "items", "project", []string{"p1"}, 7, 0},
		}
		for _, c := range cases {
			got, err := e.b.Log.LatestScopeCommit(e.ctx, c.partition, storage.ScopeCommitQuery{Table: c.table, Var: c.v, Values: c.vals, UpToSeq: c.upTo})
			if err != nil || got != c.want {
				e.t.Errorf("%s: LatestScopeCommit = %d, %v; want %d", c.name, got, err, c.want)
			}
		}
	}},
	{name: "LatestScopeCommitAfterPruning", roles: []string{"Retention"}, fn: func(e *env) {
		e.changeFixture()
		e.prune("p", 5, 100)
		for _, c := range []struct {
			vals []string
			want int64
		}{{[]string{"p1"}, 7}, {[]string{"p2"}, 0}, {[]string{"p3"}, 0}} {
			got, err := e.b.Log.LatestScopeCommit(e.ctx, "p", storage.ScopeCommitQuery{Table: "items", Var: "project", Values: c.vals, UpToSeq: 7})
			if err != nil || got != c.want {
				e.t.Errorf("%v after pruning through 5: LatestScopeCommit = %d, %v; want %d", c.vals, got, err, c.want)
			}
		}
	}},
}
