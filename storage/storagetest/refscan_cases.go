package storagetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// PushTx.ScanByColumn (SPEC §6.11: how the partition finds a deleted
// parent's children): the rows of the transaction's partition whose
// column holds the value, as the transaction sees them (staged inserts,
// updates and deletes; a rolled back savepoint's writes gone), in
// primary-key byte order, paged by AfterRowID and Limit, each with its
// column versions. Its query refusals (ColumnQuery.Check) fail before
// anything is read and leave the transaction usable; a text value that
// is not Storable matches nothing. The reference indexes EnsureSchema
// creates are the backends' own to check (their plan tests); here a
// schema bump that adds a reference to a table holding rows must leave
// those rows found by the column.

// RefSchemaV1 declares references: todos.list_id to lists (CASCADE) and
// the nullable self-reference todos.parent_id (SET NULL). notes.list_id
// is a plain column until RefSchemaV2. todos also has an integer, a
// boolean and a json column, scanned by value like the references.
const RefSchemaV1 = `{"version": 1, "tables": [
  {"name": "lists", "columns": [{"name": "id", "type": "string"}, {"name": "project", "type": "string"},
     {"name": "title", "type": "string", "nullable": true}],
   "primaryKey": "id", "scopes": ["project:{project}"]},
  {"name": "todos", "columns": [{"name": "id", "type": "string"}, {"name": "project", "type": "string"},
     {"name": "list_id", "type": "string"}, {"name": "parent_id", "type": "string", "nullable": true},
     {"name": "rank", "type": "integer", "nullable": true}, {"name": "done", "type": "boolean", "nullable": true},
     {"name": "meta", "type": "json", "nullable": true}],
   "primaryKey": "id", "scopes": ["project:{project}"],
   "references": [{"column": "list_id", "parentTable": "lists", "onDelete": "CASCADE"},
     {"column": "parent_id", "parentTable": "todos", "onDelete": "SET NULL"}]},
  {"name": "notes", "columns": [{"name": "id", "type": "string"}, {"name": "project", "type": "string"},
     {"name": "list_id", "type": "string", "nullable": true}],
   "primaryKey": "id", "scopes": ["project:{project}"]}
]}`

// RefSchemaV2 bumps RefSchemaV1: the existing column notes.list_id gains
// a reference to lists, and todos gains the nullable column blocked_by
// referencing todos.
const RefSchemaV2 = `{"version": 2, "tables": [
  {"name": "lists", "columns": [{"name": "id", "type": "string"}, {"name": "project", "type": "string"},
     {"name": "title", "type": "string", "nullable": true}],
   "primaryKey": "id", "scopes": ["project:{project}"]},
  {"name": "todos", "columns": [{"name": "id", "type": "string"}, {"name": "project", "type": "string"},
     {"name": "list_id", "type": "string"}, {"name": "parent_id", "type": "string", "nullable": true},
     {"name": "rank", "type": "integer", "nullable": true}, {"name": "done", "type": "boolean", "nullable": true},
     {"name": "meta", "type": "json", "nullable": true}, {"name": "blocked_by", "type": "string", "nullable": true}],
   "primaryKey": "id", "scopes": ["project:{project}"],
   "references": [{"column": "list_id", "parentTable": "lists", "onDelete": "CASCADE"},
     {"column": "parent_id", "parentTable": "todos", "onDelete": "SET NULL"},
     {"column": "blocked_by", "parentTable": "todos", "onDelete": "SET NULL"}]},
  {"name": "notes", "columns": [{"name": "id", "type": "string"}, {"name": "project", "type": "string"},
     {"name": "list_id", "type": "string", "nullable": true}],
   "primaryKey": "id", "scopes": ["project:{project}"],
   "references": [{"column": "list_id", "parentTable": "lists"}]}
]}`

// refEnv is a case's view of RefSchemaV1 (or V2) tables.
type refEnv struct {
	*env
	lists, todos, notes *schema.Table
}

func (e *env) refEnsure(src string) *refEnv {
	e.t.Helper()
	e.ensure(MustParse(src))
	return &refEnv{env: e, lists: e.sch.Table("lists"), todos: e.sch.Table("todos"), notes: e.sch.Table("notes")}
}

