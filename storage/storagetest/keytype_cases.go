package storagetest

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/segstore/sqliteimage"
)

// Primary keys of every eligible type (SPEC §2.4; storage/keys.go). A
// row id is the key rendered as a string (schema.RenderKey); the backend
// stores the key in its column's own type and orders rows by it: integer
// keys numerically (9 < 10 < 100, where their row ids' byte order says
// "10" < "100" < "9"), boolean keys false before true, string and json
// keys by the bytes of their text. A row id no key value renders as
// ("010", "abc" for an integer key, "1" for a boolean key, "{" for a json
// key) names no row: reads find nothing, DeleteRow deletes nothing and
// records no tombstone, and it is never sent to the database. Every
// backend agrees, through every read: GetRow (prefetched or not),
// Rows.ScanRows and VisitRows, PushTx.ScanRows, the encoders' last row
// id, AdminRow, copied images.

// KeyTypesSchema has one table per eligible primary-key type.
const KeyTypesSchema = `{"version":1,"tables":[
 {"name":"ikeys","columns":[{"name":"id","type":"integer"},{"name":"project","type":"string"},{"name":"v","type":"string","nullable":true}],"primaryKey":"id","scopes":["project:{project}"]},
 {"name":"bkeys","columns":[{"name":"id","type":"boolean"},{"name":"project","type":"string"},{"name":"v","type":"string","nullable":true}],"primaryKey":"id","scopes":["project:{project}"]},
 {"name":"jkeys","columns":[{"name":"id","type":"json"},{"name":"project","type":"string"},{"name":"v","type":"string","nullable":true}],"primaryKey":"id","scopes":["project:{project}"]},
 {"name":"okeys","columns":[{"name":"id","type":"integer"},{"name":"v","type":"string","nullable":true}],"primaryKey":"id","scopes":[{"pattern":"owner:{owner}","column":"id"}]}]}`

// keyFixture is the rows keyTypeTests read, in partition "p", each with
// its v set to its row id.
type keyFixture struct {
	sch                 *schema.Schema
	ints, bools, jsons  *schema.Table
	intIDs, jsonIDs     []string // in key order
	intOther, boolOther string   // a row of project p2
}

// bigKey is the largest integer the wire carries (2^53-1): its decimal
// form must survive every backend.
const bigKey = int64(ssp2.MaxSafeInt)

// keyTypesFixture ensures KeyTypesSchema and writes the fixture.
func (e *env) keyTypesFixture() keyFixture {
	e.t.Helper()
	f := keyFixture{sch: MustParse(KeyTypesSchema)}
	e.must(e.b.Lifecycle.EnsureSchema(e.ctx, f.sch))
	f.ints, f.bools, f.jsons = f.sch.Table("ikeys"), f.sch.Table("bkeys"), f.sch.Table("jkeys")
	f.intIDs = []string{"-20", "-1", "0", "9", "10", "100", "9007199254740991"}
	f.jsonIDs = []string{`"s"`, `10`, `9`, `[1]`, `{ "a": 1 }`, `{"a":1}`}
	f.intOther, f.boolOther = "5", "true"
	e.push("p", func(tx storage.PushTx) {
		// Inserted out of order, so the order read is the store's.
		for _, n := range []int64{100, 9, -1, bigKey, 10, 0, -20} {
			e.put(tx, f.ints, 1, ssp2.Row{n, "p1", itoa(n)})
		}
		e.put(tx, f.ints, 1, ssp2.Row{int64(5), "p2", "5"})
		e.put(tx, f.bools, 1, ssp2.Row{true, "p1", "true"})
		e.put(tx, f.bools, 1, ssp2.Row{false, "p1", "false"})
		for _, j := range []string{`{"a":1}`, `[1]`, `9`, `{ "a": 1 }`, `"s"`, `10`} {
			e.put(tx, f.jsons, 1, ssp2.Row{json.RawMessage(j), "p1", j})
		}
		e.appendNext(tx)
	})
	return f
}

// keyRow is the fixture's row of t with row id id (its v is id).
func keyRow(t *schema.Table, id string) ssp2.Row {
	k, _ := t.KeyOf(id)
	return ssp2.Row{k, "p1", id}
}

// wantIDs checks the row ids of rows, in order, and that each row's key
// renders as its id and its v is its id.
func (e *env) wantIDs(what string, t *schema.Table, rows []storage.RowRecord, want ...string) {
	e.t.Helper()
	got := []string{}
	for _, r := range rows {
		got = append(got, r.RowID)
		if id, ok := t.RowID(r.Values); !ok || id != r.RowID || r.Values[2] != r.RowID {
			e.t.Fatalf("%s: row %q holds %s", what, r.RowID, fmtRow(r.Values))
		}
	}
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(got, want) {
		e.t.Fatalf("%s: row ids %q, want %q", what, got, want)
	}
}

