package partition

import (
	"testing"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
)

// A validator reads columns by name: the stored-to-be row's value and
// whether the operation presented the column; a delete or an unknown
// column has neither.
func TestRowWriteValueByName(t *testing.T) {
	s, err := schema.Parse([]byte(`{"version":1,"tables":[{"name":"tasks","columns":[
		{"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"title","type":"string"}],
		"primaryKey":"id","scopes":[{"pattern":"project:{project_id}","column":"project_id"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tbl := s.Table("tasks")
	present := ssp2.NewColumnSet(3)
	present.Add(0)
	present.Add(2)
	patch := &RowWrite{Table: tbl, Op: ssp2.OpUpsert, Row: ssp2.Row{"t1", "P", "new title"}, Present: present}
	del := &RowWrite{Table: tbl, Op: ssp2.OpDelete}
	for _, tc := range []struct {
		name      string
		w         *RowWrite
		col       string
		want      any
		ok, shown bool
	}{
		{"presented column", patch, "title", "new title", true, true},
		{"kept from the stored row", patch, "project_id", "P", true, false},
		{"case-insensitive", patch, "TITLE", "new title", true, true},
		{"unknown column", patch, "nope", nil, false, false},
		{"delete", del, "title", nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, ok := tc.w.Value(tc.col)
			if v != tc.want || ok != tc.ok || tc.w.Presented(tc.col) != tc.shown {
				t.Fatalf("Value(%q) = %v, %v; Presented %v; want %v, %v; %v", tc.col, v, ok, tc.w.Presented(tc.col), tc.want, tc.ok, tc.shown)
			}
		})
	}
}
