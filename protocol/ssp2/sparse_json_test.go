package ssp2

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestSparseJSON: every valid sparse payload renders per §11.1 rule 11,
// parses back to the same columns and row, and that row encodes to the
// payload's bytes.
func TestSparseJSON(t *testing.T) {
	for _, c := range sparseCases() {
		if c.reason != "" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			codec := NewRowCodec(c.cols)
			sr, err := codec.DecodeSparse(c.in, c.pk)
			if err != nil {
				t.Fatal(err)
			}
			r, err := RenderSparseJSON(c.cols, sr)
			if err != nil {
				t.Fatalf("RenderSparseJSON: %v", err)
			}
			var doc struct {
				Columns []json.RawMessage
				Values  map[string]json.RawMessage
			}
			if err := json.Unmarshal(r, &doc); err != nil {
				t.Fatalf("rendering is not JSON: %v\n%s", err, r)
			}
			if len(doc.Columns) != len(c.cols) || len(doc.Values) != c.pres.Len() {
				t.Fatalf("rendering has %d columns and %d values, want %d and %d:\n%s", len(doc.Columns), len(doc.Values), len(c.cols), c.pres.Len(), r)
			}
			for i, col := range c.cols {
				if _, ok := doc.Values[col.Name]; ok != c.pres.Has(i) {
					t.Fatalf("column %q has a key: %v, present: %v", col.Name, ok, c.pres.Has(i))
				}
			}
			vals, err := RenderSparseValuesJSON(c.cols, sr)
			if err != nil || !bytes.HasSuffix(r, append(append([]byte(`"values":`), vals...), '}')) {
				t.Fatalf("RenderSparseValuesJSON = %s, %v; not the rendering's values", vals, err)
			}
			cols, back, err := ParseSparseJSON(r)
			if err != nil {
				t.Fatalf("ParseSparseJSON: %v", err)
			}
			if !reflect.DeepEqual(cols, c.cols) || !reflect.DeepEqual(back.Row, c.row) || !bytes.Equal(back.Present, c.pres) {
				t.Fatalf("parsed\n%#v\n%#v %x\nwant\n%#v %x", cols, back.Row, back.Present, c.row, c.pres)
			}
			out, err := NewRowCodec(cols).AppendSparse(nil, back.Row, back.Present, c.pk)
			if err != nil || !bytes.Equal(out, c.in) {
				t.Fatalf("encoding the parsed rendering = %x, %v; want %x", out, err, c.in)
			}
		})
	}
}

// The rendering of the sparse-row vector's payload, spelled out: columns
// as rule-8 objects, values in column order, present only, NULL as null,
// json embedded.
func TestRenderSparseJSONExact(t *testing.T) {
	cols := []Column{{Name: "id", Type: TypeString}, {Name: "title", Type: TypeString, Nullable: true},
		{Name: "n", Type: TypeInteger, Nullable: true}, {Name: "meta", Type: TypeJSON, Nullable: true}, {Name: "blob", Type: TypeBytes, Nullable: true}}
	sr := SparseRow{Row: Row{"n-1", nil, int64(99), json.RawMessage(`{"tags":["a"]}`), []byte{0xfe}}, Present: ColumnSet{0x1b}}
	got, err := RenderSparseJSON(cols, sr)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"columns":[{"name":"id","type":"string","nullable":false},{"name":"title","type":"string","nullable":true},` +
		`{"name":"n","type":"integer","nullable":true},{"name":"meta","type":"json","nullable":true},{"name":"blob","type":"bytes","nullable":true}],` +
		`"values":{"id":"n-1","title":null,"meta":{"tags":["a"]},"blob":"/g=="}}`
	if string(got) != want {
		t.Fatalf("rendering\n got %s\nwant %s", got, want)
	}
}

func TestSparseJSONRefusals(t *testing.T) {
	cols := []Column{{Name: "id", Type: TypeString}, {Name: "n", Type: TypeInteger, Nullable: true}}
	for _, c := range []struct {
		name string
		sr   SparseRow
		want string
	}{
		{"a row of another width", SparseRow{Row: Row{"r"}, Present: ColumnSet{0x01}}, "row has 1 values for 2 columns"},
		{"no presence set", SparseRow{Row: Row{"r", nil}}, "presence set does not fit 2 columns"},
		{"a presence padding bit", SparseRow{Row: Row{"r", nil}, Present: ColumnSet{0x05}}, "presence set does not fit 2 columns"},
		{"a value of an unknown Go type", SparseRow{Row: Row{"r", int32(1)}, Present: ColumnSet{0x03}}, "unsupported value type int32"},
	} {
		if _, err := RenderSparseJSON(cols, c.sr); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: RenderSparseJSON: %v, want %q", c.name, err, c.want)
		}
		if _, err := RenderSparseValuesJSON(cols, c.sr); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: RenderSparseValuesJSON: %v, want %q", c.name, err, c.want)
		}
	}
	colsJSON := `[{"name":"id","type":"string","nullable":false},{"name":"n","type":"integer","nullable":true}]`
	for _, c := range []struct {
		name, in, want string
	}{
		{"not an object", `[]`, "expected a JSON object"},
		{"no columns", `{"values":{"id":"r"}}`, `missing "columns"`},
		{"no values", `{"columns":` + colsJSON + `}`, `missing "values"`},
		{"an unknown member", `{"columns":` + colsJSON + `,"values":{"id":"r"},"serverVersion":1}`, "unexpected field(s) serverVersion"},
		{"an unknown column type", `{"columns":[{"name":"id","type":"text","nullable":false}],"values":{}}`, `unknown column type "text"`},
		{"a key that names no column", `{"columns":` + colsJSON + `,"values":{"id":"r","m":1}}`, "unexpected field(s) m"},
		{"a value of the wrong JSON type", `{"columns":` + colsJSON + `,"values":{"id":"r","n":"7"}}`, `"n" must be an integer`},
		{"values not an object", `{"columns":` + colsJSON + `,"values":[1]}`, "values: expected a JSON object"},
	} {
		if _, _, err := ParseSparseJSON([]byte(c.in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: ParseSparseJSON: %v, want %q", c.name, err, c.want)
		}
	}
	// A values object without the primary key parses (the set is what the
	// keys say) and is refused by the encoder.
	sr, err := ParseSparseValuesJSON("op", cols, []byte(`{"n":null}`))
	if err != nil || !bytes.Equal(sr.Present, ColumnSet{0x02}) || sr.Row[1] != nil {
		t.Fatalf("ParseSparseValuesJSON = %#v, %v", sr, err)
	}
	if _, err := NewRowCodec(cols).AppendSparse(nil, sr.Row, sr.Present, 0); err == nil || !strings.Contains(err.Error(), "primary-key column must be present") {
		t.Fatalf("AppendSparse without the primary key: %v", err)
	}
	if _, err := ParseSparseValuesJSON("frames[1].operations[0]", cols, []byte(`{"id":1}`)); err == nil || !strings.Contains(err.Error(), `frames[1].operations[0].values: "id" must be a string`) {
		t.Fatalf("ParseSparseValuesJSON names the object: %v", err)
	}
}
