package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// serve refuses a schema that would start silently wrong (issue 31) with
// exit 2 and the compile error on stderr, before any database is created.
func TestServeRefusesSilentlyWrongSchemas(t *testing.T) {
	table := func(name, extra string) string {
		return `{"name":"` + name + `","columns":[{"name":"id","type":"string"},{"name":"p","type":"string"}],"primaryKey":"id","scopes":["p:{p}"]` + extra + `}`
	}
	doc := func(tables ...string) string { return `{"version":1,"tables":[` + strings.Join(tables, ",") + `]}` }
	cases := []struct{ name, schema, want string }{
		{"tables equal ignoring case", doc(table("Items", ""), table("items", "")), `table "items": same name as table "Items" ignoring case`},
		{"reserved synclane_", doc(table("synclane_segments", "")), `table "synclane_segments": name: prefixes`},
		{"trailing data", doc(table("t", "")) + `{"version":2}`, "unexpected data after the schema object"},
		{"index over the column limit", doc(table("t", `,"indexes":[{"name":"big","columns":[`+strings.TrimSuffix(strings.Repeat(`"p",`, 32), ",")+`]}]`)), `indexes[0] "big": 32 columns, at most 31`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "schema.json")
			if err := os.WriteFile(file, []byte(c.schema), 0o600); err != nil {
				t.Fatal(err)
			}
			data := t.TempDir()
			code, _, stderr := runCmdEnv(t, nil, "serve", "--listen", "127.0.0.1:0", "--data", data, "--schema", file)
			if code != 2 || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr %s; want 2 and %q", code, stderr, c.want)
			}
			if entries, err := os.ReadDir(data); err != nil || len(entries) != 0 {
				t.Fatalf("the data directory holds %v (%v), want nothing", entries, err)
			}
		})
	}
}

// A schema edited at the same version stops serve at startup, saying to
// bump the version; the database keeps the schema it had.
func TestServeRefusesSchemaChangedAtSameVersion(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	v1 := `{"version":1,"tables":[{"name":"t","columns":[{"name":"id","type":"string"},{"name":"p","type":"string"},{"name":"n","type":"integer"}],"primaryKey":"id","scopes":["p:{p}"]}]}`
	file := filepath.Join(dir, "schema.json")
	if err := os.WriteFile(file, []byte(v1), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCmdEnv(t, nil, "prune", "--data", data, "--schema", file); code != 0 {
		t.Fatalf("prune with v1: exit %d, %s", code, stderr)
	}
	if err := os.WriteFile(file, []byte(strings.Replace(v1, `"type":"integer"`, `"type":"string"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCmdEnv(t, nil, "serve", "--listen", "127.0.0.1:0", "--data", data, "--schema", file)
	if code != 1 || !strings.Contains(stderr, "bump the schema version") {
		t.Fatalf("serve with v1 edited: exit %d, stderr %s; want 1 and a message saying to bump the version", code, stderr)
	}
	if code, _, stderr := runCmdEnv(t, nil, "prune", "--data", data, "--schema", file); code == 0 || !strings.Contains(stderr, "bump the schema version") {
		t.Fatalf("prune with v1 edited: exit %d, stderr %s", code, stderr)
	}
}
