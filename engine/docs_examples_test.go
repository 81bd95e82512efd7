package engine_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocSnippetsAreExamples: every line of a Go snippet in the embedding
// docs is a line of a compiled example (an example_*_test.go file), so
// the docs cannot drift from code that builds and runs. A line holding
// "/* ... */" stands for elided code and is skipped.
func TestDocSnippetsAreExamples(t *testing.T) {
	root := ".."
	var examples strings.Builder
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasPrefix(d.Name(), "example_") && strings.HasSuffix(d.Name(), "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, l := range strings.Split(string(b), "\n") {
				examples.WriteString(norm(l) + "\n")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	all := examples.String()
	block := regexp.MustCompile("(?s)```go\n(.*?)```")
	checked := 0
	for _, doc := range []string{"embedding.md", "hooks-and-operations.md"} {
		b, err := os.ReadFile(filepath.Join(root, "docs", doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range block.FindAllStringSubmatch(string(b), -1) {
			for _, l := range strings.Split(m[1], "\n") {
				n := norm(l)
				if n == "" || strings.Contains(l, "/* ... */") {
					continue
				}
				checked++
				if !strings.Contains(all, "\n"+n+"\n") && !strings.HasPrefix(all, n+"\n") {
					t.Errorf("docs/%s: snippet line not in any example_*_test.go:\n\t%s", doc, strings.TrimSpace(l))
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d snippet lines checked: the docs' snippets were not found", checked)
	}
}

// norm collapses a line's white space, so alignment differences do not count.
func norm(l string) string { return strings.Join(strings.Fields(l), " ") }