// pageAll reads every row of t in p1 in pages of limit with read, each
// page after the previous page's last row id, and returns the ids of
// each page.
func pageAll(t *schema.Table, limit int, read func(q storage.RowQuery) []storage.RowRecord) [][]string {
	var pages [][]string
	var after *string
	for range 100 {
		rows := read(storage.RowQuery{Table: t, Scopes: p1, AfterRowID: after, Limit: limit})
		var ids []string
		for _, r := range rows {
			ids = append(ids, r.RowID)
		}
		pages = append(pages, ids)
		if len(rows) < limit {
			break
		}
		last := rows[len(rows)-1].RowID
		after = &last
	}
	return pages
}

var keyTypeTests = []test{
	// Rows come in the key's order, and paging by the last row id
	// continues in it: across 9 | 10 | 100, where byte order differs.
	{name: "OrderAndPaging", raw: true, roles: []string{"Rows"}, fn: func(e *env) {
		f := e.keyTypesFixture()
		scan := func(part string, q storage.RowQuery) []storage.RowRecord { return e.scanRows(part, q) }
		visit := func(part string, q storage.RowQuery) []storage.RowRecord {
			var out []storage.RowRecord
			e.must(e.b.Rows.VisitRows(e.ctx, part, q, func(r storage.RowRecord) error {
				r.Values = slices.Clone(r.Values)
				out = append(out, r)
				return nil
			}))
			return out
		}
		txScan := func(part string, q storage.RowQuery) []storage.RowRecord {
			tx := e.begin(part)
			defer func() { _ = tx.Rollback(e.ctx) }()
			rows, err := tx.ScanRows(e.ctx, q)
			e.must(err)
			return rows
		}
		for _, read := range []struct {
			name string
			fn   func(part string, q storage.RowQuery) []storage.RowRecord
		}{{"ScanRows", scan}, {"VisitRows", visit}, {"PushTx.ScanRows", txScan}} {
			all := func(t *schema.Table, after *string) []storage.RowRecord {
				return read.fn("p", storage.RowQuery{Table: t, Scopes: p1, AfterRowID: after, Limit: 100})
			}
			e.wantIDs(read.name+" integer keys", f.ints, all(f.ints, nil), f.intIDs...)
			e.wantIDs(read.name+" boolean keys", f.bools, all(f.bools, nil), "false", "true")
			e.wantIDs(read.name+" json keys", f.jsons, all(f.jsons, nil), f.jsonIDs...)
			e.wantIDs(read.name+" integer keys of p2", f.ints, read.fn("p", storage.RowQuery{Table: f.ints, Scopes: map[string][]string{"project": {"p2"}}, Limit: 100}), f.intOther)

			pages := pageAll(f.ints, 2, func(q storage.RowQuery) []storage.RowRecord { return read.fn("p", q) })
			if want := [][]string{{"-20", "-1"}, {"0", "9"}, {"10", "100"}, {"9007199254740991"}}; !reflect.DeepEqual(pages, want) {
				e.t.Fatalf("%s: integer pages of 2: %q, want %q", read.name, pages, want)
			}
			pages = pageAll(f.ints, 3, func(q storage.RowQuery) []storage.RowRecord { return read.fn("p", q) })
			if want := [][]string{{"-20", "-1", "0"}, {"9", "10", "100"}, {"9007199254740991"}}; !reflect.DeepEqual(pages, want) {
				e.t.Fatalf("%s: integer pages of 3: %q, want %q", read.name, pages, want)
			}
			pages = pageAll(f.jsons, 4, func(q storage.RowQuery) []storage.RowRecord { return read.fn("p", q) })
			if want := [][]string{f.jsonIDs[:4], f.jsonIDs[4:]}; !reflect.DeepEqual(pages, want) {
				e.t.Fatalf("%s: json pages of 4: %q, want %q", read.name, pages, want)
			}
			for _, c := range []struct {
				t     *schema.Table
				after string
				want  []string
			}{
				{f.ints, "9", []string{"10", "100", "9007199254740991"}},
				{f.ints, "-1", []string{"0", "9", "10", "100", "9007199254740991"}},
				{f.ints, "11", []string{"100", "9007199254740991"}}, // no such row: a position all the same
				{f.ints, "9007199254740991", nil},
				{f.ints, "abc", nil}, // no integer sorts after it
				{f.ints, "09", nil},
				{f.bools, "false", []string{"true"}},
				{f.bools, "", []string{"false", "true"}},
				{f.bools, "a", []string{"false", "true"}},
				{f.bools, "g", []string{"true"}}, // between "false" and "true"
				{f.bools, "true", nil},
				{f.bools, "zzz", nil},
				{f.jsons, `9`, []string{`[1]`, `{ "a": 1 }`, `{"a":1}`}},
				{f.jsons, `10`, []string{`9`, `[1]`, `{ "a": 1 }`, `{"a":1}`}},
				{f.jsons, `{`, []string{`{ "a": 1 }`, `{"a":1}`}}, // not JSON: a position all the same
				{f.jsons, `{"a":1}`, nil},
			} {
				after := c.after
				e.wantIDs(read.name+" "+c.t.Name+" after "+c.after, c.t, all(c.t, &after), c.want...)
			}
		}
		// The transaction's own writes sort in too.
		e.push("p", func(tx storage.PushTx) {
			e.put(tx, f.ints, 2, ssp2.Row{int64(50), "p1", "50"})
			e.deleteAt(tx, f.ints, "10", 2)
			rows, err := tx.ScanRows(e.ctx, storage.RowQuery{Table: f.ints, Scopes: p1, Limit: 100})
			e.must(err)
			e.wantIDs("PushTx.ScanRows over staged writes", f.ints, rows, "-20", "-1", "0", "9", "50", "100", "9007199254740991")
			e.appendNext(tx)
		})
		e.wantIDs("committed after the writes", f.ints, scan("p", storage.RowQuery{Table: f.ints, Scopes: p1, Limit: 100}),
			"-20", "-1", "0", "9", "50", "100", "9007199254740991")
	}},
	// Lookups by row id: the rendered key finds the row, any other
	// spelling finds nothing; deletes and tombstones go by the rendered
	// key too.
	{name: "LookupsDeletesTombstones", raw: true, fn: func(e *env) {
		f := e.keyTypesFixture()
		tx := e.begin("p")
		defer func() { _ = tx.Rollback(e.ctx) }()
		for _, c := range []struct {
			t       *schema.Table
			id      string
			missing []string
		}{
			{f.ints, "10", []string{"010", "+10", "10.0", "1e1", " 10", "abc", "", "-0", "99999999999999999999"}},
			{f.ints, "0", []string{"-0", "00", "false"}},
			{f.ints, "9007199254740991", []string{"9007199254740992", "9.007199254740993e15"}},
			{f.bools, "true", []string{"1", "TRUE", "True", "t", ""}},
			{f.bools, "false", []string{"0", "FALSE", "f", "null"}},
			{f.jsons, `{"a":1}`, []string{`{"a": 1}`, `{"a":1} `, `{`, "", "\x00"}},
			{f.jsons, `"s"`, []string{`s`, `'s'`}},
		} {
			e.wantRow("GetRow("+c.t.Name+", "+c.id+")", e.getRow(tx, c.t, c.id), storage.RowRecord{RowID: c.id, Version: 1, Values: keyRow(c.t, c.id)})
			for _, m := range c.missing {
				if r := e.getRow(tx, c.t, m); r != nil {
					e.t.Fatalf("GetRow(%s, %q) found %+v", c.t.Name, m, r)
				}
			}
		}
		// A key that renders otherwise than the row id is refused.
		err := tx.PutRow(e.ctx, f.ints, storage.RowRecord{RowID: "010", Version: 1, Values: ssp2.Row{int64(10), "p1", "x"}})
		if err == nil {
			e.t.Fatal(`PutRow of key 10 as row id "010" succeeded`)
		}
		err = tx.PutRow(e.ctx, f.ints, storage.RowRecord{RowID: "10", Version: 1, Values: ssp2.Row{"10", "p1", "x"}})
		if err == nil {
			e.t.Fatal(`PutRow of a string key in an integer column succeeded`)
		}
		seq := tx.Partition().MaxCommitSeq + 1
		// A row id that names no key deletes nothing and gets no tombstone.
		for _, c := range []struct {
			t  *schema.Table
			id string
		}{{f.ints, "010"}, {f.ints, "abc"}, {f.bools, "1"}, {f.jsons, "{"}} {
			e.deleteAt(tx, c.t, c.id, seq)
			e.wantTomb("delete of "+c.id, tx, c.t, c.id, 0)
			e.clearTomb(tx, c.t, c.id)
		}
		e.wantRow("the row after deletes of other spellings", e.getRow(tx, f.ints, "10"), storage.RowRecord{RowID: "10", Version: 1, Values: keyRow(f.ints, "10")})
		for _, c := range []struct {
			t  *schema.Table
			id string
		}{{f.ints, "10"}, {f.ints, "-1"}, {f.bools, "false"}, {f.jsons, `{"a":1}`}, {f.ints, "77"}} {
			e.deleteAt(tx, c.t, c.id, seq)
			if r := e.getRow(tx, c.t, c.id); r != nil {
				e.t.Fatalf("%s %s after DeleteRow: %+v", c.t.Name, c.id, r)
			}
			e.wantTomb("delete of "+c.id, tx, c.t, c.id, seq)
		}
		e.clearTomb(tx, f.ints, "-1")
		e.wantTomb("cleared", tx, f.ints, "-1", 0)
		e.appendNext(tx)
		e.must(tx.Commit(e.ctx))

		e.wantIDs("integer keys after the deletes", f.ints, e.committedRows("p", f.ints), "-20", "0", "9", "100", "9007199254740991")
		e.wantIDs("boolean keys after the deletes", f.bools, e.committedRows("p", f.bools), "true")
		e.wantIDs("json keys after the deletes", f.jsons, e.committedRows("p", f.jsons), `"s"`, `10`, `9`, `[1]`, `{ "a": 1 }`)
		if got, want := e.committedTombs("p", f.ints, "10", "-1", "77", "010", "abc"), "10=2 -1=0 77=2 010=0 abc=0"; got != want {
			e.t.Fatalf("committed integer tombstones %q, want %q", got, want)
		}
		if got, want := e.committedTombs("p", f.jsons, `{"a":1}`, `{"a": 1}`), `{"a":1}=2 {"a": 1}=0`; got != want {
			e.t.Fatalf("committed json tombstones %q, want %q", got, want)
		}
		// An insert over the tombstoned key writes and reads back by it.
		e.push("p", func(tx storage.PushTx) {
			e.put(tx, f.ints, 3, ssp2.Row{int64(10), "p1", "10"})
			e.clearTomb(tx, f.ints, "10")
			e.appendNext(tx)
		})
		e.wantRow("re-inserted", e.committedRow("p", f.ints, "10"), storage.RowRecord{RowID: "10", Version: 3, Values: keyRow(f.ints, "10")})
	}},
	// Prefetch reads non-string keys ahead and answers as GetRow does.
	{name: "Prefetch", raw: true, fn: func(e *env) {
		f := e.keyTypesFixture()
		tx := e.begin("p")
		defer func() { _ = tx.Rollback(e.ctx) }()
		var keys []storage.RowKey
		for _, k := range []struct {
			t  *schema.Table
			id string
		}{{f.ints, "10"}, {f.ints, "010"}, {f.ints, "abc"}, {f.ints, "11"}, {f.bools, "true"}, {f.bools, "1"}, {f.jsons, `[1]`}, {f.jsons, "{"}} {
			keys = append(keys, storage.RowKey{Table: k.t, RowID: k.id})
		}
		e.prefetch(tx, nil, keys)
		for _, k := range keys {
			got := e.getRow(tx, k.Table, k.RowID)
			switch k.RowID {
			case "10", "true", `[1]`:
				e.wantRow("prefetched "+k.RowID, got, storage.RowRecord{RowID: k.RowID, Version: 1, Values: keyRow(k.Table, k.RowID)})
			default:
				if got != nil {
					e.t.Fatalf("prefetched %s %q: found %+v", k.Table.Name, k.RowID, got)
				}
			}
			e.wantTomb("prefetched "+k.RowID, tx, k.Table, k.RowID, 0)
		}
	}},
	// An integer primary key that is also the scope column.
	{name: "KeyIsScopeColumn", raw: true, roles: []string{"Rows"}, fn: func(e *env) {
		f := e.keyTypesFixture()
		t := f.sch.Table("okeys")
		e.push("p", func(tx storage.PushTx) {
			for _, n := range []int64{10, 9, 100} {
				e.put(tx, t, 1, ssp2.Row{n, "v"})
			}
			e.appendNext(tx)
		})
		rows := e.scanRows("p", storage.RowQuery{Table: t, Scopes: map[string][]string{"owner": {"100", "9", "09", "x"}}, Limit: 10})
		if len(rows) != 2 || rows[0].RowID != "9" || rows[1].RowID != "100" {
			e.t.Fatalf("rows of owners 100, 9: %+v", rows)
		}
	}},
	{name: "EncodersRenderTheLastRowID", raw: true, roles: []string{"Rows"}, fn: func(e *env) {
		f := e.keyTypesFixture()
		encs := map[string]storage.RowEncoder{"VisitEncoder": storage.VisitEncoder{Rows: e.b.Rows}}
		if e.b.RowEncoder != nil {
			encs["RowEncoder"] = e.b.RowEncoder
		}
		for name, enc := range encs {
			for _, c := range []struct {
				t     *schema.Table
				after *string
				limit int
				want  storage.EncodedRows
			}{
				{f.ints, nil, 4, storage.EncodedRows{Rows: 4, LastRowID: "9", More: true}},
				{f.ints, ptr("9"), 2, storage.EncodedRows{Rows: 2, LastRowID: "100", More: true}},
				{f.ints, ptr("100"), 2, storage.EncodedRows{Rows: 1, LastRowID: "9007199254740991"}},
				{f.bools, nil, 1, storage.EncodedRows{Rows: 1, LastRowID: "false", More: true}},
				{f.bools, ptr("false"), 5, storage.EncodedRows{Rows: 1, LastRowID: "true"}},
				{f.jsons, ptr(`9`), 2, storage.EncodedRows{Rows: 2, LastRowID: `{ "a": 1 }`, More: true}},
			} {
				q := storage.RowQuery{Table: c.t, Scopes: p1, AfterRowID: c.after, Limit: c.limit}
				sb := ssp2.NewSegmentBuilder(c.t.Name, 1, c.t.Columns)
				got, err := enc.EncodeRows(e.ctx, "p", q, sb)
				if err != nil {
					e.t.Fatalf("%s %s: %v", name, c.t.Name, err)
				}
				if got != c.want {
					e.t.Fatalf("%s %s after %v limit %d: %+v, want %+v", name, c.t.Name, c.after, c.limit, got, c.want)
				}
				_, ref := e.visitEncoded("p", q)
				if seg := sb.Finish(); !bytes.Equal(seg, ref) {
					e.t.Fatalf("%s %s: segment differs from VisitRows + AddRow", name, c.t.Name)
				}
			}
		}
	}},
	{name: "AdminRow", raw: true, roles: []string{"Admin"}, fn: func(e *env) {
		f := e.keyTypesFixture()
		for _, c := range []struct {
			t     *schema.Table
			id    string
			found bool
		}{{f.ints, "100", true}, {f.ints, "0100", false}, {f.ints, "x", false}, {f.bools, "false", true}, {f.bools, "0", false}, {f.jsons, `{ "a": 1 }`, true}, {f.jsons, `{"a": 1}`, false}} {
			r, err := e.admin().AdminRow(e.ctx, "p", c.t, c.id)
			e.must(err)
			if !c.found {
				if r != nil {
					e.t.Fatalf("AdminRow(%s, %q) found %+v", c.t.Name, c.id, r)
				}
				continue
			}
			e.wantRow("AdminRow "+c.id, r, storage.RowRecord{RowID: c.id, Version: 1, Values: keyRow(c.t, c.id)})
		}
	}},
	{name: "ImageCopy", raw: true, roles: []string{"ImageCopier"}, fn: func(e *env) {
		f := e.keyTypesFixture()
		for _, t := range []*schema.Table{f.ints, f.bools, f.jsons} {
			q := storage.RowQuery{Table: t, Scopes: p1}
			scanned, n1, err := sqliteimage.Build(e.ctx, t, 1, 9, "d", func(ctx context.Context, after *string, limit int) ([]storage.RowRecord, error) {
				q := q
				q.AfterRowID, q.Limit = after, limit
				return e.b.Rows.ScanRows(ctx, "p", q)
			})
			e.must(err)
			copied, n2, err := sqliteimage.BuildCopy(e.ctx, t, 1, 9, "d", func(ctx context.Context, path string) (int64, error) {
				return e.b.ImageCopier.CopyRowsToImage(ctx, "p", q, path)
			})
			e.must(err)
			a, b := e.imageRows(scanned, t.Name), e.imageRows(copied, t.Name)
			if n1 != n2 || !reflect.DeepEqual(a, b) {
				e.t.Fatalf("%s: copied image (%d rows) differs from the scanned one (%d rows):\n%v\n%v", t.Name, n2, n1, b, a)
			}
			if t == f.ints && (n1 != int64(len(f.intIDs)) || !strings.Contains(strings.Join(a, "\n"), "9007199254740991")) {
				e.t.Fatalf("integer image: %d rows %v", n1, a)
			}
		}
	}},
}

// committedRows reads every row of t in p1 of partition, in order.
func (e *env) committedRows(partition string, t *schema.Table) []storage.RowRecord {
	e.t.Helper()
	tx := e.begin(partition)
	defer func() { _ = tx.Rollback(e.ctx) }()
	rows, err := tx.ScanRows(e.ctx, storage.RowQuery{Table: t, Scopes: p1, Limit: 100})
	e.must(err)
	return rows
}
