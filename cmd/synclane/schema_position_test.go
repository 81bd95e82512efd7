package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// serve with a schema file that does not parse exits 2 naming the file,
// line and column of the fault, as a compiler would.
func TestServeSchemaErrorPosition(t *testing.T) {
	cases := []struct{ name, text, want string }{
		{"unknown field", "{\n  \"version\": 1,\n  \"tables\": [\n    {\"name\": \"t\", \"colums\": []}\n  ]\n}\n", `schema.json:4:19: schema: parse: json: unknown field "colums"`},
		{"syntax", "{\n  \"version\": 1\n  \"tables\": []\n}\n", "schema.json:3:3: schema: parse: invalid character"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "schema.json")
			if err := os.WriteFile(file, []byte(c.text), 0o600); err != nil {
				t.Fatal(err)
			}
			code, _, stderr := runCmdEnv(t, nil, "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--schema", file)
			if code != 2 || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr %s; want 2 and %q", code, stderr, c.want)
			}
		})
	}
}
