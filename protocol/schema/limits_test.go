package schema

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/yjs"
)

// tbl is one minimal table's JSON with extra fields spliced in.
func tbl(name, extraCols, extra string) string {
	return `{"name":"` + name + `","columns":[{"name":"id","type":"string"},{"name":"p","type":"string"}` + extraCols +
		`],"primaryKey":"id","scopes":["p:{p}"]` + extra + `}`
}

func doc(tables ...string) string {
	return `{"version":1,"tables":[` + strings.Join(tables, ",") + `]}`
}

func cols(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `,{"name":"c%d","type":"integer","nullable":true}`, i)
	}
	return b.String()
}

func names(n int) string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf(`"c%d"`, i))
	}
	return strings.Join(out, ",")
}

// Each finding of issue 31: a schema that would start silently wrong (or
// fail half-way through storage setup) is refused by Parse, the message
// naming the table, column or index.
func TestCompileRefusesSilentlyWrongSchemas(t *testing.T) {
	many := make([]string, MaxTables+1)
	for i := range many {
		many[i] = tbl(fmt.Sprintf("t%d", i), "", "")
	}
	cases := []struct {
		name, src string
		want      []string
	}{
		{"tables equal ignoring case", doc(tbl("Items", "", ""), tbl("items", "", "")), []string{`table "items"`, `"Items" ignoring case`}},
		{"columns equal ignoring case", doc(tbl("t", `,{"name":"Title","type":"string"},{"name":"title","type":"string"}`, "")), []string{`table "t"`, `columns[3] "title"`, `as "Title"`, "ignoring case"}},
		{"indexes equal ignoring case", doc(tbl("t", "", `,"indexes":[{"name":"ByP","columns":["p"]},{"name":"byp","columns":["p"]}]`)), []string{`table "t"`, `indexes[1] "byp"`, `as "ByP"`}},
		{"reserved sync_ table", doc(tbl("Sync_things", "", "")), []string{`table "Sync_things"`, "reserved"}},
		{"reserved synclane_ table", doc(tbl("synclane_segments", "", "")), []string{`table "synclane_segments"`, "synclane_", "reserved"}},
		{"reserved synclane_ table, upper case", doc(tbl("SYNCLANE_x", "", "")), []string{`table "SYNCLANE_x"`, "reserved"}},
		{"reserved column _sync_version", doc(tbl("t", `,{"name":"_SYNC_version","type":"integer"}`, "")), []string{`table "t"`, `"_SYNC_version"`, "reserved"}},
		{"reserved column partition_id", doc(tbl("t", `,{"name":"Partition_ID","type":"string"}`, "")), []string{`table "t"`, "reserved"}},
		{"unknown crdtType", doc(tbl("notes", `,{"name":"doc","type":"crdt","crdtType":"automerge"}`, "")), []string{`table "notes"`, `columns[2] "doc"`, `unknown crdtType "automerge"`, "yjs-doc"}},
		{"crdtType differing in case", doc(tbl("notes", `,{"name":"doc","type":"crdt","crdtType":"YJS-DOC"}`, "")), []string{`unknown crdtType "YJS-DOC"`}},
		{"trailing object", doc(tbl("t", "", "")) + `{"version":2}`, []string{"unexpected data after the schema object"}},
		{"trailing garbage", doc(tbl("t", "", "")) + ` x`, []string{"schema: parse"}},
		{"trailing bracket", doc(tbl("t", "", "")) + `]`, []string{"schema: parse"}},
		{"too many tables", doc(many...), []string{fmt.Sprintf("%d tables, at most %d", MaxTables+1, MaxTables)}},
		{"too many columns", doc(tbl("wide", cols(MaxColumns-1), "")), []string{`table "wide"`, fmt.Sprintf("%d columns, at most %d", MaxColumns+1, MaxColumns)}},
		{"too many index columns", doc(tbl("t", cols(MaxIndexColumns+1), `,"indexes":[{"name":"big","columns":[`+names(MaxIndexColumns+1)+`]}]`)), []string{`table "t"`, `indexes[0] "big"`, fmt.Sprintf("%d columns, at most %d", MaxIndexColumns+1, MaxIndexColumns)}},
		{"too many indexes", doc(tbl("t", "", `,"indexes":[`+strings.Repeat(`{"name":"i","columns":["p"]},`, MaxIndexes)+`{"name":"j","columns":["p"]}]`)), []string{`table "t"`, fmt.Sprintf("%d indexes, at most %d", MaxIndexes+1, MaxIndexes)}},
		{"table name over 63 bytes", doc(tbl(strings.Repeat("a", 64), "", "")), []string{"name: must match"}},
		{"column name over 63 bytes", doc(tbl("t", `,{"name":"`+strings.Repeat("c", 64)+`","type":"string"}`, "")), []string{"must match"}},
		{"index name over 63 bytes", doc(tbl("t", "", `,"indexes":[{"name":"`+strings.Repeat("i", 64)+`","columns":["p"]}]`)), []string{`indexes[0].name`, "must match"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.src))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q, want it to mention %q", err, w)
				}
			}
		})
	}
}

