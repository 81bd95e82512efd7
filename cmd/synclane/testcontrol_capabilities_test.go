package main

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

// Test mode runs the production store: the storage.Backend the engine
// gets under --test-control has every role the backend's own Backend has,
// each the very same value (no wrapper in between). The roles are read
// from storage.Backend's fields, so a new role is covered without editing
// this test.
func TestTestControlKeepsStoreRoles(t *testing.T) {
	ctx := context.Background()
	backends := map[string]func(t *testing.T) storage.Backend{
		"memory": func(*testing.T) storage.Backend { return memory.New().Backend() },
		"sqlite": func(t *testing.T) storage.Backend {
			return openServeStore(t, serveConfig{data: t.TempDir()}).Backend
		},
		"postgres": func(t *testing.T) storage.Backend {
			u := pgtest.URL(t)
			sep := "?"
			if strings.Contains(u, "?") {
				sep = "&"
			}
			return openServeStore(t, serveConfig{postgresURL: u + sep + "search_path=" + pgtest.NewSchema(t), pgMaxConns: 4}).Backend
		},
	}
	for _, name := range []string{"memory", "sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			b := backends[name](t)
			sch := schema.MustDemo()
			cfg := engine.Config{Schema: sch, Backend: b}
			controls := serveConfig{testControl: true, clockMs: 1_000}.testControls(&cfg, sch)
			cfg.Resolver = controls.Resolver
			eng, err := engine.New(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer eng.Close()

			has := b.Roles()
			if !slices.Contains(has, "Log") || len(has) < len(storage.RequiredRoles()) {
				t.Fatalf("the %s backend has the roles %v, without the required ones: the reading is broken", name, has)
			}
			facing := eng.Backend()
			want, got := reflect.ValueOf(b), reflect.ValueOf(facing)
			for i, role := range storage.RoleNames() {
				switch w, g := want.Field(i), got.Field(i); {
				case w.IsNil():
				case g.IsNil():
					t.Errorf("the engine under --test-control lost the storage role %s, which the %s backend has", role, name)
				case w.Interface() != g.Interface():
					t.Errorf("the engine under --test-control has a storage role %s (%T) other than the %s backend's (%T)", role, g.Interface(), name, w.Interface())
				}
			}
			t.Logf("%s: %s", name, strings.Join(has, ", "))
		})
	}
}

// openServeStore opens the store `synclane serve` opens for c, closed when
// t ends.
func openServeStore(t *testing.T, c serveConfig) store {
	t.Helper()
	st, _, err := openStore(context.Background(), c, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
