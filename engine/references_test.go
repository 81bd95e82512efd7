package engine_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
)

// refSchemaJSON: lists; todos (CASCADE) and their subtasks (CASCADE, two
// levels); pins (RESTRICT); labels (SET NULL on a nullable column). Every
// table has the same scope pattern (a reference joins tables of the same
// scopes).
const refSchemaJSON = `{"version":1,"tables":[
 {"name":"lists","columns":[{"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"name","type":"string"}],
  "primaryKey":"id","scopes":["project:{project_id}"]},
 {"name":"todos","columns":[{"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"list_id","type":"string"},{"name":"title","type":"string"}],
  "primaryKey":"id","scopes":["project:{project_id}"],"references":[{"column":"list_id","parentTable":"lists","onDelete":"CASCADE"}]},
 {"name":"subtasks","columns":[{"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"todo_id","type":"string"}],
  "primaryKey":"id","scopes":["project:{project_id}"],"references":[{"column":"todo_id","parentTable":"todos","onDelete":"CASCADE"}]},
 {"name":"pins","columns":[{"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"list_id","type":"string"}],
  "primaryKey":"id","scopes":["project:{project_id}"],"references":[{"column":"list_id","parentTable":"lists"}]},
 {"name":"labels","columns":[{"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"list_id","type":"string","nullable":true},{"name":"name","type":"string"}],
  "primaryKey":"id","scopes":["project:{project_id}"],"references":[{"column":"list_id","parentTable":"lists","onDelete":"SET NULL"}]}]}`

// refFixture is a fixture on refSchemaJSON with one codec per table.
type refFixture struct {
	*fixture
	codecs map[string]*ssp2.RowCodec
}

