package skipcheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// enables is what a skip message must contain: an environment variable of
// the test set-up, the -short flag, or "by design" / "no variable enables
// it" (a skip no setting lifts).
var enables = regexp.MustCompile(`\b(SYNCLANE_[A-Z0-9_]+|SSP2_VECTORS(_V3)?)\b|-short|by design|no variable enables it`)

// TestSkipMessagesNameTheirVariable parses every .go file of the module and
// checks the message of each Skip/Skipf call. A message that is not a
// string literal, or only partly one (built by a helper or from a
// constant), passes when its file names a SYNCLANE_REQUIRE_ variable, the
// switch that turns it into a failure.
func TestSkipMessagesNameTheirVariable(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not at %s: %v", root, err)
	}
	fset := token.NewFileSet()
	calls := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "Skip" && sel.Sel.Name != "Skipf") {
				return true
			}
			calls++
			pos := fset.Position(call.Pos())
			msg, literal := literalText(call.Args[0])
			switch {
			case literal && !enables.MatchString(msg):
				t.Errorf("%s: skip message %q names no variable that enables the test (nor -short, nor that no variable enables it)", pos, msg)
			case !literal && !strings.Contains(string(src), "SYNCLANE_REQUIRE_"):
				t.Errorf("%s: skip message built elsewhere, and the file names no SYNCLANE_REQUIRE_ variable", pos)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls == 0 {
		t.Fatal("found no Skip call at all: the walk is broken")
	}
}

// literalText returns the text of a string literal and true; false for
// anything else (a variable, a call, a + chain with a non-literal part).
func literalText(e ast.Expr) (string, bool) {
	switch v := e.(type) {
	case *ast.BasicLit:
		if v.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(v.Value)
		return s, err == nil
	case *ast.BinaryExpr:
		a, okA := literalText(v.X)
		b, okB := literalText(v.Y)
		return a + b, v.Op == token.ADD && okA && okB
	case *ast.ParenExpr:
		return literalText(v.X)
	}
	return "", false
}
