package ssp2

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// frameViewFiles may name frames: request.go is the typed view of a request
// (Message.Request), a consumer of the request frames like the transports.
var frameViewFiles = map[string]bool{"request.go": true}

// TestFrameFilesSelfContained is the proof that adding a frame touches one
// file: it type-checks the package's non-test files and, for each file that
// registers a frame, checks that
//   - it registers exactly one frame, from init, with decode, parse and
//     order functions declared in the same file;
//   - the frame's Go type, with FrameType, appendPayload and renderFields,
//     and its type byte constant are declared there;
//   - no other file (but the typed request view) uses anything it declares;
//   - it uses nothing that another frame file declares.
func TestFrameFilesSelfContained(t *testing.T) {
	fset := token.NewFileSet()
	files, err := parseDir(fset, ".")
	if err != nil {
		t.Fatal(err)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: &moduleImporter{fset: fset, std: importer.ForCompiler(fset, "gc", nil)}}
	pkg, err := conf.Check(ssp2Path, fset, files, info)
	if err != nil {
		t.Fatalf("type-check: %v", err)
	}
	fileOf := func(p token.Pos) string { return filepath.Base(fset.Position(p).Filename) }

	// The frame files: those whose init registers a frame.
	frameFiles := map[string]*ast.File{}
	for _, f := range files {
		if n := registrations(f); n > 0 {
			name := fileOf(f.Pos())
			if n != 1 {
				t.Errorf("%s registers %d frames, want one", name, n)
			}
			frameFiles[name] = f
		}
	}
	if len(frameFiles) == 0 {
		t.Fatal("no frame file found")
	}
	registered := 0
	for _, s := range frameSpecs {
		if s != nil {
			registered++
		}
	}
	if registered != len(frameFiles) {
		t.Errorf("%d frames registered, %d frame files", registered, len(frameFiles))
	}

	// Each file's uses of package-level objects declared in another file.
	for _, f := range files {
		user := fileOf(f.Pos())
		ast.Inspect(f, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok {
				return true
			}
			obj := info.Uses[id]
			if obj == nil || obj.Pkg() != pkg || !declaredAtTop(obj, pkg) {
				return true
			}
			owner := fileOf(obj.Pos())
			if owner == user {
				return true
			}
			if _, ok := frameFiles[owner]; ok && !frameViewFiles[user] {
				t.Errorf("%s uses %s, declared in the frame file %s", user, obj.Name(), owner)
			}
			return true
		})
	}

	// What each frame file must declare itself.
	for name, f := range frameFiles {
		spec := registeredSpec(f)
		for _, k := range []string{"decode", "parse", "order"} {
			id, ok := spec[k].(*ast.Ident)
			if !ok {
				t.Errorf("%s: %s is not a named function", name, k)
				continue
			}
			if obj := info.Uses[id]; obj == nil || fileOf(obj.Pos()) != name {
				t.Errorf("%s: %s function %s is not declared in the file", name, k, id.Name)
			}
		}
		typID, ok := spec["typ"].(*ast.Ident)
		if !ok {
			t.Errorf("%s: typ is not a named constant", name)
			continue
		}
		if obj := info.Uses[typID]; obj == nil || fileOf(obj.Pos()) != name {
			t.Errorf("%s: the type byte constant %s is not declared in the file", name, typID.Name)
		}
		frameType := frameTypeIn(pkg, name, fileOf)
		if frameType == nil {
			t.Errorf("%s declares no type with a FrameType method", name)
			continue
		}
		ptr := types.NewPointer(frameType)
		for _, m := range []string{"FrameType", "appendPayload", "renderFields"} {
			obj, _, _ := types.LookupFieldOrMethod(ptr, false, pkg, m)
			if obj == nil || fileOf(obj.Pos()) != name {
				t.Errorf("%s: method %s of %s is not declared in the file", name, m, frameType.Obj().Name())
			}
		}
	}
	list := make([]string, 0, len(frameFiles))
	for n := range frameFiles {
		list = append(list, n)
	}
	sort.Strings(list)
	t.Logf("%d frame files: %s", len(list), strings.Join(list, " "))
}

const (
	modulePath = "github.com/synclane/synclane"
	ssp2Path   = modulePath + "/protocol/ssp2"
)

// parseDir parses the non-test Go files of dir.
func parseDir(fset *token.FileSet, dir string) ([]*ast.File, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, 0)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// moduleImporter imports the standard library from export data and this
// module's packages (protocol/syncerr) from source, found from the package
// directory (protocol/ssp2, two levels below the module root).
type moduleImporter struct {
	fset *token.FileSet
	std  types.Importer
}

func (m *moduleImporter) Import(path string) (*types.Package, error) {
	rel, ok := strings.CutPrefix(path, modulePath+"/")
	if !ok {
		return m.std.Import(path)
	}
	files, err := parseDir(m.fset, filepath.Join("..", "..", filepath.FromSlash(rel)))
	if err != nil {
		return nil, err
	}
	conf := types.Config{Importer: m}
	return conf.Check(path, m.fset, files, nil)
}

// declaredAtTop reports whether obj is a package-level object, or a method
// or field of a package-level type.
func declaredAtTop(obj types.Object, pkg *types.Package) bool {
	if obj.Parent() == pkg.Scope() {
		return true
	}
	if fn, ok := obj.(*types.Func); ok {
		return fn.Signature().Recv() != nil
	}
	if v, ok := obj.(*types.Var); ok {
		return v.IsField()
	}
	return false
}

// registrations counts the registerFrame calls in f's init functions.
func registrations(f *ast.File) int {
	n := 0
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Name.Name != "init" || fd.Recv != nil {
			continue
		}
		ast.Inspect(fd.Body, func(x ast.Node) bool {
			if c, ok := x.(*ast.CallExpr); ok {
				if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "registerFrame" {
					n++
				}
			}
			return true
		})
	}
	return n
}

// registeredSpec returns the fields of the frameSpec literal f registers.
func registeredSpec(f *ast.File) map[string]ast.Expr {
	out := map[string]ast.Expr{}
	ast.Inspect(f, func(x ast.Node) bool {
		c, ok := x.(*ast.CallExpr)
		if !ok {
			return true
		}
		if id, ok := c.Fun.(*ast.Ident); !ok || id.Name != "registerFrame" || len(c.Args) != 1 {
			return true
		}
		lit, ok := c.Args[0].(*ast.UnaryExpr)
		if !ok {
			return true
		}
		cl, ok := lit.X.(*ast.CompositeLit)
		if !ok {
			return true
		}
		for _, e := range cl.Elts {
			if kv, ok := e.(*ast.KeyValueExpr); ok {
				if k, ok := kv.Key.(*ast.Ident); ok {
					out[k.Name] = kv.Value
				}
			}
		}
		return false
	})
	return out
}

// frameTypeIn returns the named type declared in file whose pointer has a
// FrameType method declared there too.
func frameTypeIn(pkg *types.Package, file string, fileOf func(token.Pos) string) *types.Named {
	for _, n := range pkg.Scope().Names() {
		tn, ok := pkg.Scope().Lookup(n).(*types.TypeName)
		if !ok || fileOf(tn.Pos()) != file {
			continue
		}
		named, ok := tn.Type().(*types.Named)
		if !ok {
			continue
		}
		obj, _, _ := types.LookupFieldOrMethod(types.NewPointer(named), false, pkg, "FrameType")
		if obj != nil && fileOf(obj.Pos()) == file {
			return named
		}
	}
	return nil
}
