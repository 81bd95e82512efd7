package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/operations"
	"github.com/synclane/synclane/protocol/opwire"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// Primary keys of every eligible type end to end (SPEC §2.2, §2.4), on
// every backend, through the real request path: a row's wire rowId is
// its key rendered as a string (an integer in decimal, a boolean as
// true/false, json as its raw text); a payload whose key renders
// otherwise than the operation's rowId is sync.invalid_request; bootstrap
// pages come in the key's native order (integers numerically: 9, 10, 100)
// and resume after the last row id; changes, deletes, tombstones and
// conflicts go by the rendered key.

const keyTypesSchemaJSON = `{"version":1,"tables":[
 {"name":"counters","columns":[{"name":"id","type":"integer"},{"name":"project_id","type":"string"},{"name":"title","type":"string"},{"name":"code","type":"string","nullable":true}],
  "primaryKey":"id","scopes":["project:{project_id}"]},
 {"name":"flags","columns":[{"name":"id","type":"boolean"},{"name":"project_id","type":"string"},{"name":"title","type":"string"},{"name":"code","type":"string","nullable":true}],
  "primaryKey":"id","scopes":["project:{project_id}"]},
 {"name":"docs","columns":[{"name":"id","type":"json"},{"name":"project_id","type":"string"},{"name":"title","type":"string"},{"name":"code","type":"string","nullable":true}],
  "primaryKey":"id","scopes":["project:{project_id}"]}]}`

// keyCase is one key type's table, its keys in the order pushed, their
// row ids in key order, and row ids that render no stored key.
type keyCase struct {
	table   string
	keys    []any    // pushed in this order
	ordered []string // row ids in key order
	// wrong are row ids paired with keys[0]'s payload that do not render
	// it (all but another row's key name no row).
	wrong []string
}

var keyCases = []keyCase{
	{table: "counters", keys: []any{int64(100), int64(9), int64(10), int64(-3), int64(ssp2.MaxSafeInt)},
		ordered: []string{"-3", "9", "10", "100", "9007199254740991"},
		wrong:   []string{"0100", "+100", "100.0", "1e2", "abc"}},
	{table: "flags", keys: []any{true, false},
		ordered: []string{"false", "true"},
		wrong:   []string{"1", "TRUE", "True", "false"}},
	{table: "docs", keys: []any{json.RawMessage(`{"a":1}`), json.RawMessage(`[1]`), json.RawMessage(`"s"`), json.RawMessage(`10`), json.RawMessage(`9`), json.RawMessage(`{ "a": 1 }`)},
		ordered: []string{`"s"`, `10`, `9`, `[1]`, `{ "a": 1 }`, `{"a":1}`},
		wrong:   []string{`{"a": 1}`, `{"a":1} `, `{`, `[object Object]`}},
}

// keyFixture runs the engine on keyTypesSchemaJSON.
type keyFixture struct {
	*fixture
	sch *schema.Schema
}