func newRefFixture(t *testing.T, st backend, mut ...func(*engine.Config)) *refFixture {
	t.Helper()
	sch, err := schema.Parse([]byte(refSchemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, st, append([]func(*engine.Config){func(c *engine.Config) { c.Schema = sch }}, mut...)...)
	f.schema = sch
	rf := &refFixture{fixture: f, codecs: map[string]*ssp2.RowCodec{}}
	for _, tb := range sch.Tables {
		rf.codecs[tb.Name] = ssp2.NewRowCodec(tb.Columns)
	}
	return rf
}

// put is a whole-row upsert of table (project P).
func (f *refFixture) put(table string, values ...any) ssp2.Operation {
	f.t.Helper()
	row := append(ssp2.Row{values[0], "P"}, values[1:]...)
	b, err := f.codecs[table].AppendSparse(nil, row, nil, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	return ssp2.Operation{Table: table, RowID: values[0].(string), Op: ssp2.OpUpsert, Payload: b}
}

// patch presents the key and column col of table's row id.
func (f *refFixture) patchCol(table, id string, col int, v any, base *int64) ssp2.Operation {
	f.t.Helper()
	tb := f.schema.Table(table)
	row := make(ssp2.Row, len(tb.Columns))
	row[0], row[col] = id, v
	present := ssp2.NewColumnSet(len(tb.Columns))
	present.Add(0)
	present.Add(col)
	b, err := f.codecs[table].AppendSparse(nil, row, present, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	return ssp2.Operation{Table: table, RowID: id, Op: ssp2.OpUpsert, Payload: b, BaseVersion: base}
}

func delOp(table, id string) ssp2.Operation {
	return ssp2.Operation{Table: table, RowID: id, Op: ssp2.OpDelete}
}

// get reads a row as stored (nil: absent).
func (f *refFixture) get(table, id string) (rec *storage.RowRecord) {
	f.t.Helper()
	f.inPushTx(func(ctx context.Context, tx storage.PushTx) (err error) {
		rec, err = tx.GetRow(ctx, f.schema.Table(table), id)
		return err
	})
	return rec
}

func (f *refFixture) tomb(table, id string) (seq int64) {
	f.t.Helper()
	f.inPushTx(func(ctx context.Context, tx storage.PushTx) (err error) {
		seq, err = tx.Tombstone(ctx, f.schema.Table(table), id)
		return err
	})
	return seq
}

// wantViolation checks a sync.reference_violation of op opIndex with
// details exactly want.
func wantViolation(t *testing.T, c *client, pr *ssp2.PushResult, opIndex int32, want string) {
	t.Helper()
	r := wantRejected(t, pr, syncerr.ReferenceViolation)
	if r.OpIndex != opIndex || r.Retryable || r.Status != ssp2.OpError {
		t.Fatalf("push %s: %+v, want a non-retryable error at op %d", pr.ClientCommitID, r, opIndex)
	}
	if got := c.lastDetails; got != want {
		t.Fatalf("push %s: details %s, want %s", pr.ClientCommitID, got, want)
	}
}

// TestDeclaredReferences: SPEC §6.11 and Appendix B.19 on every backend.
func TestDeclaredReferences(t *testing.T) {
	for _, be := range crdtStores() {
		t.Run(be.name, func(t *testing.T) {
			f := newRefFixture(t, be.open(t))
			a, b := f.client("alice", "ca"), f.client("bob", "cb")

			// (a) A child naming an absent parent: the commit rolls back whole.
			pr := a.push("orphan", f.put("lists", "L0", "inbox"), f.put("todos", "T0", "nope", "x"))
			wantViolation(t, a, pr, 1, `{"fieldPaths":["list_id"],"reason":"missing_parent","references":{"parent":"lists","row":"nope"}}`)
			if f.get("lists", "L0") != nil {
				t.Fatal("the sibling of a refused child was applied")
			}
			// A parent and its child in one commit: fine, in either order.
			wantApplied(t, a.push("family", f.put("todos", "T1", "L1", "a"), f.put("lists", "L1", "one")))

			// (b) RESTRICT in both arrival orders.
			wantApplied(t, a.push("L2", f.put("lists", "L2", "two")))
			wantApplied(t, b.push("pin-first", f.put("pins", "P2", "L2")))
			wantViolation(t, a, a.push("delete-pinned", delOp("lists", "L2")), 0, `{"reason":"restricted_delete","references":{"child":"pins"}}`)
			if f.get("lists", "L2") == nil || f.get("pins", "P2") == nil {
				t.Fatal("a refused delete changed something")
			}
			wantApplied(t, a.push("L3", f.put("lists", "L3", "three")))
			wantApplied(t, a.push("delete-first", delOp("lists", "L3")))
			wantViolation(t, b, b.push("pin-late", f.put("pins", "P3", "L3")), 0, `{"fieldPaths":["list_id"],"reason":"missing_parent","references":{"parent":"lists","row":"L3"}}`)
			// (f) A commit that deletes a parent and its children passes
			// RESTRICT.
			wantApplied(t, a.push("delete-both", delOp("pins", "P2"), delOp("lists", "L2")))

			// (c) CASCADE across two levels, in one commit.
			wantApplied(t, a.push("tree", f.put("lists", "L4", "four"), f.put("todos", "T41", "L4", "x"), f.put("todos", "T42", "L4", "y"),
				f.put("subtasks", "S1", "T41"), f.put("subtasks", "S2", "T42"), f.put("subtasks", "S3", "T1")))
			before := f.info(t)
			wantApplied(t, b.push("cascade", delOp("lists", "L4")))
			for _, r := range [][2]string{{"lists", "L4"}, {"todos", "T41"}, {"todos", "T42"}, {"subtasks", "S1"}, {"subtasks", "S2"}} {
				if f.get(r[0], r[1]) != nil {
					t.Fatalf("%s %s survived the cascade", r[0], r[1])
				}
				if f.tomb(r[0], r[1]) != before.MaxCommitSeq+1 {
					t.Fatalf("%s %s has no tombstone at the cascade's commit", r[0], r[1])
				}
			}
			if f.get("subtasks", "S3") == nil || f.get("todos", "T1") == nil {
				t.Fatal("the cascade deleted rows of another list")
			}
			// The cascade's commit carries every delete, with the child's
			// scopes, for pulls and deltas.
			s := b.pull(ssp2.PullHeader{Accept: 1}, &ssp2.Subscription{ID: "t", Table: "subtasks", Scopes: map[string][]string{"project_id": {"P"}}, Cursor: before.MaxCommitSeq})["t"]
			if len(s.commits) != 1 || len(s.commits[0].Changes) != 2 {
				t.Fatalf("subtask changes after the cascade: %+v", s.commits)
			}
			for _, ch := range s.commits[0].Changes {
				if ch.Op != ssp2.OpDelete || ch.Scopes["project_id"] != "P" {
					t.Fatalf("cascaded change %+v", ch)
				}
			}

			// (d) SET NULL: only the reference column moves.
			wantApplied(t, a.push("L5", f.put("lists", "L5", "five"), f.put("labels", "B1", "L5", "red")))
			wantApplied(t, a.push("drop-L5", delOp("lists", "L5")))
			lab := f.get("labels", "B1")
			if lab == nil || lab.Values[2] != nil || lab.Version != 2 || lab.Values[3] != "red" {
				t.Fatalf("label after its list's delete: %+v", lab)
			}
			// A stale patch of the name at the label's first version applies
			// (the name did not move); one of list_id conflicts.
			wantApplied(t, b.push("rename", f.patchCol("labels", "B1", 3, "blue", ver(1))))
			if r := wantRejected(t, b.push("relink", f.patchCol("labels", "B1", 2, "L1", ver(1))), syncerr.VersionConflict); r.ConflictColumns.Len() != 1 || !r.ConflictColumns.Has(2) {
				t.Fatalf("stale list_id patch: %+v", r)
			}

			// The refused pushes replay the same, details included.
			again := a.push("orphan", f.put("lists", "L0", "inbox"))
			wantViolation(t, a, again, 1, `{"fieldPaths":["list_id"],"reason":"missing_parent","references":{"parent":"lists","row":"nope"}}`)
		})
	}
}

// TestCascadeLimit: a cascade of more operations than the cap refuses the
// commit (cascade_limit) and deletes nothing; at the cap it applies.
func TestCascadeLimit(t *testing.T) {
	for _, be := range crdtStores() {
		t.Run(be.name, func(t *testing.T) {
			f := newRefFixture(t, be.open(t), func(c *engine.Config) { c.MaxCascadeOperations = 5 })
			a := f.client("alice", "ca")
			ops := []ssp2.Operation{f.put("lists", "L1", "big"), f.put("lists", "L2", "fits")}
			for i := range 6 {
				ops = append(ops, f.put("todos", fmt.Sprint("a", i), "L1", "x"))
			}
			for i := range 5 {
				ops = append(ops, f.put("todos", fmt.Sprint("b", i), "L2", "x"))
			}
			wantApplied(t, a.push("fill", ops...))
			wantViolation(t, a, a.push("too-many", f.put("lists", "L9", "other"), delOp("lists", "L1")), 1, `{"reason":"cascade_limit"}`)
			if f.get("lists", "L1") == nil || f.get("todos", "a5") == nil || f.get("lists", "L9") != nil {
				t.Fatal("a refused cascade changed something")
			}
			wantApplied(t, a.push("at-the-cap", delOp("lists", "L2")))
			if f.get("todos", "b4") != nil {
				t.Fatal("the cascade at the cap left a child")
			}
		})
	}
}

// TestReferenceHooks: appended operations run the row validator (its
// refusal attributed to the client delete) and join the commit validator's
// operation list, after the client's, with their origin.
func TestReferenceHooks(t *testing.T) {
	var seen []engine.StagedOp
	f := newRefFixture(t, memory.New(), func(c *engine.Config) {
		c.Validators = map[string]engine.RowValidator{"todos": func(_ context.Context, w *engine.RowWrite) error {
			if w.Op == ssp2.OpDelete && w.Stored.Values[3] == "keep" {
				return &engine.Rejection{Code: "app.keep", Message: "this todo is kept"}
			}
			return nil
		}}
		c.CommitValidator = func(_ context.Context, v *engine.CommitView) error {
			seen = slices.Clone(v.Ops)
			for _, op := range v.Ops {
				if op.Table == "todos" && op.RowID == "blame" && op.Op == ssp2.OpDelete {
					return &engine.Rejection{Code: "app.blamed", OpIndex: op.OpIndex}
				}
			}
			return nil
		}
	})
	a := f.client("alice", "ca")
	wantApplied(t, a.push("fill", f.put("lists", "L1", "x"), f.put("todos", "T1", "L1", "plain"), f.put("lists", "L2", "y"),
		f.put("todos", "T2", "L2", "keep"), f.put("lists", "L3", "z"), f.put("todos", "blame", "L3", "z")))
	wantApplied(t, a.push("d1", f.put("lists", "L0", "unrelated"), delOp("lists", "L1")))
	if len(seen) != 3 || seen[2].Table != "todos" || seen[2].Op != ssp2.OpDelete || seen[2].OpIndex != 2 || seen[2].Origin != 1 || seen[2].Stored == nil {
		t.Fatalf("commit validator saw %+v, want the cascaded delete as op 2 from op 1", seen)
	}
	pr := a.push("d2", f.put("lists", "L4", "w"), delOp("lists", "L2"))
	if r := wantRejected(t, pr, "app.keep"); r.OpIndex != 1 || r.Message != "this todo is kept" {
		t.Fatalf("validator refusal of a cascaded delete: %+v", r)
	}
	// The commit validator blames the appended op: attributed to its origin.
	pr = a.push("d3", delOp("lists", "L3"))
	if r := wantRejected(t, pr, "app.blamed"); r.OpIndex != 0 {
		t.Fatalf("commit validator blaming an appended op: %+v", r)
	}
}

// refInfo reads the partition's registry entry.
func (f *fixture) info(t *testing.T) storage.PartitionInfo {
	t.Helper()
	info, err := f.store.Log.ReadPartition(context.Background(), "p1")
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// TestReferencesIntegerKeys: references between integer keys, and a
// cascade of more children than one page of the reference index (1,000)
// whose keys sort differently as numbers and as text: every child goes,
// on every backend.
func TestReferencesIntegerKeys(t *testing.T) {
	const src = `{"version":1,"tables":[
 {"name":"folders","columns":[{"name":"id","type":"integer"},{"name":"project_id","type":"string"}],"primaryKey":"id","scopes":["project:{project_id}"]},
 {"name":"files","columns":[{"name":"id","type":"integer"},{"name":"project_id","type":"string"},{"name":"folder_id","type":"integer"}],
  "primaryKey":"id","scopes":["project:{project_id}"],"references":[{"column":"folder_id","parentTable":"folders","onDelete":"CASCADE"}]}]}`
	for _, be := range crdtStores() {
		t.Run(be.name, func(t *testing.T) {
			sch, err := schema.Parse([]byte(src))
			if err != nil {
				t.Fatal(err)
			}
			f := newFixture(t, be.open(t), func(c *engine.Config) { c.Schema, c.MaxCascadeOperations = sch, 2000 })
			f.schema = sch
			a := f.client("alice", "ca")
			put := func(table string, id int64, rest ...any) ssp2.Operation {
				row := append(ssp2.Row{id, "P"}, rest...)
				b, err := ssp2.NewRowCodec(sch.Table(table).Columns).AppendSparse(nil, row, nil, 0)
				if err != nil {
					t.Fatal(err)
				}
				return ssp2.Operation{Table: table, RowID: fmt.Sprint(id), Op: ssp2.OpUpsert, Payload: b}
			}
			wantApplied(t, a.push("folders", put("folders", 7), put("folders", 70)))
			pr := a.push("orphan", put("files", 1, int64(8)))
			wantViolation(t, a, pr, 0, `{"fieldPaths":["folder_id"],"reason":"missing_parent","references":{"parent":"folders","row":"8"}}`)
			var ops []ssp2.Operation
			for i := int64(1); i <= 1100; i++ {
				ops = append(ops, put("files", i, int64(7)))
				if len(ops) == 400 {
					wantApplied(t, a.push(fmt.Sprint("fill-", i), ops...))
					ops = ops[:0]
				}
			}
			wantApplied(t, a.push("fill-end", append(ops, put("files", 5000, int64(70)))...))
			wantApplied(t, a.push("drop", ssp2.Operation{Table: "folders", RowID: "7", Op: ssp2.OpDelete}))
			var left []string
			f.inPushTx(func(ctx context.Context, tx storage.PushTx) error {
				rs, err := tx.ScanRows(ctx, storage.RowQuery{Table: sch.Table("files"), Scopes: map[string][]string{"project_id": {"P"}}, Limit: 2000})
				for _, r := range rs {
					left = append(left, r.RowID)
				}
				return err
			})
			if len(left) != 1 || left[0] != "5000" {
				t.Fatalf("files left after the cascade: %d %v", len(left), left[:min(len(left), 5)])
			}
		})
	}
}
