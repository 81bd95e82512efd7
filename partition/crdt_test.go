package partition

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
)

func crdtTable(t *testing.T) *schema.Table {
	t.Helper()
	s, err := schema.ParseWith([]byte(`{"version":1,"tables":[
	 {"name":"notes","columns":[{"name":"id","type":"string"},{"name":"p","type":"string"},{"name":"n","type":"integer","nullable":true},{"name":"f","type":"float"},
	   {"name":"b","type":"boolean"},{"name":"j","type":"json"},{"name":"raw","type":"bytes"},
	   {"name":"doc","type":"crdt","nullable":true,"crdtType":"concat"},{"name":"other","type":"crdt","nullable":true,"crdtType":"none"}],
	  "primaryKey":"id","scopes":["p:{p}"]}]}`), schema.Options{CRDTTypes: []string{"concat", "none"}})
	if err != nil {
		t.Fatal(err)
	}
	return s.Table("notes")
}

// TestCheckMergers: every crdt column's crdtType must have a merger; the
// refusal names the table, the column and the crdtType (SPEC §5.10.1).
func TestCheckMergers(t *testing.T) {
	sch, err := schema.ParseWith([]byte(`{"version":1,"tables":[
	 {"name":"plain","columns":[{"name":"id","type":"string"}],"primaryKey":"id","scopes":["p:{id}"]},
	 {"name":"notes","columns":[{"name":"id","type":"string"},{"name":"doc","type":"crdt","crdtType":"concat"},{"name":"other","type":"crdt","nullable":true,"crdtType":"none"}],
	  "primaryKey":"id","scopes":["p:{id}"]}]}`), schema.Options{CRDTTypes: []string{"concat", "none"}})
	if err != nil {
		t.Fatal(err)
	}
	concat := MergerFunc(func(a, b []byte) ([]byte, error) { return append(append([]byte{}, a...), b...), nil })
	cases := []struct {
		name    string
		mergers map[string]Merger
		want    string // "" when accepted
	}{
		{"every crdtType registered", map[string]Merger{"concat": concat, "none": concat}, ""},
		{"no registry", nil, `table "notes" column "doc": crdtType "concat" has no registered merger`},
		{"second column unregistered", map[string]Merger{"concat": concat}, `table "notes" column "other": crdtType "none" has no registered merger`},
		{"nil merger", map[string]Merger{"concat": concat, "none": nil}, `column "other": crdtType "none"`},
		{"other types only", map[string]Merger{"yjs-doc": concat}, `column "doc": crdtType "concat"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckMergers(sch, c.mergers)
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to contain %q", err, c.want)
			}
		})
	}
	if err := CheckMergers(schema.MustDemo(), nil); err != nil {
		t.Fatalf("a schema without crdt columns needs no merger: %v", err)
	}
}

func TestMergeCRDTColumns(t *testing.T) {
	tb := crdtTable(t)
	concat := MergerFunc(func(s, in []byte) ([]byte, error) { return append(append([]byte{}, s...), in...), nil })
	boom := MergerFunc(func([]byte, []byte) ([]byte, error) { return nil, errors.New("boom") })
	row := func(doc, other any) ssp2.Row {
		return ssp2.Row{"r", "P", nil, 0.0, false, json.RawMessage(`1`), []byte{}, doc, other}
	}
	all := ssp2.FullColumnSet(9)
	noDoc := ssp2.FullColumnSet(9)
	noDoc[0] &^= 1 << 7 // column 7 (doc) absent
	cases := []struct {
		name          string
		mergers       map[string]Merger
		stored, in    ssp2.Row
		present       ssp2.ColumnSet
		wantDoc       any
		wantOther     any
		wantRejection bool
		wantCause     bool
	}{
		{"insert merges with nil", map[string]Merger{"concat": concat}, nil, row([]byte("a"), nil), all, []byte("a"), nil, false, false},
		{"update merges stored and incoming", map[string]Merger{"concat": concat}, row([]byte("a"), nil), row([]byte("b"), nil), all, []byte("ab"), nil, false, false},
		{"present NULL clears", nil, row([]byte("a"), []byte("o")), row(nil, nil), all, nil, nil, false, false},
		{"NULL incoming on insert stays NULL", nil, nil, row(nil, nil), all, nil, nil, false, false},
		{"absent column is not merged", map[string]Merger{"concat": concat}, row([]byte("a"), nil), row([]byte("a"), nil), noDoc, []byte("a"), nil, false, false},
		{"missing merger", map[string]Merger{"concat": concat}, nil, row([]byte("a"), []byte("o")), all, nil, nil, true, false},
		{"no registry", nil, nil, row([]byte("a"), nil), all, nil, nil, true, false},
		{"failing merger", map[string]Merger{"concat": boom}, nil, row([]byte("a"), nil), all, nil, nil, true, true},
		{"panicking merger", map[string]Merger{"concat": MergerFunc(func([]byte, []byte) ([]byte, error) { panic("boom") })}, nil, row([]byte("a"), nil), all, nil, nil, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := append(ssp2.Row(nil), c.in...)
			out, _, rej, cause := MergeCRDTColumns(tb, c.mergers, c.stored, c.in, c.present)
			if (rej != nil) != c.wantRejection || (cause != nil) != c.wantCause {
				t.Fatalf("rejection %v cause %v; want rejection %v cause %v", rej, cause, c.wantRejection, c.wantCause)
			}
			for i := range in {
				if !equalValue(in[i], c.in[i]) {
					t.Fatalf("the incoming row was modified at %d", i)
				}
			}
			if rej != nil {
				if rej.Code != syncerr.CRDTMergeFailed {
					t.Fatalf("code %s", rej.Code)
				}
				return
			}
			for i, want := range map[int]any{7: c.wantDoc, 8: c.wantOther} {
				if want == nil {
					if out[i] != nil {
						t.Fatalf("column %d = %q, want NULL", i, out[i])
					}
				} else if !bytes.Equal(out[i].([]byte), want.([]byte)) {
					t.Fatalf("column %d = %q, want %q", i, out[i], want)
				}
			}
		})
	}
}