// The limits themselves are accepted, and so are names that collided in
// the old derived index names (table a__b index c, table a index b__c).
func TestCompileAcceptsAtTheLimits(t *testing.T) {
	many := make([]string, MaxTables)
	for i := range many {
		many[i] = tbl(fmt.Sprintf("t%d", i), "", "")
	}
	for name, src := range map[string]string{
		"max tables":        doc(many...),
		"max columns":       doc(tbl("wide", cols(MaxColumns-2), "")),
		"max index columns": doc(tbl("t", cols(MaxIndexColumns), `,"indexes":[{"name":"big","columns":[`+names(MaxIndexColumns)+`]}]`)),
		"63-byte names":     doc(tbl(strings.Repeat("a", 63), `,{"name":"`+strings.Repeat("c", 63)+`","type":"string"}`, `,"indexes":[{"name":"`+strings.Repeat("i", 63)+`","columns":["p"]}]`)),
		"old collision":     doc(tbl("a__b", "", `,"indexes":[{"name":"c","columns":["p"],"unique":true}]`), tbl("a", "", `,"indexes":[{"name":"b__c","columns":["p"],"unique":true}]`)),
		"custom yjs column": doc(tbl("notes", `,{"name":"doc","type":"crdt","nullable":true,"crdtType":"`+yjs.CRDTType+`"}`, "")),
	} {
		if _, err := Parse([]byte(src)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Derived index names are distinct for every (table, kind, name), start
// with a digit (never a table's name) and fit PostgreSQL's 63 bytes.
func TestIndexIdent(t *testing.T) {
	long := strings.Repeat("x", 63)
	pairs := [][3]string{
		{"a__b", "i", "c"}, {"a", "i", "b__c"}, {"a__i_b", "i", "c"}, {"a", "i", "b__i_c"},
		{"a__s_b", "i", "c"}, {"a", "s", "b__i_c"}, {"a", "s", "c"}, {"a", "i", "c"},
		{long, "i", long}, {long, "i", long[:62] + "y"}, {long, "s", long},
	}
	seen := map[string][3]string{}
	for _, p := range pairs {
		id := IndexIdent(p[0], p[1][0], p[2])
		if len(id) > MaxIdentBytes || id[0] < '0' || id[0] > '9' {
			t.Fatalf("IndexIdent%v = %q: over 63 bytes or not starting with a digit", p, id)
		}
		if prev, dup := seen[strings.ToLower(id)]; dup {
			t.Fatalf("IndexIdent%v = IndexIdent%v = %q", p, prev, id)
		}
		seen[strings.ToLower(id)] = p
	}
	if got := IndexIdent("items", KindIndex, "by_code"); got != "5_items_i_by_code" {
		t.Fatalf("IndexIdent = %q", got)
	}
}

// CRDTTypes of Options admits a host's own merger; the default admits
// only yjs-doc, which is protocol/yjs's.
func TestCompileCRDTTypes(t *testing.T) {
	if DefaultCRDTType != yjs.CRDTType {
		t.Fatalf("DefaultCRDTType %q, protocol/yjs merges %q", DefaultCRDTType, yjs.CRDTType)
	}
	src := doc(tbl("notes", `,{"name":"doc","type":"crdt","crdtType":"lines"}`, ""))
	if _, err := Parse([]byte(src)); err == nil {
		t.Fatal("unknown crdtType accepted without Options")
	}
	s, err := ParseWith([]byte(src), Options{CRDTTypes: []string{"lines"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CRDTTypes(); len(got) != 1 || got[0] != "lines" {
		t.Fatalf("CRDTTypes = %v", got)
	}
}

// The fingerprint ignores spelling and DeclaredType, and changes with
// anything that shapes storage or the wire.
func TestFingerprint(t *testing.T) {
	base := `{"version":1,"tables":[{"name":"t","columns":[{"name":"id","type":"string"},{"name":"p","type":"string"},{"name":"n","type":"integer"}],"primaryKey":"id","scopes":["p:{p}"],"indexes":[{"name":"byn","columns":["n"]}]}]}`
	fp := func(src string) string {
		t.Helper()
		s, err := Parse([]byte(src))
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		return s.Fingerprint()
	}
	want := fp(base)
	if !strings.HasPrefix(want, "sha256:") || len(want) != len("sha256:")+64 {
		t.Fatalf("fingerprint %q", want)
	}
	same := []string{
		"\n " + strings.ReplaceAll(base, ",", ", ") + "\n",
		strings.Replace(base, `"primaryKey":"id"`, `"primaryKey":["id"]`, 1),
		strings.Replace(base, `"scopes":["p:{p}"]`, `"scopes":[{"pattern":"p:{p}","column":"p"}]`, 1),
		strings.Replace(base, `{"name":"id","type":"string"}`, `{"type":"string","name":"id","declaredType":"TaskId"}`, 1),
	}
	for _, src := range same {
		if got := fp(src); got != want {
			t.Errorf("%s: fingerprint %s, want %s", src, got, want)
		}
	}
	differ := []string{
		strings.Replace(base, `"version":1`, `"version":2`, 1),
		strings.Replace(base, `{"name":"n","type":"integer"}`, `{"name":"n","type":"string"}`, 1),
		strings.Replace(base, `{"name":"n","type":"integer"}`, `{"name":"n","type":"integer","nullable":true}`, 1),
		strings.Replace(base, `{"name":"n","type":"integer"}`, `{"name":"n","type":"integer"},{"name":"m","type":"integer"}`, 1),
		strings.Replace(base, `"columns":["n"]}`, `"columns":["n"],"unique":true}`, 1),
		strings.Replace(base, `"indexes":[{"name":"byn","columns":["n"]}]`, `"indexes":[]`, 1),
		strings.Replace(base, `"scopes":["p:{p}"]`, `"scopes":["q:{p}"]`, 1),
	}
	for _, src := range differ {
		if got := fp(src); got == want {
			t.Errorf("%s: same fingerprint as the base schema", src)
		}
	}
}

// FuzzParse: Parse never panics, and a schema it accepts re-serializes to
// a Source that compiles to the same canonical form and fingerprint, and
// compiling it again is deterministic.
func FuzzParse(f *testing.F) {
	f.Add([]byte(Demo))
	f.Add([]byte(doc(tbl("a__b", "", `,"indexes":[{"name":"c","columns":["p"],"unique":true}]`), tbl("a", "", `,"indexes":[{"name":"b__c","columns":["p"]}]`))))
	f.Add([]byte(doc(tbl("Items", "", ""), tbl("items", "", ""))))
	f.Add([]byte(doc(tbl("notes", `,{"name":"doc","type":"crdt","nullable":true,"crdtType":"yjs-doc"},{"name":"s","type":"bytes","encrypted":true,"declaredType":"X"}`, `,"indexes":[{"name":"x","columns":["p","id"]}]`))))
	f.Add([]byte(doc(tbl("t", "", "")) + `{}`))
	f.Add([]byte(`{"version":2,"tables":[{"name":"t","columns":[{"name":"id","type":"string"},{"name":"team","type":"integer"}],"primaryKey":["id"],"scopes":[{"pattern":"team:{team_id}","column":"team"}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			if s != nil {
				t.Fatal("a schema and an error")
			}
			return
		}
		again, err := Parse(data)
		if err != nil || string(again.Canonical()) != string(s.Canonical()) {
			t.Fatalf("second parse differs: %v", err)
		}
		src := s.Source()
		enc, err := json.Marshal(src)
		if err != nil {
			t.Fatal(err)
		}
		re, err := ParseWith(enc, Options{CRDTTypes: s.CRDTTypes()})
		if err != nil {
			t.Fatalf("re-serialized schema refused: %v\n%s", err, enc)
		}
		if string(re.Canonical()) != string(s.Canonical()) || re.Fingerprint() != s.Fingerprint() {
			t.Fatalf("re-serialized schema compiles differently:\n%s\n%s", re.Canonical(), s.Canonical())
		}
		enc2, _ := json.Marshal(re.Source())
		if string(enc2) != string(enc) {
			t.Fatalf("Source is not stable:\n%s\n%s", enc, enc2)
		}
	})
}