// todo is a todos row of RefSchemaV1 (parent nil for NULL; rank, done and
// meta NULL).
func todo(id, list string, parent any) ssp2.Row {
	return ssp2.Row{id, "p1", list, parent, nil, nil, nil}
}

// col returns the index of t's column name.
func (e *refEnv) col(t *schema.Table, name string) int {
	e.t.Helper()
	for i, c := range t.Columns {
		if c.Name == name {
			return i
		}
	}
	e.t.Fatalf("table %s has no column %s", t.Name, name)
	return -1
}

// scanBy runs ScanByColumn and fails the test on an error.
func (e *refEnv) scanBy(tx storage.PushTx, t *schema.Table, col string, value any, after *string, limit int) []storage.RowRecord {
	e.t.Helper()
	rs, err := tx.ScanByColumn(e.ctx, storage.ColumnQuery{Table: t, Column: e.col(t, col), Value: value, AfterRowID: after, Limit: limit})
	if err != nil {
		e.t.Fatalf("ScanByColumn(%s.%s = %v, after %v, limit %d): %v", t.Name, col, value, after, limit, err)
	}
	return rs
}

// wantIDs compares the row ids of rs with want (comma-separated).
func (e *refEnv) wantIDs(what string, rs []storage.RowRecord, want string) {
	e.t.Helper()
	if got := ids(rs); got != want {
		e.t.Fatalf("%s = [%s], want [%s]", what, got, want)
	}
}

// refRow is one committed todos row of refFixture.
type refRow struct {
	row ssp2.Row
	ver int64
	cv  storage.ColumnVersions
}

// refFixture commits, in partition "p", lists L1 and L2 and todos under
// them (ids chosen so byte order differs from other orders: "10" < "9" <
// "B" < "a" < "é"), with every form of column versions; in partition "q"
// todos of a list also named L1. It returns p's todos by id.
func (e *refEnv) refFixture() map[string]refRow {
	e.t.Helper()
	rows := []refRow{
		{todo("é", "L1", nil), 1, storage.InsertedColumnVersions()},
		{todo("a", "L1", nil), 2, nil},
		{todo("9", "L1", "a"), 3, storage.EncodeColumnVersions([]int64{1, 1, 3, 3, 1, 1, 1}, 3)},
		{todo("B", "L1", "a"), 1, storage.ColumnVersions{}},
		{todo("10", "L1", "é"), 4, storage.InsertedColumnVersions()},
		{todo("c", "L2", "a"), 1, storage.InsertedColumnVersions()},
		{todo("d", "L2", nil), 1, storage.InsertedColumnVersions()},
	}
	byID := map[string]refRow{}
	e.push("p", func(tx storage.PushTx) {
		for _, l := range []string{"L1", "L2"} {
			e.put(tx, e.lists, 1, ssp2.Row{l, "p1", "list " + l})
		}
		for _, r := range rows {
			e.putCV(tx, e.todos, r.ver, r.row, r.cv)
			byID[r.row[0].(string)] = r
		}
	})
	e.push("q", func(tx storage.PushTx) {
		e.put(tx, e.lists, 1, ssp2.Row{"L1", "p1", nil})
		e.put(tx, e.todos, 1, todo("x", "L1", nil))
		e.put(tx, e.todos, 1, todo("a", "L1", nil))
	})
	return byID
}

// wantFixtureRows checks each row of rs is the fixture's row of its id,
// values, version and column versions.
func (e *refEnv) wantFixtureRows(what string, rs []storage.RowRecord, fixture map[string]refRow) {
	e.t.Helper()
	for i := range rs {
		w, ok := fixture[rs[i].RowID]
		if !ok {
			e.t.Fatalf("%s: row %q is not in the fixture", what, rs[i].RowID)
		}
		e.wantRowCV(what, &rs[i], storage.RowRecord{RowID: rs[i].RowID, Version: w.ver, Values: w.row, ColumnVersions: w.cv})
	}
}

