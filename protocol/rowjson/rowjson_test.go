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
