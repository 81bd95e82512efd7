package storage_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// storagePath is the import path of package storage.
const storagePath = "github.com/synclane/synclane/storage"

// Storage capabilities are roles of a storage.Backend, fixed when the
// backend is built: no production code discovers one at run time. This
// test parses every non-test Go file of the module and fails on a type
// assertion (x.(T)) or a type switch case whose type T is an interface
// declared in package storage, named directly (storage.T, under any
// import name; T inside package storage) or through a type alias of the
// same package (type A = storage.T).
func TestNoProductionAssertionOnStorageInterfaces(t *testing.T) {
	root := moduleRoot(t)
	ifaces := storageInterfaceNames(t, filepath.Join(root, "storage"))
	if !ifaces["PushTx"] || len(ifaces) < 10 {
		t.Fatalf("found %d interfaces in package storage, without PushTx: the parse is broken", len(ifaces))
	}
	fset := token.NewFileSet()
	// Files are grouped by directory (a package) so that aliases declared
	// in one file of a package are known in its others.
	pkgs := map[string][]*ast.File{}
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (name == "testdata" || name == "vendor" || name == "node_modules" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkgs[filepath.Dir(path)] = append(pkgs[filepath.Dir(path)], f)
		files++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("parsed %d files under %s: the walk is broken", files, root)
	}
	found, seen := storageAssertions(fset, pkgs, filepath.Join(root, "storage"), ifaces)
	if seen == 0 {
		t.Fatal("no type assertion found anywhere in the module: the walk is broken")
	}
	for _, f := range found {
		rel, _ := filepath.Rel(root, f)
		t.Errorf("%s: a storage capability must be a role of storage.Backend, not discovered at run time", rel)
	}
}

// storageAssertions returns, sorted, where the files of pkgs (by
// directory) type-assert to or type-switch on an interface of package
// storage (ifaces, the package living in storageDir), and how many
// assertion and case types it looked at.
func storageAssertions(fset *token.FileSet, pkgs map[string][]*ast.File, storageDir string, ifaces map[string]bool) ([]string, int) {
	var found []string
	seen := 0
	for dir, files := range pkgs {
		inStorage := dir == storageDir
		aliases := map[string]bool{} // local aliases of storage interfaces
		// isStorage reports whether the type expression names an interface
		// of package storage, given the file's names for that package.
		isStorage := func(e ast.Expr, names map[string]bool) bool {
			if p, ok := e.(*ast.ParenExpr); ok {
				e = p.X
			}
			switch x := e.(type) {
			case *ast.Ident:
				return (inStorage && ifaces[x.Name]) || aliases[x.Name]
			case *ast.SelectorExpr:
				id, ok := x.X.(*ast.Ident)
				return ok && names[id.Name] && ifaces[x.Sel.Name]
			}
			return false
		}
		// Aliases first, over every file of the package.
		for _, f := range files {
			names := storageNames(f)
			for _, d := range f.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || gd.Tok != token.TYPE {
					continue
				}
				for _, sp := range gd.Specs {
					if ts := sp.(*ast.TypeSpec); ts.Assign.IsValid() && isStorage(ts.Type, names) {
						aliases[ts.Name.Name] = true
					}
				}
			}
		}
		for _, f := range files {
			names := storageNames(f)
			ast.Inspect(f, func(n ast.Node) bool {
				switch x := n.(type) {
				case *ast.TypeAssertExpr:
					if x.Type == nil { // the x.(type) of a type switch
						return true
					}
					seen++
					if isStorage(x.Type, names) {
						found = append(found, fset.Position(x.Pos()).String()+": type assertion to "+render(x.Type))
					}
				case *ast.TypeSwitchStmt:
					for _, c := range x.Body.List {
						for _, e := range c.(*ast.CaseClause).List {
							seen++
							if isStorage(e, names) {
								found = append(found, fset.Position(e.Pos()).String()+": type switch case "+render(e))
							}
						}
					}
				}
				return true
			})
		}
	}
	sort.Strings(found)
	return found, seen
}

// storageNames returns the names file f refers to package storage by
// (its import name, or "storage").
func storageNames(f *ast.File) map[string]bool {
	names := map[string]bool{}
	for _, im := range f.Imports {
		p, err := strconv.Unquote(im.Path.Value)
		if err != nil || p != storagePath {
			continue
		}
		if im.Name != nil {
			names[im.Name.Name] = true
		} else {
			names["storage"] = true
		}
	}
	return names
}

// storageInterfaceNames parses package storage (tests excluded) and
// returns the names of the interface types it declares.
func storageInterfaceNames(t *testing.T, dir string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	out := map[string]bool{}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok {
				if _, ok := ts.Type.(*ast.InterfaceType); ok {
					out[ts.Name.Name] = true
				}
			}
			return true
		})
	}
	return out
}

// moduleRoot returns the directory of the module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// render prints a type expression of an assertion (storage.X, X).
func render(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return render(x.X) + "." + x.Sel.Name
	case *ast.ParenExpr:
		return render(x.X)
	}
	return "?"
}

// The finder itself: what it flags and what it leaves alone.
func TestStorageAssertionFinder(t *testing.T) {
	const other = `package x

import st "github.com/synclane/synclane/storage"

type leases = st.Leases

func f(v any) {
	_ = v.(st.Querier)
	_ = v.(leases)
	switch v.(type) {
	case st.BlobIndex, string:
	}
	_ = v.(interface{ Close() error })
	_ = v.(st.Backend)
	_ = v.(*st.Backend)
}
`
	const inside = `package storage

func g(v any) {
	_ = v.(Log)
	_ = v.(Backend)
}
`
	fset := token.NewFileSet()
	parse := func(name, src string) *ast.File {
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	pkgs := map[string][]*ast.File{"x": {parse("x/x.go", other)}, "storage": {parse("storage/s.go", inside)}}
	ifaces := map[string]bool{"Querier": true, "Leases": true, "BlobIndex": true, "Log": true}
	found, seen := storageAssertions(fset, pkgs, "storage", ifaces)
	want := []string{ // sorted as strings
		"storage/s.go:4:6: type assertion to Log",
		"x/x.go:11:7: type switch case st.BlobIndex",
		"x/x.go:8:6: type assertion to st.Querier",
		"x/x.go:9:6: type assertion to leases",
	}
	if !slices.Equal(found, want) {
		t.Fatalf("found\n%s\nwant\n%s", strings.Join(found, "\n"), strings.Join(want, "\n"))
	}
	if seen != 9 {
		t.Fatalf("looked at %d assertion and case types, want 9", seen)
	}
}
