package schema

import (
	"errors"
	"strings"
	"testing"
)

// refSchema is a lists/todos/notes schema whose todos table carries refs
// (a JSON array of references) and whose notes table carries notes.
func refSchema(refs, notes string) string {
	return `{"version": 1, "tables": [
  {"name": "lists", "columns": [{"name": "id", "type": "string"}, {"name": "owner", "type": "string"}],
   "primaryKey": "id", "scopes": ["owner:{owner}"]},
  {"name": "todos", "columns": [{"name": "id", "type": "string"}, {"name": "owner", "type": "string"},
     {"name": "list_id", "type": "string", "nullable": true}, {"name": "must", "type": "string"}, {"name": "n", "type": "integer", "nullable": true},
     {"name": "parent_id", "type": "string", "nullable": true}],
   "primaryKey": "id", "scopes": ["owner:{owner}"], "references": ` + refs + `},
  {"name": "notes", "columns": [{"name": "id", "type": "string"}, {"name": "team", "type": "string"}, {"name": "list_id", "type": "string"}],
   "primaryKey": "id", "scopes": ["team:{team}"], "references": ` + notes + `}
]}`
}

func TestReferencesCompile(t *testing.T) {
	s, err := Parse([]byte(refSchema(`[{"column": "list_id", "parentTable": "lists", "onDelete": "CASCADE"},
	 {"column": "must", "parentTable": "lists"}, {"column": "parent_id", "parentTable": "todos", "onDelete": "SET NULL"}]`, `[]`)))
	if err != nil {
		t.Fatal(err)
	}
	todos, lists := s.Table("todos"), s.Table("lists")
	want := []struct {
		col    string
		parent string
		od     OnDelete
	}{{"list_id", "lists", Cascade}, {"must", "lists", Restrict}, {"parent_id", "todos", SetNull}}
	if len(todos.References) != len(want) {
		t.Fatalf("references %+v", todos.References)
	}
	for i, w := range want {
		r := todos.References[i]
		if todos.Columns[r.Column].Name != w.col || r.Parent.Name != w.parent || r.OnDelete != w.od {
			t.Fatalf("reference %d = %s -> %s %s, want %+v", i, todos.Columns[r.Column].Name, r.Parent.Name, r.OnDelete, w)
		}
	}
	if len(lists.ReferencedBy) != 2 || lists.ReferencedBy[0].Child != todos || len(todos.ReferencedBy) != 1 || todos.ReferencedBy[0].OnDelete != SetNull {
		t.Fatalf("referenced by: lists %+v todos %+v", lists.ReferencedBy, todos.ReferencedBy)
	}
	// The source renders them back (absent onDelete as RESTRICT), and
	// they count in the fingerprint.
	re, err := Compile(s.Source())
	if err != nil || re.Fingerprint() != s.Fingerprint() {
		t.Fatalf("source round trip: %v", err)
	}
	if got := s.Source().Tables[1].References[1].OnDelete; got != "RESTRICT" {
		t.Fatalf("rendered onDelete %q", got)
	}
	plain, err := Parse([]byte(refSchema(`[]`, `[]`)))
	if err != nil {
		t.Fatal(err)
	}
	if plain.Fingerprint() == s.Fingerprint() {
		t.Fatal("references do not change the fingerprint")
	}
	// A schema without references keeps the canonical form it had before
	// they existed: no "references" member at all.
	if strings.Contains(string(plain.Canonical()), "references") {
		t.Fatalf("canonical form of a schema without references names them: %s", plain.Canonical())
	}
	if id := todos.ReferenceIndexIdent(todos.References[0].Column); id != "5_todos_r_list_id" {
		t.Fatalf("reference index name %q", id)
	}
}

func TestReferencesRefused(t *testing.T) {
	cases := []struct {
		name, refs, notes, want string
	}{
		{"unknown column", `[{"column": "nope", "parentTable": "lists"}]`, `[]`, `table "todos": references[0]: column "nope" does not exist`},
		{"two references on one column", `[{"column": "list_id", "parentTable": "lists"}, {"column": "LIST_ID", "parentTable": "lists"}]`, `[]`, `references[1] column "list_id": declared twice`},
		{"unknown parent", `[{"column": "list_id", "parentTable": "folders"}]`, `[]`, `parent table "folders" does not exist`},
		{"type mismatch", `[{"column": "n", "parentTable": "lists"}]`, `[]`, `column "n": type integer differs from the type string of "lists"'s primary key "id"`},
		{"other scopes", `[]`, `[{"column": "list_id", "parentTable": "lists"}]`, `table "notes": references[0] column "list_id": parent table "lists" has other scope patterns (owner:{owner}) than this table (team:{team})`},
		{"set null on a non-nullable column", `[{"column": "must", "parentTable": "lists", "onDelete": "SET NULL"}]`, `[]`, `column "must": ON DELETE SET NULL needs a nullable column`},
		{"no action", `[{"column": "list_id", "parentTable": "lists", "onDelete": "NO ACTION"}]`, `[]`, `onDelete "NO ACTION": must be "RESTRICT", "CASCADE" or "SET NULL"`},
		{"lower case", `[{"column": "list_id", "parentTable": "lists", "onDelete": "cascade"}]`, `[]`, `onDelete "cascade"`},
		{"set default", `[{"column": "list_id", "parentTable": "lists", "onDelete": "SET DEFAULT"}]`, `[]`, `onDelete "SET DEFAULT"`},
		{"unknown member", `[{"column": "list_id", "parentTable": "lists", "onUpdate": "CASCADE"}]`, `[]`, `unknown field "onUpdate"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(refSchema(c.refs, c.notes)))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Parse = %v, want an error containing %q", err, c.want)
			}
			var pe *PositionError
			if !errors.As(err, &pe) || pe.Line < 2 {
				t.Fatalf("error %v has no position in the file", err)
			}
		})
	}
	// The error points at the child table's object.
	_, err := Parse([]byte(refSchema(`[]`, `[{"column": "list_id", "parentTable": "lists"}]`)))
	var pe *PositionError
	if !errors.As(err, &pe) || pe.Line != 8 || pe.Column != 3 {
		t.Fatalf("position of the notes table's error: %v", err)
	}
}