func newKeyFixture(t *testing.T, st backend) *keyFixture {
	t.Helper()
	sch, err := schema.Parse([]byte(keyTypesSchemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	return &keyFixture{fixture: newFixture(t, st, func(c *engine.Config) { c.Schema = sch }), sch: sch}
}

// rowID renders key as table's row id.
func (f *keyFixture) rowID(table string, key any) string {
	f.t.Helper()
	id, ok := schema.RenderKey(f.sch.Table(table).Columns[0], key)
	if !ok {
		f.t.Fatalf("%s key %#v renders no row id", table, key)
	}
	return id
}

// full is the wire-v3 payload of a whole row.
func (f *keyFixture) full(table string, key any, project, title string) []byte {
	f.t.Helper()
	b, err := ssp2.NewRowCodec(f.sch.Table(table).Columns).AppendSparse(nil, ssp2.Row{key, project, title, nil}, nil, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

// titlePatch presents only the key and the title.
func (f *keyFixture) titlePatch(table string, key any, title string) []byte {
	f.t.Helper()
	present := ssp2.NewColumnSet(4)
	present.Add(0)
	present.Add(2)
	b, err := ssp2.NewRowCodec(f.sch.Table(table).Columns).AppendSparse(nil, ssp2.Row{key, nil, title, nil}, present, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

func (f *keyFixture) stored(table, rowID string) (rec *storage.RowRecord, tomb int64) {
	f.t.Helper()
	f.inPushTx(func(ctx context.Context, tx storage.PushTx) (err error) {
		t := f.sch.Table(table)
		if rec, err = tx.GetRow(ctx, t, rowID); err != nil {
			return err
		}
		tomb, err = tx.Tombstone(ctx, t, rowID)
		return err
	})
	return rec, tomb
}

var opName = map[ssp2.OpKind]string{ssp2.OpUpsert: "upsert", ssp2.OpDelete: "delete"}

func keySub(id, table string, cursor int64) *ssp2.Subscription {
	return &ssp2.Subscription{ID: id, Table: table, Scopes: map[string][]string{"project_id": {"P"}}, Cursor: cursor}
}

// bootstrap pulls table's rows of project P for a fresh client, pageRows
// rows a page, and returns the row ids in the order delivered, each
// row's key rendered (so a key of the wrong type fails), and the pin.
func (f *keyFixture) bootstrap(cid, table string, pageRows int32) ([]string, map[string]ssp2.SegmentRow, int64) {
	f.t.Helper()
	c := f.client("reader", cid)
	lim := ssp2.PullHeader{Accept: 1, LimitSnapshotRows: pageRows, MaxSnapshotPages: 1}
	s := keySub("s", table, -1)
	var order []string
	rows := map[string]ssp2.SegmentRow{}
	for round := 0; ; round++ {
		if round > 20 {
			f.t.Fatal("bootstrap did not finish")
		}
		got := c.pull(lim, s)["s"]
		if len(got.rows) > int(pageRows) {
			f.t.Fatalf("a page of %d rows, limit %d", len(got.rows), pageRows)
		}
		for _, r := range got.rows {
			id := f.rowID(table, r.Values[0])
			if _, dup := rows[id]; dup {
				f.t.Fatalf("row %s delivered twice", id)
			}
			order = append(order, id)
			rows[id] = r
		}
		s.Cursor, s.BootstrapState = got.end.NextCursor, got.end.BootstrapState
		if got.end.BootstrapState == nil {
			return order, rows, got.end.NextCursor
		}
	}
}

func TestNonStringPrimaryKeys(t *testing.T) {
	for _, be := range crdtStores() {
		t.Run(be.name, func(t *testing.T) {
			f := newKeyFixture(t, be.open(t))
			for _, kc := range keyCases {
				t.Run(kc.table, func(t *testing.T) {
					f.t = t
					testKeyType(t, f, kc)
				})
			}
		})
	}
}

func testKeyType(t *testing.T, f *keyFixture, kc keyCase) {
	a, b := f.client("alice", "ca-"+kc.table), f.client("bob", "cb-"+kc.table)
	k0 := kc.keys[0]
	id0 := f.rowID(kc.table, k0)

	// A payload whose key renders otherwise than the rowId is refused,
	// the server keeps serving, and nothing is stored.
	for i, wrong := range kc.wrong {
		pr := a.push(fmt.Sprintf("wrong-%d", i), upsert(kc.table, wrong, f.full(kc.table, k0, "P", "x"), nil))
		if r := wantRejected(t, pr, syncerr.InvalidRequest); r.Status != ssp2.OpError || r.OpIndex != 0 {
			t.Fatalf("rowId %q for key %s: %+v", wrong, id0, r)
		}
		if rec, _ := f.stored(kc.table, wrong); rec != nil {
			t.Fatalf("refused rowId %q stored %+v", wrong, rec)
		}
	}
	if rec, _ := f.stored(kc.table, id0); rec != nil {
		t.Fatalf("a refused push stored %s: %+v", id0, rec)
	}

	// Inserts: one commit, keys out of order.
	var ops []ssp2.Operation
	for _, k := range kc.keys {
		id := f.rowID(kc.table, k)
		ops = append(ops, upsert(kc.table, id, f.full(kc.table, k, "P", "title "+id), ver(0)))
	}
	pr := a.push("insert", ops...)
	wantApplied(t, pr)
	insertSeq := *pr.CommitSeq
	for _, id := range kc.ordered {
		rec, _ := f.stored(kc.table, id)
		if rec == nil || rec.RowID != id || rec.Version != 1 || rec.Values[2] != "title "+id {
			t.Fatalf("stored %s: %+v", id, rec)
		}
	}

	// Bootstrap, one row a page: every row once, in key order, each page
	// resuming after the previous page's last row id.
	order, rows, pin := f.bootstrap("boot1-"+kc.table, kc.table, 1)
	if !slices.Equal(order, kc.ordered) || pin != insertSeq {
		t.Fatalf("bootstrap in pages of 1: %q at pin %d, want %q at %d", order, pin, kc.ordered, insertSeq)
	}
	if !reflect.DeepEqual(rows[id0].Values, ssp2.Row{k0, "P", "title " + id0, nil}) {
		t.Fatalf("bootstrapped row %s: %#v", id0, rows[id0].Values)
	}
	if order, _, _ := f.bootstrap("boot2-"+kc.table, kc.table, 2); !slices.Equal(order, kc.ordered) {
		t.Fatalf("bootstrap in pages of 2: %q, want %q", order, kc.ordered)
	}

	// An update presenting the title, then a conflict from the old base.
	wantApplied(t, a.push("update", upsert(kc.table, id0, f.titlePatch(kc.table, k0, "by alice"), ver(1))))
	r := wantRejected(t, b.push("stale", upsert(kc.table, id0, f.titlePatch(kc.table, k0, "by bob"), ver(1))), syncerr.VersionConflict)
	if r.Status != ssp2.OpConflict || r.ServerVersion != 2 {
		t.Fatalf("conflict record %+v", r)
	}
	if row, err := ssp2.NewRowCodec(f.sch.Table(kc.table).Columns).Decode(r.ServerRow); err != nil || !reflect.DeepEqual(row, ssp2.Row{k0, "P", "by alice", nil}) {
		t.Fatalf("serverRow %#v, %v", row, err)
	}
	// A patch whose key renders otherwise is refused like a full row.
	wantRejected(t, b.push("wrong-patch", upsert(kc.table, kc.wrong[0]+"x", f.titlePatch(kc.table, k0, "x"), nil)), syncerr.InvalidRequest)

	// Delete by the rendered key: a tombstone, and a stale unversioned
	// write loses to it; another spelling of the key deletes nothing.
	for i, wrong := range kc.wrong {
		if slices.Contains(kc.ordered, wrong) {
			continue // another row's key (flags: "false")
		}
		wantApplied(t, b.push(fmt.Sprintf("del-wrong-%d", i), ssp2.Operation{Table: kc.table, RowID: wrong, Op: ssp2.OpDelete}))
		if _, tomb := f.stored(kc.table, wrong); tomb != 0 {
			t.Fatalf("a delete of %q left a tombstone at %d", wrong, tomb)
		}
	}
	if rec, _ := f.stored(kc.table, id0); rec == nil || rec.Version != 2 {
		t.Fatalf("%s after deletes of other spellings: %+v", id0, rec)
	}
	pr = a.push("delete", ssp2.Operation{Table: kc.table, RowID: id0, Op: ssp2.OpDelete})
	wantApplied(t, pr)
	delSeq := *pr.CommitSeq
	if rec, tomb := f.stored(kc.table, id0); rec != nil || tomb != delSeq {
		t.Fatalf("after the delete: row %+v, tombstone %d (want %d)", rec, tomb, delSeq)
	}
	wantRejected(t, b.push("after-delete", upsert(kc.table, id0, f.full(kc.table, k0, "P", "late"), nil)), syncerr.RowDeleted)

	// Incremental pull from the pin: the update and the delete, by the
	// rendered key.
	s := b.pull(ssp2.PullHeader{Accept: 1}, keySub("inc", kc.table, pin))["inc"]
	var changes []string
	for _, c := range s.commits {
		for _, ch := range c.Changes {
			changes = append(changes, fmt.Sprintf("%d %s %s", c.CommitSeq, opName[ch.Op], ch.RowID))
		}
	}
	want := []string{fmt.Sprintf("%d upsert %s", insertSeq+1, id0), fmt.Sprintf("%d delete %s", delSeq, id0)}
	if !slices.Equal(changes, want) {
		t.Fatalf("incremental changes %q, want %q", changes, want)
	}

	// Recreate at baseVersion 0: version 1, the tombstone cleared; the
	// next bootstrap has every row again, in order.
	wantApplied(t, b.push("recreate", upsert(kc.table, id0, f.full(kc.table, k0, "P", "again"), ver(0))))
	if rec, tomb := f.stored(kc.table, id0); rec == nil || rec.Version != 1 || rec.Values[2] != "again" || tomb != 0 {
		t.Fatalf("recreated: %+v, tombstone %d", rec, tomb)
	}
	if order, rows, _ := f.bootstrap("boot3-"+kc.table, kc.table, 3); !slices.Equal(order, kc.ordered) || rows[id0].Values[2] != "again" {
		t.Fatalf("bootstrap after the recreate: %q", order)
	}
}

// A command builds rows with non-string keys: it reads a row by its
// rendered key, its upsert's row id is the key rendered, and a delete
// names the rendered key; a mutation whose RowID renders otherwise than
// its key is refused.
func TestCommandWithIntegerKey(t *testing.T) {
	for _, be := range crdtStores() {
		t.Run(be.name, func(t *testing.T) {
			sch, err := schema.Parse([]byte(keyTypesSchemaJSON))
			if err != nil {
				t.Fatal(err)
			}
			reg := operations.NewRegistry(sch)
			allow := func(context.Context, operations.Caller, any) (bool, error) { return true, nil }
			var seen []string
			e := reg.AddCommand(operations.Command{ID: "bump", Authorize: allow,
				Run: func(ctx context.Context, inv operations.Invocation) ([]operations.Mutation, error) {
					prev, err := inv.Rows.GetRow(ctx, "counters", "10")
					if err != nil {
						return nil, err
					}
					title := "first"
					if prev != nil {
						seen = append(seen, fmt.Sprintf("%T %v", prev["id"], prev["id"]))
						title = prev["title"].(string) + "+"
					}
					return []operations.Mutation{
						{Table: "counters", Values: map[string]any{"id": 10, "project_id": "P", "title": title}},
						{Table: "counters", Delete: true, RowID: "9"},
					}, nil
				}})
			e = errors.Join(e, reg.AddCommand(operations.Command{ID: "misnamed", Authorize: allow,
				Run: func(context.Context, operations.Invocation) ([]operations.Mutation, error) {
					return []operations.Mutation{{Table: "counters", RowID: "010", Values: map[string]any{"id": 10, "project_id": "P", "title": "x"}}}, nil
				}}))
			if e != nil {
				t.Fatal(e)
			}
			kf := &keyFixture{fixture: newFixture(t, be.open(t), func(c *engine.Config) { c.Schema, c.Operations.Registry = sch, reg }), sch: sch}
			wantApplied(t, kf.client("alice", "ca").push("seed", upsert("counters", "9", kf.full("counters", int64(9), "P", "nine"), nil)))
			for i, want := range []string{"first", "first+"} {
				res, err := kf.op("alice", "p1", command("bump", fmt.Sprintf("r%d", i), nil))
				if err != nil || res.Command.Status != opwire.StatusApplied {
					t.Fatalf("bump %d: %+v %v", i, res.Command, err)
				}
				if rec, _ := kf.stored("counters", "10"); rec == nil || rec.Values[0] != int64(10) || rec.Values[2] != want {
					t.Fatalf("after bump %d: %+v", i, rec)
				}
			}
			if !slices.Equal(seen, []string{"int64 10"}) {
				t.Fatalf("the command read %q", seen)
			}
			if rec, tomb := kf.stored("counters", "9"); rec != nil || tomb == 0 {
				t.Fatalf("row 9 after the command's delete: %+v, tombstone %d", rec, tomb)
			}
			if _, err := kf.op("alice", "p1", command("misnamed", "r9", nil)); syncerr.CodeOf(err) != syncerr.OperationInvalidRequest {
				t.Fatalf("a mutation whose RowID is not its key rendered: %v", err)
			}
		})
	}
}
