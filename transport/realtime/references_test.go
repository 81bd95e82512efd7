package realtime_test

import (
	"testing"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
)

// refSchema is the demo todos table whose list_id names a row of lists
// (ON DELETE CASCADE); both tables are scoped by list.
const refSchema = `{"version":1,"tables":[
 {"name":"lists","columns":[{"name":"id","type":"string"},{"name":"list_id","type":"string"},{"name":"name","type":"string"}],
  "primaryKey":"id","scopes":["list:{list_id}"]},
 {"name":"todos","columns":[{"name":"id","type":"string"},{"name":"list_id","type":"string"},{"name":"title","type":"string"},
   {"name":"done","type":"boolean"},{"name":"position","type":"integer"},{"name":"updated_at_ms","type":"integer"}],
  "primaryKey":"id","scopes":["list:{list_id}"],"references":[{"column":"list_id","parentTable":"lists","onDelete":"CASCADE"}]}]}`

// TestCascadedDeletesReachSockets: deleting a list whose todos its
// declared reference cascades (SPEC §6.11) sends a socket following the
// list's todos one delta with every todo's delete, in the delete's
// commit, with the todo's scopes.
func TestCascadedDeletesReachSockets(t *testing.T) {
	sch, err := schema.Parse([]byte(refSchema))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, fixtureOpts{schema: sch})
	ctx := ctxT(t)
	ada := f.httpClient("ada", "a")
	lists := ssp2.NewRowCodec(sch.Table("lists").Columns)
	list, err := lists.AppendSparse(nil, ssp2.Row{"groceries", "groceries", "Groceries"}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ada.Push(ctx, &ssp2.PushCommit{ClientCommitID: "fill", Operations: []ssp2.Operation{
		{Table: "lists", RowID: "groceries", Op: ssp2.OpUpsert, Payload: list},
		{Table: "todos", RowID: "t1", Op: ssp2.OpUpsert, Payload: todo("t1", "groceries", "milk")},
		{Table: "todos", RowID: "t2", Op: ssp2.OpUpsert, Payload: todo("t2", "groceries", "eggs")},
	}}); err != nil {
		t.Fatal(err)
	}
	bob := f.follow(ctx, "bob", "groceries")
	f.waitLive(t, "bob")
	rs, err := ada.Push(ctx, &ssp2.PushCommit{ClientCommitID: "drop", Operations: []ssp2.Operation{{Table: "lists", RowID: "groceries", Op: ssp2.OpDelete}}})
	if err != nil || len(rs) != 1 || rs[0].Status != ssp2.CommitApplied {
		t.Fatalf("delete of the list: %+v %v", rs, err)
	}
	d := nextDelta(t, ctx, bob)
	cm := commits(d.Message)
	if len(cm) != 1 || cm[0].CommitSeq != *rs[0].CommitSeq || len(cm[0].Changes) != 2 {
		t.Fatalf("delta %+v, want the delete's commit with two todo deletes", cm)
	}
	for _, ch := range cm[0].Changes {
		if ch.Op != ssp2.OpDelete || (ch.RowID != "t1" && ch.RowID != "t2") || ch.Scopes["list_id"] != "groceries" {
			t.Fatalf("cascaded change %+v", ch)
		}
	}
}
