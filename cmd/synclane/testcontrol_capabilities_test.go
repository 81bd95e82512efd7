package main

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

// Test mode runs the production store: every interface package storage
// declares that a backend's store (and its push transaction) implements,
// the store the engine is given under --test-control (and its
// transactions) implements too. The interfaces are read from the
// package's source, so a new optional interface is covered without
// editing this test.
func TestTestControlKeepsStoreCapabilities(t *testing.T) {
	ifaces := storageInterfaces(t)
	ctx := context.Background()
	backends := map[string]func(t *testing.T) storage.Store{
		"memory": func(*testing.T) storage.Store { return memory.New() },
		"sqlite": func(t *testing.T) storage.Store {
			return openServeStore(t, serveConfig{data: t.TempDir()})
		},
		"postgres": func(t *testing.T) storage.Store {
			u := pgtest.URL(t)
			sep := "?"
			if strings.Contains(u, "?") {
				sep = "&"
			}
			return openServeStore(t, serveConfig{postgresURL: u + sep + "search_path=" + pgtest.NewSchema(t), pgMaxConns: 4})
		},
	}
	for _, name := range []string{"memory", "sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			st := backends[name](t)
			sch := schema.MustDemo()
			cfg := engine.Config{Schema: sch, Store: st}
			controls := serveConfig{testControl: true, clockMs: 1_000}.testControls(&cfg, sch)
			cfg.Resolver = controls.Resolver
			eng, err := engine.New(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer eng.Close()

			backendTx := beginRolledBack(t, st)
			facingTx := beginRolledBack(t, eng.Store())
			for _, c := range []struct {
				what            string
				backend, facing any
				anchor          string // an interface every backend implements (the matcher works)
			}{{"store", st, eng.Store(), "Store"}, {"push transaction", backendTx, facingTx, "PushTx"}} {
				var has, lost []string
				for _, in := range ifaces {
					if !in.implementedBy(c.backend) {
						continue
					}
					has = append(has, in.name)
					if !in.implementedBy(c.facing) {
						lost = append(lost, in.name)
					}
				}
				if !slices.Contains(has, c.anchor) {
					t.Fatalf("the %s %T does not implement storage.%s by this test's reflection: the matcher is broken", c.what, c.backend, c.anchor)
				}
				if len(lost) > 0 {
					t.Errorf("the %s the engine gets under --test-control (%T) lost storage.%s, which %T implements",
						c.what, c.facing, strings.Join(lost, ", storage."), c.backend)
				}
				t.Logf("%s %T: %s", c.what, c.backend, strings.Join(has, ", "))
			}
		})
	}
}

// openServeStore opens the store `synclane serve` opens for c, closed when
// t ends.
func openServeStore(t *testing.T, c serveConfig) storage.Store {
	t.Helper()
	st, _, err := openStore(context.Background(), c, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// beginRolledBack opens a push transaction on st and rolls it back,
// returning it (its type and methods are all the caller looks at).
func beginRolledBack(t *testing.T, st storage.Store) storage.PushTx {
	t.Helper()
	ctx := context.Background()
	if err := st.EnsureSchema(ctx, schema.MustDemo()); err != nil {
		t.Fatal(err)
	}
	tx, err := st.BeginPush(ctx, "capabilities")
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	return tx
}

// storageInterface is an interface type declared in package storage: its
// name and its method set (embedded interfaces expanded), each method as
// its name and its signature rendered the way reflect renders func types.
type storageInterface struct {
	name    string
	methods map[string]string
}

// implementedBy reports whether v's method set holds every method of the
// interface with the same signature.
func (in storageInterface) implementedBy(v any) bool {
	rv := reflect.ValueOf(v)
	for name, sig := range in.methods {
		m := rv.MethodByName(name)
		if !m.IsValid() || m.Type().String() != sig {
			return false
		}
	}
	return true
}

// storageInterfaces parses storage/*.go (tests excluded) and returns every
// interface type it declares, sorted by name.
func storageInterfaces(t *testing.T) []storageInterface {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "storage", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	decls := map[string]*ast.InterfaceType{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		if af.Name.Name != "storage" {
			continue
		}
		for _, d := range af.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, sp := range gd.Specs {
				ts := sp.(*ast.TypeSpec)
				if it, ok := ts.Type.(*ast.InterfaceType); ok && ts.Name.IsExported() {
					decls[ts.Name.Name] = it
				}
			}
		}
	}
	if decls["Store"] == nil || decls["PushTx"] == nil || len(decls) < 10 {
		t.Fatalf("parsed %d interfaces from %d files of package storage, without Store and PushTx: the parse is broken", len(decls), len(files))
	}
	var out []storageInterface
	for name := range decls {
		ms := map[string]string{}
		collectMethods(t, decls, name, ms)
		out = append(out, storageInterface{name: name, methods: ms})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// collectMethods adds the methods of interface name (and of the storage
// interfaces it embeds) to ms.
func collectMethods(t *testing.T, decls map[string]*ast.InterfaceType, name string, ms map[string]string) {
	t.Helper()
	for _, f := range decls[name].Methods.List {
		switch x := f.Type.(type) {
		case *ast.FuncType:
			for _, n := range f.Names {
				ms[n.Name] = funcString(x)
			}
		case *ast.Ident:
			if decls[x.Name] == nil {
				t.Fatalf("storage.%s embeds %s, which is not an interface of package storage", name, x.Name)
			}
			collectMethods(t, decls, x.Name, ms)
		default:
			t.Fatalf("storage.%s embeds %s: not handled by this test", name, exprString(f.Type))
		}
	}
}

// funcString renders a func type as reflect.Type.String does.
func funcString(ft *ast.FuncType) string {
	list := func(fl *ast.FieldList) []string {
		var out []string
		if fl == nil {
			return out
		}
		for _, f := range fl.List {
			n := max(len(f.Names), 1)
			for range n {
				out = append(out, exprString(f.Type))
			}
		}
		return out
	}
	s := "func(" + strings.Join(list(ft.Params), ", ") + ")"
	switch res := list(ft.Results); len(res) {
	case 0:
	case 1:
		s += " " + res[0]
	default:
		s += " (" + strings.Join(res, ", ") + ")"
	}
	return s
}

// predeclared maps Go's predeclared type names to their reflect spelling.
var predeclared = map[string]string{"any": "interface {}", "byte": "uint8", "rune": "int32"}

// exprString renders a type expression of package storage as reflect
// renders the type: local names qualified with "storage.".
func exprString(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		if r, ok := predeclared[x.Name]; ok {
			return r
		}
		if ast.IsExported(x.Name) {
			return "storage." + x.Name
		}
		return x.Name // string, int64, error, ...
	case *ast.SelectorExpr:
		return exprString(x.X) + "." + x.Sel.Name
	case *ast.StarExpr:
		return "*" + exprString(x.X)
	case *ast.ArrayType:
		if x.Len == nil {
			return "[]" + exprString(x.Elt)
		}
		return "[" + exprString(x.Len) + "]" + exprString(x.Elt)
	case *ast.BasicLit:
		return x.Value
	case *ast.MapType:
		return "map[" + exprString(x.Key) + "]" + exprString(x.Value)
	case *ast.Ellipsis:
		return "..." + exprString(x.Elt)
	case *ast.FuncType:
		return funcString(x)
	case *ast.InterfaceType:
		if x.Methods == nil || len(x.Methods.List) == 0 {
			return "interface {}"
		}
	}
	return fmt.Sprintf("<unhandled %T>", e)
}
