package schema

import (
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
)

func TestDemoCompiles(t *testing.T) {
	s := MustDemo()
	tb := s.Table("todos")
	if s.Version != 1 || tb == nil || len(tb.Columns) != 6 || tb.Columns[tb.PK].Name != "id" {
		t.Fatalf("demo schema: %+v", tb)
	}
	if sv := tb.ScopeVar("list_id"); sv == nil || sv.Prefix != "list" || tb.Columns[sv.Column].Name != "list_id" {
		t.Fatalf("demo scope: %+v", sv)
	}
	if tb.Columns[3].Type != ssp2.TypeBoolean || !s.DeclaresVar("list_id") || s.DeclaresVar("nope") {
		t.Fatal("demo types or vars wrong")
	}
}

func TestCompileErrorsNameTableAndField(t *testing.T) {
	table := func(body string) string { return `{"version":1,"tables":[` + body + `]}` }
	cases := []struct {
		name, src, want string
	}{
		{"version", `{"version":0,"tables":[]}`, "version must be >= 1"},
		{"no tables", `{"version":1,"tables":[]}`, "at least one table"},
		{"unknown field", `{"version":1,"tables":[],"extra":1}`, "unknown field"},
		{"bad table name", table(`{"name":"1x","columns":[{"name":"id","type":"string"}],"primaryKey":"id","scopes":["a:{id}"]}`), `table "1x": name`},
		{"reserved table", table(`{"name":"sync_x","columns":[{"name":"id","type":"string"}],"primaryKey":"id","scopes":["a:{id}"]}`), "reserved"},
		{"unknown type", table(`{"name":"t","columns":[{"name":"id","type":"uuid"}],"primaryKey":"id","scopes":["a:{id}"]}`), `table "t": columns[0] "id": unknown type "uuid"`},
		{"duplicate column", table(`{"name":"t","columns":[{"name":"id","type":"string"},{"name":"ID","type":"string"}],"primaryKey":"id","scopes":["a:{id}"]}`), "declared twice"},
		{"missing pk", table(`{"name":"t","columns":[{"name":"id","type":"string"}],"primaryKey":"nope","scopes":["a:{id}"]}`), `primaryKey "nope": no such column`},
		{"nullable pk", table(`{"name":"t","columns":[{"name":"id","type":"string","nullable":true}],"primaryKey":"id","scopes":["a:{id}"]}`), `primaryKey "id": must be a non-nullable column`},
		{"nullable integer pk", table(`{"name":"t","columns":[{"name":"id","type":"integer","nullable":true},{"name":"p","type":"string"}],"primaryKey":"id","scopes":["a:{p}"]}`), `primaryKey "id": must be a non-nullable column`},
		{"float pk", table(`{"name":"t","columns":[{"name":"id","type":"float"},{"name":"p","type":"string"}],"primaryKey":"id","scopes":["a:{p}"]}`), `table "t": primaryKey "id": a float column cannot be a primary key`},
		{"bytes pk", table(`{"name":"t","columns":[{"name":"id","type":"bytes"},{"name":"p","type":"string"}],"primaryKey":"id","scopes":["a:{p}"]}`), `table "t": primaryKey "id": a bytes column cannot be a primary key`},
		{"blob_ref pk", table(`{"name":"t","columns":[{"name":"id","type":"blob_ref"},{"name":"p","type":"string"}],"primaryKey":"id","scopes":["a:{p}"]}`), `table "t": primaryKey "id": a blob_ref column cannot be a primary key`},
		{"crdt pk", table(`{"name":"t","columns":[{"name":"id","type":"crdt","crdtType":"yjs-doc"},{"name":"p","type":"string"}],"primaryKey":"id","scopes":["a:{p}"]}`), `table "t": primaryKey "id": a crdt column cannot be a primary key`},
		{"float pk in a later table", table(`{"name":"ok","columns":[{"name":"id","type":"integer"},{"name":"p","type":"string"}],"primaryKey":"id","scopes":["a:{p}"]},{"name":"m","columns":[{"name":"p","type":"string"},{"name":"v","type":"float"}],"primaryKey":["v"],"scopes":["a:{p}"]}`), `table "m": primaryKey "v": a float column cannot be a primary key`},
		{"composite pk", table(`{"name":"t","columns":[{"name":"id","type":"string"}],"primaryKey":["id","x"],"scopes":["a:{id}"]}`), "composite"},
		{"no scopes", table(`{"name":"t","columns":[{"name":"id","type":"string"}],"primaryKey":"id","scopes":[]}`), "at least one scope"},
		{"bad pattern", table(`{"name":"t","columns":[{"name":"id","type":"string"}],"primaryKey":"id","scopes":["project-{id}"]}`), "prefix:{var}"},
		{"scope column missing", table(`{"name":"t","columns":[{"name":"id","type":"string"}],"primaryKey":"id","scopes":["p:{project_id}"]}`), `column "project_id" does not exist`},
		{"scope column type", table(`{"name":"t","columns":[{"name":"id","type":"string"},{"name":"f","type":"float"}],"primaryKey":"id","scopes":["p:{f}"]}`), "must be string or integer"},
		{"index column", table(`{"name":"t","columns":[{"name":"id","type":"string"}],"primaryKey":"id","scopes":["a:{id}"],"indexes":[{"name":"i","columns":["z"]}]}`), `indexes[0] "i": column "z"`},
		{"crdtType on a string", table(`{"name":"t","columns":[{"name":"id","type":"string"},{"name":"x","type":"string","crdtType":"yjs-doc"}],"primaryKey":"id","scopes":["a:{id}"]}`), `columns[1] "x": crdtType is only for crdt columns`},
		{"encrypted crdt", table(`{"name":"t","columns":[{"name":"id","type":"string"},{"name":"d","type":"crdt","encrypted":true,"crdtType":"yjs-doc"}],"primaryKey":"id","scopes":["a:{id}"]}`), "crdt column cannot be encrypted"},
		{"crdt without crdtType", table(`{"name":"notes","columns":[{"name":"id","type":"string"},{"name":"doc","type":"crdt","nullable":true}],"primaryKey":"id","scopes":["a:{id}"]}`), `table "notes": columns[1] "doc": a crdt column needs a crdtType`},
		{"crdt with empty crdtType", table(`{"name":"notes","columns":[{"name":"id","type":"string"},{"name":"doc","type":"crdt","crdtType":""}],"primaryKey":"id","scopes":["a:{id}"]}`), `table "notes": columns[1] "doc": a crdt column needs a crdtType`},
		{"crdt with blank crdtType", table(`{"name":"notes","columns":[{"name":"id","type":"string"},{"name":"doc","type":"crdt","crdtType":"  "}],"primaryKey":"id","scopes":["a:{id}"]}`), `table "notes": columns[1] "doc": a crdt column needs a crdtType`},
		{"crdt without crdtType in a later table", table(`{"name":"t","columns":[{"name":"id","type":"string"},{"name":"d","type":"crdt","crdtType":"yjs-doc"}],"primaryKey":"id","scopes":["a:{id}"]},{"name":"docs","columns":[{"name":"id","type":"string"},{"name":"title","type":"string"},{"name":"body","type":"crdt"}],"primaryKey":"id","scopes":["a:{id}"]}`), `table "docs": columns[2] "body": a crdt column needs a crdtType`},
		{"encrypted pk", table(`{"name":"t","columns":[{"name":"id","type":"string","encrypted":true},{"name":"p","type":"string"}],"primaryKey":"id","scopes":["a:{p}"]}`), `primaryKey "id": cannot be encrypted`},
		{"encrypted scope", table(`{"name":"t","columns":[{"name":"id","type":"string"},{"name":"p","type":"string","encrypted":true}],"primaryKey":"id","scopes":["a:{p}"]}`), `column "p" is encrypted`},
		{"duplicate table", table(`{"name":"t","columns":[{"name":"id","type":"string"}],"primaryKey":"id","scopes":["a:{id}"]},{"name":"t","columns":[{"name":"id","type":"string"}],"primaryKey":"id","scopes":["a:{id}"]}`), "declared twice"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to mention %q", c.name, err, c.want)
		}
	}
}

