package schema

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
)

// The eligible key types compile, and the compiled table renders and
// parses its keys.
func TestEligibleKeyTypesCompile(t *testing.T) {
	for _, typ := range []string{"string", "integer", "boolean", "json"} {
		s, err := Parse([]byte(`{"version":1,"tables":[{"name":"t","columns":[{"name":"p","type":"string"},{"name":"k","type":"` + typ + `"}],"primaryKey":"k","scopes":["a:{p}"]}]}`))
		if err != nil {
			t.Fatalf("%s key: %v", typ, err)
		}
		tb := s.Table("t")
		if tb.PK != 1 || ssp2.ColumnTypeName(tb.Columns[tb.PK].Type) != typ {
			t.Fatalf("%s key: PK %d, type %v", typ, tb.PK, tb.Columns[tb.PK].Type)
		}
	}
	for typ, want := range map[ssp2.ColumnType]bool{
		ssp2.TypeString: true, ssp2.TypeInteger: true, ssp2.TypeBoolean: true, ssp2.TypeJSON: true,
		ssp2.TypeFloat: false, ssp2.TypeBytes: false, ssp2.TypeBlobRef: false, ssp2.TypeCRDT: false,
	} {
		if got := KeyTypeEligible(typ); got != want {
			t.Errorf("KeyTypeEligible(%s) = %v, want %v", ssp2.ColumnTypeName(typ), got, want)
		}
	}
}

func TestRenderKey(t *testing.T) {
	str := ssp2.Column{Name: "k", Type: ssp2.TypeString}
	num := ssp2.Column{Name: "k", Type: ssp2.TypeInteger}
	boo := ssp2.Column{Name: "k", Type: ssp2.TypeBoolean}
	jsn := ssp2.Column{Name: "k", Type: ssp2.TypeJSON}
	cases := []struct {
		name string
		c    ssp2.Column
		v    any
		want string
		ok   bool
	}{
		{"string", str, "a b", "a b", true},
		{"empty string", str, "", "", true},
		{"integer zero", num, int64(0), "0", true},
		{"integer negative", num, int64(-12), "-12", true},
		{"integer beyond 2^53", num, int64(9007199254740993), "9007199254740993", true},
		{"integer min", num, int64(math.MinInt64), "-9223372036854775808", true},
		{"true", boo, true, "true", true},
		{"false", boo, false, "false", true},
		{"json object verbatim", jsn, json.RawMessage(`{ "a": 1 }`), `{ "a": 1 }`, true},
		{"json string", jsn, json.RawMessage(`"x"`), `"x"`, true},
		{"json number", jsn, json.RawMessage(`10`), `10`, true},
		{"nil", num, nil, "", false},
		{"int on a string key", str, int64(1), "", false},
		{"string on an integer key", num, "1", "", false},
		{"string on a json key", jsn, `{}`, "", false},
		{"nil json", jsn, json.RawMessage(nil), "", false},
		{"float key", ssp2.Column{Type: ssp2.TypeFloat}, 1.5, "", false},
		{"bytes key", ssp2.Column{Type: ssp2.TypeBytes}, []byte("x"), "", false},
	}
	for _, c := range cases {
		got, ok := RenderKey(c.c, c.v)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: RenderKey = %q, %v; want %q, %v", c.name, got, ok, c.want, c.ok)
		}
		if !ok {
			continue
		}
		back, ok := ParseKey(c.c, got)
		if !ok || !keyEqual(back, c.v) {
			t.Errorf("%s: ParseKey(%q) = %#v, %v; want %#v", c.name, got, back, ok, c.v)
		}
	}
}

func TestParseKeyRefusesWhatNothingRenders(t *testing.T) {
	num := ssp2.Column{Name: "k", Type: ssp2.TypeInteger}
	boo := ssp2.Column{Name: "k", Type: ssp2.TypeBoolean}
	jsn := ssp2.Column{Name: "k", Type: ssp2.TypeJSON}
	for _, c := range []struct {
		c     ssp2.Column
		rowID string
	}{
		{num, "abc"}, {num, ""}, {num, "007"}, {num, "+7"}, {num, "-0"}, {num, " 7"}, {num, "7.0"}, {num, "1e3"},
		{num, "9223372036854775808"}, {num, "0x10"},
		{boo, "1"}, {boo, "0"}, {boo, "TRUE"}, {boo, "True"}, {boo, ""},
		{jsn, "{"}, {jsn, ""}, {jsn, "abc"}, {jsn, "\xff"}, {jsn, `"\xff"`},
		{ssp2.Column{Type: ssp2.TypeFloat}, "1.5"}, {ssp2.Column{Type: ssp2.TypeBytes}, "x"},
		{ssp2.Column{Type: ssp2.TypeBlobRef}, `{}`}, {ssp2.Column{Type: ssp2.TypeCRDT}, "x"},
	} {
		if v, ok := ParseKey(c.c, c.rowID); ok {
			t.Errorf("ParseKey(%s, %q) = %#v, want none", ssp2.ColumnTypeName(c.c.Type), c.rowID, v)
		}
	}
	if v, ok := ParseKey(ssp2.Column{Type: ssp2.TypeString}, "\xff"); !ok || v != "\xff" {
		t.Errorf("a string key is any string: %#v, %v", v, ok)
	}
}

