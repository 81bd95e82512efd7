package engine_test

import (
	"slices"
	"strings"
	"testing"
)

const module = "github.com/synclane/synclane"

// TestLayering: no package imports one above it. Storage (the contract
// suite storage/storagetest included) imports no engine package, no
// partition, no actor runtime and no transport; no package under engine/
// but the admin service (engine/admin, built on an engine) imports
// package engine, so the feature services (engine/blobs, engine/segments,
// engine/retention, ...) get what they need from the engine through
// engine/access and small interfaces of their own. Direct and indirect
// imports count (tests aside); a cycle the compiler would refuse is
// reported here too (go list -e).
func TestLayering(t *testing.T) {
	imports := map[string][]string{} // package → its imports and deps
	for _, line := range strings.Split(strings.TrimSpace(goList(t, "-e", "-f",
		"{{.ImportPath}} {{join .Imports \" \"}} {{join .Deps \" \"}}", "./storage/...", "./engine/...")), "\n") {
		f := strings.Fields(line)
		imports[f[0]] = f[1:]
	}
	var bad []string
	for pkg, deps := range imports {
		rel, ok := strings.CutPrefix(pkg, module+"/")
		if !ok {
			continue
		}
		for _, d := range deps {
			drel := strings.TrimPrefix(d, module+"/")
			switch {
			case rel == "storage" || strings.HasPrefix(rel, "storage/"):
				for _, above := range []string{"engine", "partition", "actors", "transport", "cmd"} {
					if drel == above || strings.HasPrefix(drel, above+"/") {
						bad = append(bad, rel+" imports "+drel)
					}
				}
			case strings.HasPrefix(rel, "engine/") && rel != "engine/admin":
				if drel == "engine" {
					bad = append(bad, rel+" imports engine (a feature service takes interfaces, not the engine)")
				}
			}
		}
	}
	if len(imports) < 10 || imports[module+"/storage/storagetest"] == nil || imports[module+"/engine/retention"] == nil {
		t.Fatalf("go list named too few packages: %v", len(imports))
	}
	slices.Sort(bad)
	if len(bad) > 0 {
		t.Fatalf("imports against the layering:\n%s", strings.Join(slices.Compact(bad), "\n"))
	}
}