func TestScopeObjectFormAndIndexes(t *testing.T) {
	s, err := Parse([]byte(`{"version":3,"tables":[{"name":"tasks","columns":[{"name":"id","type":"string"},{"name":"team","type":"integer"},{"name":"code","type":"string","nullable":true}],
	 "primaryKey":["id"],"scopes":[{"pattern":"team:{team_id}","column":"team"}],"indexes":[{"name":"by_code","columns":["code"],"unique":true}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tb := s.Table("tasks")
	if sv := tb.ScopeVar("team_id"); sv == nil || sv.Column != 1 || !tb.IsScopeColumn(1) || tb.IsScopeColumn(2) {
		t.Fatalf("object scope form: %+v", sv)
	}
	if len(tb.Indexes) != 1 || !tb.Indexes[0].Unique || tb.Indexes[0].Columns[0] != 2 || tb.Column("CODE") != 2 || tb.Column("x") != -1 {
		t.Fatalf("indexes: %+v", tb.Indexes)
	}
}

// IR-only column metadata is kept on the compiled table and never changes
// the wire columns.
func TestColumnMetadata(t *testing.T) {
	s, err := Parse([]byte(`{"version":1,"tables":[{"name":"t","columns":[
	 {"name":"id","type":"string","declaredType":"TaskId"},{"name":"p","type":"string"},
	 {"name":"secret","type":"bytes","nullable":true,"encrypted":true},
	 {"name":"doc","type":"crdt","nullable":true,"crdtType":"yjs-doc"}],
	 "primaryKey":"id","scopes":["a:{p}"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tb := s.Table("t")
	want := []ColumnMeta{{DeclaredType: "TaskId"}, {}, {Encrypted: true}, {CrdtType: "yjs-doc"}}
	if len(tb.Meta) != len(want) {
		t.Fatalf("meta %+v", tb.Meta)
	}
	for i := range want {
		if tb.Meta[i] != want[i] {
			t.Fatalf("meta[%d] = %+v, want %+v", i, tb.Meta[i], want[i])
		}
	}
	if !tb.HasEncrypted() || MustDemo().Table("todos").HasEncrypted() {
		t.Fatal("HasEncrypted is wrong")
	}
}
