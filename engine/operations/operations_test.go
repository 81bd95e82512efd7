package operations

import (
	"context"
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// render writes parts back as SQL with "?" and "<table AS alias>" so the
// tests can compare the split.
func render(parts []storage.QueryPart) string {
	var b strings.Builder
	for _, p := range parts {
		switch {
		case p.Relation != nil:
			b.WriteString("<" + p.Relation.Table.Name + " AS " + p.Relation.Alias + ">")
		case p.Bind:
			b.WriteString("?")
		default:
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

func TestCompileSQL(t *testing.T) {
	s := schema.MustDemo()
	ok := []struct{ in, want string }{
		{"SELECT id FROM {todos}", "SELECT id FROM <todos AS todos>"},
		{"SELECT t.id FROM {todos AS t} WHERE t.title = ? AND t.done = ?", "SELECT t.id FROM <todos AS t> WHERE t.title = ? AND t.done = ?"},
		{"SELECT todos.id FROM {todos}", "SELECT todos.id FROM <todos AS todos>"},
		{"SELECT '{todos} ?;' AS x, \"{a}\" FROM {todos} -- {todos} ; ?\n", "SELECT '{todos} ?;' AS x, \"{a}\" FROM <todos AS todos> -- {todos} ; ?\n"},
		{"SELECT /* ; {x} */ position::text FROM {todos}", "SELECT /* ; {x} */ position::text FROM <todos AS todos>"},
		{"SELECT '{{' || 'it''s' FROM {todos} WHERE json_extract(title, '$.a') IS NULL", "SELECT '{{' || 'it''s' FROM <todos AS todos> WHERE json_extract(title, '$.a') IS NULL"},
		{"SELECT {{1}} FROM {todos} a JOIN {todos AS b} ON a.id = b.id", "SELECT {1} FROM <todos AS todos> a JOIN <todos AS b> ON a.id = b.id"},
	}
	for _, c := range ok {
		parts, _, tables, err := compileSQL(s, c.in)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if got := render(parts); got != c.want {
			t.Errorf("%q\n got %q\nwant %q", c.in, got, c.want)
		}
		if len(tables) != 1 || tables[0].Name != "todos" {
			t.Errorf("%q: tables %v", c.in, tables)
		}
	}
	bad := []string{
		"SELECT id FROM todos",                // a table outside a placeholder
		"SELECT id FROM \"todos\"",            // quoted, still the table
		"SELECT id FROM main.todos",           // schema-qualified
		"SELECT * FROM sync_commits, {todos}", // a system table
		"SELECT id FROM {todos}; DELETE FROM {todos}",
		"SELECT id FROM {todos} WHERE id = $1",
		"SELECT id FROM {todos} WHERE id = ?1",
		"SELECT id FROM {todos} WHERE id = :id",
		"SELECT id FROM {todos} WHERE id = @id",
		"SELECT 'open FROM {todos}",
		"SELECT \"open FROM {todos}",
		"SELECT /* open FROM {todos}",
		"SELECT id FROM {nope}",
		"SELECT id FROM {todos AS 1x}",
		"SELECT id FROM {todos t}",
		"SELECT id FROM {todos",
		"SELECT id} FROM {todos}",
		"SELECT 1",
	}
	for _, in := range bad {
		if _, _, _, err := compileSQL(s, in); err == nil {
			t.Errorf("%q compiled", in)
		}
	}
}

func TestRegistration(t *testing.T) {
	s := schema.MustDemo()
	yes := func(context.Context, Caller, any) (bool, error) { return true, nil }
	col := []Column{{Name: "id", Type: ssp2.TypeString}}
	cover := []Coverage{{Table: "todos", Params: map[string]string{"list_id": "list"}}}
	good := Query{ID: "q", SQL: "SELECT id FROM {todos}", Columns: col, MaxRows: 1, Coverage: cover}
	cases := []struct {
		name string
		mut  func(q *Query)
		ok   bool
	}{
		{"scoped", func(*Query) {}, true},
		{"privileged", func(q *Query) { q.Coverage, q.Authorize = nil, yes }, true},
		{"max rows 10000", func(q *Query) { q.MaxRows = 10_000 }, true},
		{"max rows 0", func(q *Query) { q.MaxRows = 0 }, false},
		{"max rows 10001", func(q *Query) { q.MaxRows = 10_001 }, false},
		{"no columns", func(q *Query) { q.Columns = nil }, false},
		{"repeated column", func(q *Query) { q.Columns = append(col, col...) }, false},
		{"empty column name", func(q *Query) { q.Columns = []Column{{Type: ssp2.TypeString}} }, false},
		{"unknown column type", func(q *Query) { q.Columns = []Column{{Name: "id"}} }, false},
		{"both modes", func(q *Query) { q.Authorize = yes }, false},
		{"neither mode", func(q *Query) { q.Coverage = nil }, false},
		{"coverage of an unread table", func(q *Query) {
			q.Coverage = append(cover, Coverage{Table: "todos", Params: map[string]string{"list_id": "x"}})
		}, false},
		{"coverage missing a variable", func(q *Query) { q.Coverage = []Coverage{{Table: "todos", Params: map[string]string{}}} }, false},
		{"coverage with an extra variable", func(q *Query) {
			q.Coverage = []Coverage{{Table: "todos", Params: map[string]string{"list_id": "l", "other": "o"}}}
		}, false},
		{"coverage of an unknown table", func(q *Query) { q.Coverage = []Coverage{{Table: "nope"}} }, false},
		{"parameters without Bind", func(q *Query) { q.SQL = "SELECT id FROM {todos} WHERE id = ?" }, false},
		{"empty ID", func(q *Query) { q.ID = "" }, false},
		{"long ID", func(q *Query) { q.ID = strings.Repeat("x", MaxIDBytes+1) }, false},
	}
	for _, c := range cases {
		q := good
		c.mut(&q)
		err := NewRegistry(s).AddQuery(q)
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v, want ok=%v", c.name, err, c.ok)
		}
	}
	reg := NewRegistry(s)
	if err := reg.AddQuery(good); err != nil {
		t.Fatal(err)
	}
	run := func(context.Context, Invocation) ([]Mutation, error) { return nil, nil }
	for _, c := range []struct {
		name string
		cmd  Command
	}{
		{"ID taken by a query", Command{ID: "q", Authorize: yes, Run: run}},
		{"no Authorize", Command{ID: "c", Run: run}},
		{"no Run", Command{ID: "c", Authorize: yes}},
	} {
		if err := reg.AddCommand(c.cmd); err == nil {
			t.Errorf("%s: registered", c.name)
		}
	}
	if err := reg.AddCommand(Command{ID: "c", Authorize: yes, Run: run}); err != nil || reg.Command("c") == nil || reg.Query("c") != nil {
		t.Fatalf("command: %v", err)
	}
	if err := reg.AddQuery(func() Query { q := good; q.ID = "c"; return q }()); err == nil {
		t.Fatal("query registered under a command's ID")
	}
}

func TestMutationRow(t *testing.T) {
	reg := NewRegistry(schema.MustDemo())
	full := map[string]any{"id": "t1", "list_id": "L", "title": "x", "done": false, "position": 1, "updated_at_ms": int64(2)}
	_, id, row, err := reg.Row(Mutation{Table: "todos", Values: full})
	if err != nil || id != "t1" || row[4] != int64(1) {
		t.Fatalf("row %v %q %v", row, id, err)
	}
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for kk, vv := range full {
			m[kk] = vv
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for _, c := range []struct {
		name string
		m    Mutation
	}{
		{"unknown table", Mutation{Table: "nope", Values: full}},
		{"unknown column", Mutation{Table: "todos", Values: with("nope", 1)}},
		{"missing non-null", Mutation{Table: "todos", Values: with("title", nil)}},
		{"wrong type", Mutation{Table: "todos", Values: with("done", "yes")}},
		{"RowID differs", Mutation{Table: "todos", RowID: "t2", Values: full}},
		{"delete without RowID", Mutation{Table: "todos", Delete: true}},
		{"delete with values", Mutation{Table: "todos", Delete: true, RowID: "t1", Values: full}},
	} {
		if _, _, _, err := reg.Row(c.m); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}

// FuzzCompileSQL: the statement splitter never panics, and what it
// accepts keeps every byte outside placeholders (brace escapes aside) and
// names known tables only.
func FuzzCompileSQL(f *testing.F) {
	for _, s := range []string{"SELECT id FROM {todos}", "SELECT '{x}' FROM {todos AS t} WHERE a = ? -- c\n",
		"SELECT {{1}} /* } */ FROM {todos}", "x::text \"q\"\"\" ? {todos}"} {
		f.Add(s)
	}
	s := schema.MustDemo()
	f.Fuzz(func(t *testing.T, in string) {
		parts, binds, tables, err := compileSQL(s, in)
		if err != nil {
			return
		}
		n := 0
		for _, p := range parts {
			if p.Bind {
				n++
			}
			if p.Relation != nil && s.Table(p.Relation.Table.Name) == nil {
				t.Fatalf("unknown table %v", p.Relation.Table)
			}
			if strings.Contains(p.Text, ";") && !strings.ContainsAny(in, "'\"-/") {
				t.Fatalf("a ';' outside literals survived in %q", in)
			}
		}
		if n != binds || len(tables) == 0 {
			t.Fatalf("binds %d/%d tables %d", n, binds, len(tables))
		}
	})
}