var refScanTests = []test{
	{name: "ByValueInPartitionInKeyOrder", raw: true, fn: func(base *env) {
		e := base.refEnsure(RefSchemaV1)
		fixture := e.refFixture()
		tx := e.begin("p")
		defer tx.Rollback(e.ctx) //nolint:errcheck
		l1 := e.scanBy(tx, e.todos, "list_id", "L1", nil, 100)
		e.wantIDs("p: todos of L1", l1, "10,9,B,a,é")
		e.wantFixtureRows("p: todos of L1", l1, fixture)
		e.wantIDs("p: todos of L2", e.scanBy(tx, e.todos, "list_id", "L2", nil, 100), "c,d")
		e.wantIDs("p: todos of a list without any", e.scanBy(tx, e.todos, "list_id", "L3", nil, 100), "")
		// The nullable self-reference: NULL matches no value.
		children := e.scanBy(tx, e.todos, "parent_id", "a", nil, 100)
		e.wantIDs("p: children of todo a", children, "9,B,c")
		e.wantFixtureRows("p: children of todo a", children, fixture)
		e.wantIDs("p: children of todo é", e.scanBy(tx, e.todos, "parent_id", "é", nil, 100), "10")
		e.wantIDs("p: children of todo B", e.scanBy(tx, e.todos, "parent_id", "B", nil, 100), "")
		// A value that differs only in case is another value.
		e.wantIDs("p: todos of l1", e.scanBy(tx, e.todos, "list_id", "l1", nil, 100), "")
		e.must(tx.Rollback(e.ctx))
		// The other partition's rows of the same value are its own.
		txq := e.begin("q")
		defer txq.Rollback(e.ctx) //nolint:errcheck
		e.wantIDs("q: todos of L1", e.scanBy(txq, e.todos, "list_id", "L1", nil, 100), "a,x")
		e.wantIDs("q: children of todo a", e.scanBy(txq, e.todos, "parent_id", "a", nil, 100), "")
	}},
	{name: "SeesStagedWrites", raw: true, fn: func(base *env) {
		e := base.refEnsure(RefSchemaV1)
		fixture := e.refFixture()
		tx := e.begin("p")
		defer tx.Rollback(e.ctx) //nolint:errcheck
		seq := tx.Partition().MaxCommitSeq + 1
		staged := storage.EncodeColumnVersions([]int64{1, 1, 1, 2, 1, 1, 1}, 2)
		e.putCV(tx, e.todos, 2, todo("b2", "L1", "a"), staged)         // insert
		e.putCV(tx, e.todos, 5, todo("9", "L2", "a"), fixture["9"].cv) // moves to L2
		e.putCV(tx, e.todos, 2, todo("c", "L1", nil), staged)          // moves to L1, leaves a
		e.must(tx.DeleteRow(e.ctx, e.todos, "B", seq))                 // delete
		l1 := e.scanBy(tx, e.todos, "list_id", "L1", nil, 100)
		e.wantIDs("staged: todos of L1", l1, "10,a,b2,c,é")
		e.wantRowCV("staged insert", &l1[2], storage.RowRecord{RowID: "b2", Version: 2, Values: todo("b2", "L1", "a"), ColumnVersions: staged})
		e.wantRowCV("staged update", &l1[3], storage.RowRecord{RowID: "c", Version: 2, Values: todo("c", "L1", nil), ColumnVersions: staged})
		e.wantIDs("staged: todos of L2", e.scanBy(tx, e.todos, "list_id", "L2", nil, 100), "9,d")
		e.wantIDs("staged: children of todo a", e.scanBy(tx, e.todos, "parent_id", "a", nil, 100), "9,b2")
		// Rolled back, none of it happened.
		e.must(tx.Rollback(e.ctx))
		tx2 := e.begin("p")
		defer tx2.Rollback(e.ctx) //nolint:errcheck
		l1 = e.scanBy(tx2, e.todos, "list_id", "L1", nil, 100)
		e.wantIDs("after rollback: todos of L1", l1, "10,9,B,a,é")
		e.wantFixtureRows("after rollback: todos of L1", l1, fixture)
	}},
	{name: "SavepointRollback", raw: true, fn: func(base *env) {
		e := base.refEnsure(RefSchemaV1)
		fixture := e.refFixture()
		tx := e.begin("p")
		defer tx.Rollback(e.ctx)                       //nolint:errcheck
		e.put(tx, e.todos, 1, todo("kept", "L2", nil)) // before the savepoint
		e.must(tx.Savepoint(e.ctx))
		seq := tx.Partition().MaxCommitSeq + 1
		e.put(tx, e.todos, 1, todo("b2", "L1", nil))
		e.put(tx, e.todos, 6, todo("d", "L1", nil))
		e.must(tx.DeleteRow(e.ctx, e.todos, "a", seq))
		e.wantIDs("before the rollback: todos of L1", e.scanBy(tx, e.todos, "list_id", "L1", nil, 100), "10,9,B,b2,d,é")
		e.must(tx.RollbackToSavepoint(e.ctx))
		l1 := e.scanBy(tx, e.todos, "list_id", "L1", nil, 100)
		e.wantIDs("after the rollback: todos of L1", l1, "10,9,B,a,é")
		e.wantFixtureRows("after the rollback: todos of L1", l1, fixture)
		e.wantIDs("after the rollback: todos of L2", e.scanBy(tx, e.todos, "list_id", "L2", nil, 100), "c,d,kept")
		e.must(tx.ReleaseSavepoint(e.ctx))
		e.appendNext(tx)
		e.must(tx.Commit(e.ctx))
		tx2 := e.begin("p")
		defer tx2.Rollback(e.ctx) //nolint:errcheck
		e.wantIDs("committed: todos of L2", e.scanBy(tx2, e.todos, "list_id", "L2", nil, 100), "c,d,kept")
		e.wantIDs("committed: todos of L1", e.scanBy(tx2, e.todos, "list_id", "L1", nil, 100), "10,9,B,a,é")
	}},
	{name: "Paging", raw: true, fn: func(base *env) {
		e := base.refEnsure(RefSchemaV1)
		// 60 todos, even ones of L1 and odd ones of L2; t00, t01, t04,
		// t05, ... committed, the others inserted by the transaction that
		// pages, which also moves t03 to L1 and t08 to L2.
		id := func(i int) string { return fmt.Sprintf("t%02d", i) }
		list := func(i int) string { return []string{"L1", "L2"}[i%2] }
		e.push("p", func(tx storage.PushTx) {
			for i := range 60 {
				if i%4 < 2 {
					e.put(tx, e.todos, 1, todo(id(i), list(i), nil))
				}
			}
		})
		tx := e.begin("p")
		defer tx.Rollback(e.ctx) //nolint:errcheck
		var want []string
		for i := range 60 {
			if i%4 >= 2 {
				e.put(tx, e.todos, 1, todo(id(i), list(i), nil))
			}
			if (list(i) == "L1" && i != 8) || i == 3 {
				want = append(want, id(i))
			}
		}
		e.put(tx, e.todos, 2, todo("t03", "L1", nil))
		e.put(tx, e.todos, 2, todo("t08", "L2", nil))
		for _, limit := range []int{1, 7, 31, storage.MaxColumnQueryLimit} {
			var got []string
			var after *string
			pages := 0
			for {
				page := e.scanBy(tx, e.todos, "list_id", "L1", after, limit)
				if len(page) > limit {
					e.t.Fatalf("limit %d: page of %d rows", limit, len(page))
				}
				if len(page) == 0 {
					break
				}
				if pages++; pages > len(want) {
					e.t.Fatalf("limit %d: still paging after %d pages (AfterRowID %q ignored?)", limit, pages, *after)
				}
				for _, r := range page {
					got = append(got, r.RowID)
				}
				after = &page[len(page)-1].RowID
				if len(page) < limit {
					break
				}
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				e.t.Fatalf("limit %d: pages gave [%s], want [%s]", limit, strings.Join(got, ","), strings.Join(want, ","))
			}
			if wantPages := (len(want) + limit - 1) / limit; pages != wantPages {
				e.t.Fatalf("limit %d: %d pages, want %d", limit, pages, wantPages)
			}
		}
		// AfterRowID need not be a row of the value, nor a row at all.
		e.wantIDs("after t27 (an L2 row)", e.scanBy(tx, e.todos, "list_id", "L1", ptr("t27"), 2), "t28,t30")
		e.wantIDs("after t06x (no row)", e.scanBy(tx, e.todos, "list_id", "L1", ptr("t06x"), 2), "t10,t12")
		e.wantIDs("after the last", e.scanBy(tx, e.todos, "list_id", "L1", ptr("t58"), 5), "")
		e.wantIDs("after the empty id", e.scanBy(tx, e.todos, "list_id", "L1", ptr(""), 3), "t00,t02,t03")
	}},
	{name: "ValueTypes", raw: true, fn: func(base *env) {
		e := base.refEnsure(RefSchemaV1)
		full := func(id string, rank, done, meta any) ssp2.Row {
			return ssp2.Row{id, "p1", "L1", nil, rank, done, meta}
		}
		e.push("p", func(tx storage.PushTx) {
			e.put(tx, e.todos, 1, full("r1", int64(1), true, json.RawMessage(`{"k":1}`)))
			e.put(tx, e.todos, 1, full("r2", int64(-1), false, json.RawMessage(`{"k": 1}`)))
			e.put(tx, e.todos, 1, full("r3", int64(math.MaxInt64), nil, json.RawMessage(`"é"`)))
			e.put(tx, e.todos, 1, full("r4", int64(1), false, nil))
			e.put(tx, e.todos, 1, full("r5", nil, true, json.RawMessage(`{"k":1}`)))
		})
		tx := e.begin("p")
		defer tx.Rollback(e.ctx) //nolint:errcheck
		e.put(tx, e.todos, 1, full("r6", int64(math.MinInt64), nil, json.RawMessage(`null`)))
		for _, c := range []struct {
			col   string
			value any
			want  string
		}{
			{"rank", int64(1), "r1,r4"},
			{"rank", int64(-1), "r2"},
			{"rank", int64(0), ""},
			{"rank", int64(math.MaxInt64), "r3"},
			{"rank", int64(math.MinInt64), "r6"},
			{"done", true, "r1,r5"},
			{"done", false, "r2,r4"},
			{"meta", json.RawMessage(`{"k":1}`), "r1,r5"},
			{"meta", json.RawMessage(`{"k": 1}`), "r2"},
			{"meta", json.RawMessage(`"é"`), "r3"},
			{"meta", json.RawMessage(`null`), "r6"},
			{"list_id", "L1", "r1,r2,r3,r4,r5,r6"},
		} {
			e.wantIDs(fmt.Sprintf("todos.%s = %T(%v)", c.col, c.value, c.value), e.scanBy(tx, e.todos, c.col, c.value, nil, 10), c.want)
		}
	}},
	{name: "RefusalsKeepTheTransaction", raw: true, fn: func(base *env) {
		e := base.refEnsure(RefSchemaV1)
		e.refFixture()
		tx := e.begin("p")
		defer tx.Rollback(e.ctx) //nolint:errcheck
		list := e.col(e.todos, "list_id")
		for name, q := range map[string]storage.ColumnQuery{
			"nil table":            {Column: list, Value: "L1", Limit: 10},
			"negative column":      {Table: e.todos, Column: -1, Value: "L1", Limit: 10},
			"column out of range":  {Table: e.todos, Column: len(e.todos.Columns), Value: "L1", Limit: 10},
			"nil value":            {Table: e.todos, Column: list, Limit: 10},
			"integer for a string": {Table: e.todos, Column: list, Value: int64(1), Limit: 10},
			"string for integer":   {Table: e.todos, Column: e.col(e.todos, "rank"), Value: "1", Limit: 10},
			"int for integer":      {Table: e.todos, Column: e.col(e.todos, "rank"), Value: 1, Limit: 10},
			"string for json":      {Table: e.todos, Column: e.col(e.todos, "meta"), Value: `{"k":1}`, Limit: 10},
			"zero limit":           {Table: e.todos, Column: list, Value: "L1"},
			"limit over the max":   {Table: e.todos, Column: list, Value: "L1", Limit: storage.MaxColumnQueryLimit + 1},
			"after id with NUL":    {Table: e.todos, Column: list, Value: "L1", AfterRowID: ptr("a\x00"), Limit: 10},
			"after id not UTF-8":   {Table: e.todos, Column: list, Value: "L1", AfterRowID: ptr("\xff"), Limit: 10},
		} {
			rs, err := tx.ScanByColumn(e.ctx, q)
			if err == nil || errors.Is(err, storage.ErrTxDone) || rs != nil {
				e.t.Fatalf("ScanByColumn(%s) = %d rows, %v; want a refusal", name, len(rs), err)
			}
		}
		// Text no backend stores matches nothing, with no error.
		for _, v := range []any{"L1\x00", "L\xff"} {
			e.wantIDs(fmt.Sprintf("todos of %q", v), e.scanBy(tx, e.todos, "list_id", v, nil, 10), "")
		}
		e.wantIDs("json holding U+0000", e.scanBy(tx, e.todos, "meta", json.RawMessage("\"\x00\""), nil, 10), "")
		// The transaction still reads, writes and commits.
		e.wantIDs("after the refusals", e.scanBy(tx, e.todos, "list_id", "L2", nil, 10), "c,d")
		e.put(tx, e.todos, 1, todo("e", "L2", nil))
		e.appendNext(tx)
		e.must(tx.Commit(e.ctx))
		_, err := tx.ScanByColumn(e.ctx, storage.ColumnQuery{Table: e.todos, Column: list, Value: "L2", Limit: 10})
		wantErrIs(base, "ScanByColumn after Commit", err, storage.ErrTxDone)
		tx2 := e.begin("p")
		e.wantIDs("committed", e.scanBy(tx2, e.todos, "list_id", "L2", nil, 10), "c,d,e")
		e.must(tx2.Rollback(e.ctx))
		_, err = tx2.ScanByColumn(e.ctx, storage.ColumnQuery{Table: e.todos, Column: list, Value: "L2", Limit: 10})
		wantErrIs(base, "ScanByColumn after Rollback", err, storage.ErrTxDone)
	}},
	// A bump that declares a reference on an existing column of a table
	// holding rows, and one on a new column: the rows are found by value
	// (the backend built the index over them), and a same-version
	// EnsureSchema again changes nothing.
	{name: "BumpAddsReference", raw: true, fn: func(base *env) {
		e := base.refEnsure(RefSchemaV1)
		e.refFixture()
		e.push("p", func(tx storage.PushTx) {
			e.put(tx, e.notes, 1, ssp2.Row{"n1", "p1", "L1"})
			e.put(tx, e.notes, 1, ssp2.Row{"n2", "p1", "L2"})
			e.put(tx, e.notes, 1, ssp2.Row{"n3", "p1", nil})
			e.put(tx, e.notes, 1, ssp2.Row{"n0", "p1", "L1"})
		})
		e = base.refEnsure(RefSchemaV2)
		if n := len(e.notes.References) + len(e.todos.References); n != 4 {
			e.t.Fatalf("RefSchemaV2 declares %d references, want 4", n)
		}
		e = base.refEnsure(RefSchemaV2)
		tx := e.begin("p")
		defer tx.Rollback(e.ctx) //nolint:errcheck
		notes := e.scanBy(tx, e.notes, "list_id", "L1", nil, 10)
		e.wantIDs("notes of L1 after the bump", notes, "n0,n1")
		e.wantRow("note from before the bump", &notes[1], storage.RowRecord{RowID: "n1", Version: 1, Values: ssp2.Row{"n1", "p1", "L1"}})
		e.wantIDs("todos blocked by a (a column added by the bump)", e.scanBy(tx, e.todos, "blocked_by", "a", nil, 10), "")
		l1 := e.scanBy(tx, e.todos, "list_id", "L1", nil, 10)
		e.wantIDs("todos of L1 after the bump", l1, "10,9,B,a,é")
		e.wantRow("todo from before the bump", &l1[3], storage.RowRecord{RowID: "a", Version: 2, Values: append(todo("a", "L1", nil), nil)})
		e.put(tx, e.todos, 1, append(todo("b1", "L2", nil), "a"))
		e.put(tx, e.todos, 1, append(todo("b0", "L2", nil), "a"))
		e.wantIDs("todos blocked by a, staged", e.scanBy(tx, e.todos, "blocked_by", "a", nil, 10), "b0,b1")
		e.appendNext(tx)
		e.must(tx.Commit(e.ctx))
		tx2 := e.begin("p")
		defer tx2.Rollback(e.ctx) //nolint:errcheck
		e.wantIDs("todos blocked by a, committed", e.scanBy(tx2, e.todos, "blocked_by", "a", ptr("b0"), 10), "b1")
	}},
}
