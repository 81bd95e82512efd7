package partition

import (
	"reflect"
	"slices"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// A commit's keys are the distinct "prefix:value" of every scope variable
// stored with each of its changes (a delete's too); a change of a table or
// variable the schema does not know makes it touch any key.
func TestCommitKeys(t *testing.T) {
	s := testSchema(t)
	ch := func(op ssp2.OpKind, scopes map[string]string) storage.ChangeRecord {
		return storage.ChangeRecord{Table: "tasks", RowID: "r", Op: op, Scopes: scopes}
	}
	recs := []storage.CommitRecord{
		{Seq: 4, Changes: []storage.ChangeRecord{
			ch(ssp2.OpUpsert, map[string]string{"project_id": "p1", "team_id": "t1"}),
			ch(ssp2.OpUpsert, map[string]string{"project_id": "p1", "team_id": "t1"}),
			ch(ssp2.OpDelete, map[string]string{"project_id": "p2"}),
			ch(ssp2.OpUpsert, map[string]string{"project_id": "p1"}),
		}},
		{Seq: 5, Changes: []storage.ChangeRecord{ch(ssp2.OpDelete, map[string]string{"project_id": "p1"})}},
		{Seq: 6, Changes: []storage.ChangeRecord{{Table: "gone", RowID: "r", Op: ssp2.OpUpsert, Scopes: map[string]string{"x": "y"}}}},
		{Seq: 7, Changes: []storage.ChangeRecord{ch(ssp2.OpUpsert, map[string]string{"project_id": "p3", "nope": "v"})}},
		{Seq: 8},
	}
	got := commitKeys(s, recs)
	for i := range got {
		slices.Sort(got[i].Keys)
	}
	want := []CommitKeys{
		{Seq: 4, Keys: []string{"project:p1", "project:p2", "team:t1"}},
		{Seq: 5, Keys: []string{"project:p1"}},
		{Seq: 6, Any: true},
		{Seq: 7, Keys: []string{"project:p3"}, Any: true},
		{Seq: 8},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("commitKeys:\n got %+v\nwant %+v", got, want)
	}
}