func TestCompareRowIDs(t *testing.T) {
	mk := func(typ string) *Table {
		s, err := Parse([]byte(`{"version":1,"tables":[{"name":"t","columns":[{"name":"p","type":"string"},{"name":"k","type":"` + typ + `"}],"primaryKey":"k","scopes":["a:{p}"]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		return s.Table("t")
	}
	cases := []struct {
		typ  string
		in   []string
		want []string
	}{
		{"integer", []string{"100", "9", "-1", "10", "-20", "0"}, []string{"-20", "-1", "0", "9", "10", "100"}},
		{"integer", []string{"x", "1", "007", "2"}, []string{"1", "2", "007", "x"}}, // names no row: after, byte order
		{"string", []string{"100", "9", "10", "b", "B"}, []string{"10", "100", "9", "B", "b"}},
		{"boolean", []string{"true", "false"}, []string{"false", "true"}},
		{"json", []string{`{"a":1}`, `10`, `"s"`, `9`, `[1]`}, []string{`"s"`, `10`, `9`, `[1]`, `{"a":1}`}},
	}
	for _, c := range cases {
		tb := mk(c.typ)
		got := slices.Clone(c.in)
		slices.SortFunc(got, tb.CompareRowIDs)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s keys %q sort to %q, want %q", c.typ, c.in, got, c.want)
		}
	}
}

func TestTableRowIDAndKeyOf(t *testing.T) {
	s, err := Parse([]byte(`{"version":1,"tables":[{"name":"t","columns":[{"name":"p","type":"string"},{"name":"k","type":"integer"}],"primaryKey":"k","scopes":["a:{p}"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tb := s.Table("t")
	if id, ok := tb.RowID(ssp2.Row{"p", int64(42)}); !ok || id != "42" {
		t.Fatalf("RowID = %q, %v", id, ok)
	}
	if _, ok := tb.RowID(ssp2.Row{"p"}); ok {
		t.Fatal("RowID of a short row")
	}
	if _, ok := tb.RowID(ssp2.Row{"p", "42"}); ok {
		t.Fatal("RowID of a string in an integer key")
	}
	if v, ok := tb.KeyOf("42"); !ok || v != int64(42) {
		t.Fatalf("KeyOf = %#v, %v", v, ok)
	}
	if _, ok := tb.KeyOf("042"); ok {
		t.Fatal(`KeyOf("042") names a key`)
	}
}

// ParseKey inverts RenderKey exactly: whatever it accepts renders back to
// the same rowId, for every key type.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"0", "-1", "007", "true", "false", `{"a":1}`, ` 1`, "9223372036854775807", "abc", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rowID string) {
		for _, typ := range []ssp2.ColumnType{ssp2.TypeString, ssp2.TypeInteger, ssp2.TypeBoolean, ssp2.TypeJSON} {
			c := ssp2.Column{Name: "k", Type: typ}
			v, ok := ParseKey(c, rowID)
			if !ok {
				continue
			}
			back, ok := RenderKey(c, v)
			if !ok || back != rowID {
				t.Fatalf("%s: ParseKey(%q) = %#v renders as %q, %v", ssp2.ColumnTypeName(typ), rowID, v, back, ok)
			}
		}
		if n, err := strconv.ParseInt(rowID, 10, 64); err == nil {
			if _, ok := ParseKey(ssp2.Column{Type: ssp2.TypeInteger}, rowID); ok != (strconv.FormatInt(n, 10) == rowID) {
				t.Fatalf("integer %q: accepted %v", rowID, ok)
			}
		}
	})
}

func keyEqual(a, b any) bool {
	if x, ok := a.(json.RawMessage); ok {
		y, ok := b.(json.RawMessage)
		return ok && string(x) == string(y)
	}
	return a == b
}
