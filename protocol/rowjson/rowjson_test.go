package rowjson

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
)

var demoCodec = ssp2.NewRowCodec(schema.MustDemo().Table("todos").Columns)

func todoRow(t *testing.T, id string, done bool) []byte {
	t.Helper()
	b, err := demoCodec.Append(nil, ssp2.Row{id, "l1", "title " + id, done, int64(3), int64(1700000000000)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A COMMIT's rows expand in place (members keep their order) and collapse
// back to the same bytes; a change of a table the schema lacks stays
// base64 with a note naming it.
func TestExpandCollapseCommit(t *testing.T) {
	one, v1 := int64(1), int32(1)
	m := &ssp2.Message{WireVersion: 2, Kind: ssp2.KindResponse, Frames: []ssp2.Frame{
		&ssp2.RespHeader{LatestSchemaVersion: &v1, LogEpoch: "0123456789abcdef0123456789abcdef"},
		&ssp2.SubStart{ID: "s", Status: ssp2.SubActive},
		&ssp2.Commit{CommitSeq: 5, ActorID: "ada", Tables: []string{"todos", "ghosts"}, Changes: []ssp2.Change{
			{TableIndex: 0, RowID: "a", Op: ssp2.OpUpsert, RowVersion: &one, Scopes: map[string]string{"list_id": "l1"}, Row: todoRow(t, "a", true)},
			{TableIndex: 1, RowID: "g", Op: ssp2.OpUpsert, RowVersion: &one, Scopes: map[string]string{}, Row: []byte{0}},
			{TableIndex: 0, RowID: "b", Op: ssp2.OpDelete, Scopes: map[string]string{"list_id": "l1"}},
		}},
		&ssp2.SubEnd{NextCursor: 5},
	}}
	r, err := ssp2.RenderJSON(m)
	if err != nil {
		t.Fatal(err)
	}
	var notes []string
	x, err := Expand(r, schema.MustDemo(), func(n string) { notes = append(notes, n) })
	if err != nil {
		t.Fatal(err)
	}
	wantChange := `{"tableIndex":0,"rowId":"a","op":"upsert","rowVersion":1,"scopes":{"list_id":"l1"},"values":{"id":"a","list_id":"l1","title":"title a","done":true,"position":3,"updated_at_ms":1700000000000}}`
	if !bytes.Contains(x, []byte(wantChange)) {
		t.Fatalf("expanded:\n%s\nlacks\n%s", x, wantChange)
	}
	if !bytes.Contains(x, []byte(`"rowId":"g","op":"upsert","rowVersion":1,"scopes":{},"row":"AA=="`)) {
		t.Fatalf("the ghosts change is not left as it was:\n%s", x)
	}
	if len(notes) != 1 || notes[0] != `frames[2].changes[1]: table "ghosts" is not in the schema` {
		t.Fatalf("notes %q", notes)
	}
	back, err := Collapse(x, schema.MustDemo())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, r) {
		t.Fatalf("collapse does not give the rendering back:\n got %s\nwant %s", back, r)
	}
}

func TestCollapseErrors(t *testing.T) {
	for _, tc := range []struct{ name, rendering, want string }{
		{"not an object", `[1]`, "expected a JSON object"},
		{"frames not a list", `{"frames":{}}`, "frames must be an array"},
		{"unknown table", `{"frames":[{"type":"PUSH_COMMIT","operations":[{"table":"x","values":{}}]}]}`, `frames[0].operations[0]: table "x" is not in the schema`},
		{"tableIndex out of range", `{"frames":[{"type":"COMMIT","tables":["todos"],"changes":[{"tableIndex":1,"values":{}}]}]}`, `frames[0].changes[0]: tableIndex does not name one of the commit's tables`},
		{"extra column", `{"frames":[{"type":"PUSH_COMMIT","operations":[{"table":"todos","values":{"id":"a","list_id":"l","title":"t","done":false,"position":1,"updated_at_ms":2,"colour":"red"}}]}]}`, `colour`},
		{"bad segment", `{"frames":[{"type":"SEGMENT_INLINE","segment":{"magic":"SSP2"}}]}`, `frames[0].segment`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Collapse([]byte(tc.rendering), schema.MustDemo())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// An inline segment expands to its rendering; CheckSegment tells a
// segment whose columns are not the schema's.
func TestSegmentAndCheck(t *testing.T) {
	sb := ssp2.NewSegmentBuilder("todos", 1, schema.MustDemo().Table("todos").Columns)
	if err := sb.AddRow(2, ssp2.Row{"a", "l1", "t", false, int64(1), int64(2)}); err != nil {
		t.Fatal(err)
	}
	seg := sb.Finish()
	r := []byte(`{"frames":[{"type":"SEGMENT_INLINE","payload":"` + base64.StdEncoding.EncodeToString(seg) + `"}]}`)
	x, err := Expand(r, schema.MustDemo(), func(n string) { t.Errorf("note %q", n) })
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(x, []byte(`"segment":{"magic":"SSG2"`)) || !bytes.Contains(x, []byte(`{"serverVersion":2,"values":{"id":"a",`)) {
		t.Fatalf("expanded:\n%s", x)
	}
	if back, err := Collapse(x, schema.MustDemo()); err != nil || !bytes.Equal(back, r) {
		t.Fatalf("collapse: %v\n%s", err, back)
	}
	s, err := ssp2.DecodeSegment(seg)
	if err != nil {
		t.Fatal(err)
	}
	if n := CheckSegment(schema.MustDemo(), s); n != "" {
		t.Fatalf("the demo's own segment: %q", n)
	}
	s.Columns[3].Nullable = true
	if n := CheckSegment(schema.MustDemo(), s); !strings.Contains(n, `segment columns of table "todos" differ`) {
		t.Fatalf("changed columns: %q", n)
	}
	s.Table = "ghosts"
	if n := CheckSegment(schema.MustDemo(), s); n != `segment table "ghosts" is not in the schema` {
		t.Fatalf("unknown table: %q", n)
	}
}

// At wire v3 a push payload is a sparse row: it expands to the present
// columns only and collapses back to the same bytes; the same "values"
// in a v2 rendering name a full row, so a missing column is an error
// there. COMMIT rows stay full rows at v3.
func TestExpandCollapseSparsePush(t *testing.T) {
	epoch := "0123456789abcdef0123456789abcdef"
	patch, err := demoCodec.AppendSparse(nil, ssp2.Row{"a", nil, "renamed", nil, nil, nil}, ssp2.ColumnSet{0x05}, 0)
	if err != nil {
		t.Fatal(err)
	}
	full, err := demoCodec.AppendSparse(nil, ssp2.Row{"b", "l1", "title b", true, int64(3), int64(1700000000000)}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	base := int64(4)
	m := &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: "c", SchemaVersion: 1, LogEpoch: &epoch},
		&ssp2.PushCommit{ClientCommitID: "cc", Operations: []ssp2.Operation{
			{Table: "todos", RowID: "a", Op: ssp2.OpUpsert, BaseVersion: &base, Payload: patch},
			{Table: "todos", RowID: "b", Op: ssp2.OpUpsert, Payload: full},
			{Table: "todos", RowID: "c", Op: ssp2.OpDelete},
		}},
	}}
	r, err := ssp2.RenderJSON(m)
	if err != nil {
		t.Fatal(err)
	}
	x, err := Expand(r, schema.MustDemo(), func(n string) { t.Errorf("note: %s", n) })
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`{"table":"todos","rowId":"a","op":"upsert","baseVersion":4,"values":{"id":"a","title":"renamed"}}`,
		`{"table":"todos","rowId":"b","op":"upsert","values":{"id":"b","list_id":"l1","title":"title b","done":true,"position":3,"updated_at_ms":1700000000000}}`,
		`{"table":"todos","rowId":"c","op":"delete"}`,
	} {
		if !bytes.Contains(x, []byte(want)) {
			t.Fatalf("expanded:\n%s\nlacks\n%s", x, want)
		}
	}
	back, err := Collapse(x, schema.MustDemo())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, r) {
		t.Fatalf("collapse does not give the rendering back:\n got %s\nwant %s", back, r)
	}
	// The patch's values in a v2 rendering: a full row lacks columns.
	v2 := bytes.Replace(x, []byte(`"wireVersion":3`), []byte(`"wireVersion":2`), 1)
	if _, err := Collapse(v2, schema.MustDemo()); err == nil || !strings.Contains(err.Error(), `frames[1].operations[0].values: missing "list_id"`) {
		t.Fatalf("a v2 payload with two columns: %v", err)
	}
	// At v3 the primary key must be present, and a NULL needs a nullable
	// column.
	for _, c := range []struct{ from, to, want string }{
		{`"values":{"id":"a","title":"renamed"}`, `"values":{"title":"renamed"}`, `frames[1].operations[0].values (table "todos", a sparse row): ssp2: cannot encode: the primary-key column must be present`},
		{`"values":{"id":"a","title":"renamed"}`, `"values":{"id":"a","title":null}`, `column "title" is not nullable`},
		{`"values":{"id":"a","title":"renamed"}`, `"values":{"id":"a","colour":"red"}`, `unexpected field(s) colour`},
	} {
		if _, err := Collapse(bytes.Replace(x, []byte(c.from), []byte(c.to), 1), schema.MustDemo()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.to, err, c.want)
		}
	}
	// A payload that is not a sparse row of its table stays base64, with
	// a note.
	bad := bytes.Replace(r, []byte(base64.StdEncoding.EncodeToString(patch)), []byte(base64.StdEncoding.EncodeToString([]byte{0x04, 0x00})), 1)
	var notes []string
	if _, err := Expand(bad, schema.MustDemo(), func(n string) { notes = append(notes, n) }); err != nil {
		t.Fatal(err)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], `frames[1].operations[0].payload is not a sparse row of table "todos" in the schema`) || !strings.Contains(notes[0], `primary-key column "id" is not present`) {
		t.Fatalf("notes %q", notes)
	}
}
