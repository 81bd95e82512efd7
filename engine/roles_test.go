package engine_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/admin"
	"github.com/synclane/synclane/engine/blobs"
	"github.com/synclane/synclane/engine/lease"
	"github.com/synclane/synclane/engine/operations"
	"github.com/synclane/synclane/engine/reactions"
	"github.com/synclane/synclane/engine/retention"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/storage/memory"
)

// engine.New refuses, before touching storage, a backend without a
// required role and a configured feature whose role the backend lacks,
// naming the feature and the role; the same configuration starts when the
// role is there, and a feature that is off needs no role.
func TestNewChecksStorageRoles(t *testing.T) {
	s, err := schema.Parse([]byte(testSchemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	blobFS, err := blobstore.NewFS(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	queries := operations.NewRegistry(s)
	if err := queries.AddQuery(operations.Query{ID: "ids", SQL: "SELECT id FROM {tasks}", MaxRows: 10,
		Columns:   []operations.Column{{Name: "id", Type: ssp2.TypeString}},
		Authorize: func(context.Context, operations.Caller, any) (bool, error) { return true, nil }}); err != nil {
		t.Fatal(err)
	}
	commands := operations.NewRegistry(s)
	if err := commands.AddCommand(operations.Command{ID: "noop",
		Authorize: func(context.Context, operations.Caller, any) (bool, error) { return true, nil },
		Run:       func(context.Context, operations.Invocation) ([]operations.Mutation, error) { return nil, nil }}); err != nil {
		t.Fatal(err)
	}
	handlers := map[string]reactions.Handler{"mail": func(context.Context, reactions.Stored) error { return nil }}
	cases := []struct {
		name      string
		role      string // the role taken away (Backend field name)
		configure func(*engine.Config)
		want      string // "" : starts
	}{
		{"no Lifecycle", "Lifecycle", nil, "required role(s) Lifecycle"},
		{"no Log", "Log", nil, "required role(s) Log"},
		{"no Rows", "Rows", nil, "required role(s) Rows"},
		{"no Clients", "Clients", nil, "required role(s) Clients"},
		{"no Checkpoints", "Checkpoints", nil, "required role(s) Checkpoints"},
		{"blobs without Blobs", "Blobs", func(c *engine.Config) { c.Blobs.Store = blobFS },
			"blobs (Config.Blobs.Store) needs the storage role Blobs"},
		{"blobs off without Blobs", "Blobs", nil, ""},
		{"queries without Queries", "Queries", func(c *engine.Config) { c.Operations.Registry = queries },
			"registered remote queries (Config.Operations) needs the storage role Queries"},
		{"commands only without Queries", "Queries", func(c *engine.Config) { c.Operations.Registry = commands }, ""},
		{"reactions without Reactions", "Reactions", func(c *engine.Config) { c.Reactions.Handlers = handlers },
			"durable reactions (Config.Reactions.Handlers) needs the storage role Reactions"},
		{"no handlers without Reactions", "Reactions", nil, ""},
		{"leases without Leases", "Leases", func(c *engine.Config) { c.Leases.TTL, c.Leases.Key = time.Minute, leaseKey },
			"auth leases (Config.Leases.TTL) needs the storage role Leases"},
		{"maintenance loop without Retention", "Retention", func(c *engine.Config) { c.Retention.Interval = time.Hour },
			"the maintenance loop (Config.Retention.Interval) needs the storage role Retention"},
		{"no loop without Retention", "Retention", nil, ""},
		{"no Admin", "Admin", nil, ""}, // the admin service checks it (engine/admin.New)
		{"no Snapshots", "Snapshots", nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, without := range []bool{false, true} {
				b := memory.New().Backend()
				if c.role == "Queries" {
					b = sqlBackends[0].open(t).Backend() // memory has no Queries role
				}
				if without {
					drop(t, &b, c.role)
				}
				cfg := engine.Config{Schema: s, Backend: b, Resolver: engine.AllowAll(s)}
				if c.configure != nil {
					c.configure(&cfg)
				}
				eng, err := engine.New(context.Background(), cfg)
				if err == nil {
					eng.Close()
				}
				switch {
				case !without || c.want == "":
					if err != nil {
						t.Fatalf("without %s: %v, want a start", map[bool]string{false: "nothing", true: c.role}[without], err)
					}
				case err == nil:
					t.Fatalf("started without the %s role, want %q", c.role, c.want)
				case !strings.Contains(err.Error(), c.want):
					t.Fatalf("error %q does not say %q", err, c.want)
				}
			}
		})
	}
	// Every missing role of a configuration is named at once.
	b := memory.New().Backend()
	b.Blobs, b.Leases = nil, nil
	_, err = engine.New(context.Background(), engine.Config{Schema: s, Backend: b, Resolver: engine.AllowAll(s),
		Blobs: blobs.Options{Store: blobFS}, Leases: lease.Options{TTL: time.Minute, Key: leaseKey}})
	if err == nil || !strings.Contains(err.Error(), "role Blobs") || !strings.Contains(err.Error(), "role Leases") {
		t.Fatalf("two missing roles: %v", err)
	}
}

// drop sets the role field of b to nil.
func drop(t *testing.T, b *storage.Backend, role string) {
	t.Helper()
	switch role {
	case "Lifecycle":
		b.Lifecycle = nil
	case "Log":
		b.Log = nil
	case "Rows":
		b.Rows = nil
	case "Clients":
		b.Clients = nil
	case "Checkpoints":
		b.Checkpoints = nil
	case "Blobs":
		b.Blobs = nil
	case "Queries":
		b.Queries = nil
	case "Reactions":
		b.Reactions = nil
	case "Leases":
		b.Leases = nil
	case "Retention":
		b.Retention = nil
	case "Admin":
		b.Admin = nil
	case "Snapshots":
		b.Snapshots = nil
	default:
		t.Fatalf("drop: unknown role %q", role)
	}
	if b.Has(role) {
		t.Fatalf("drop(%s) left the role", role)
	}
}

// The operator features without their role answer an error naming it
// when called: the admin service refuses to start without Admin, and
// maintenance, pruning, capture and restore answer without Retention or
// Snapshots.
func TestOperatorCallsWithoutTheirRole(t *testing.T) {
	s, err := schema.Parse([]byte(testSchemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b := memory.New().Backend()
	b.Admin, b.Retention, b.Snapshots = nil, nil, nil
	eng, err := engine.New(ctx, engine.Config{Schema: s, Backend: b, Resolver: engine.AllowAll(s)})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if _, err := admin.New(eng); err == nil || !strings.Contains(err.Error(), "Admin role") {
		t.Errorf("admin.New without the Admin role: %v", err)
	}
	if _, err := eng.Retention().MaintenancePass(ctx, false); !errors.Is(err, retention.ErrNoRetention) {
		t.Errorf("MaintenancePass without Retention: %v", err)
	}
	if _, err := eng.Retention().Prune(ctx, "p1", storage.DefaultRetentionPolicy(), false); !errors.Is(err, retention.ErrNoRetention) {
		t.Errorf("Prune without Retention: %v", err)
	}
	if err := eng.Retention().Capture(ctx, "p1"); !errors.Is(err, retention.ErrNoSnapshots) {
		t.Errorf("CapturePartition without Snapshots: %v", err)
	}
	if _, err := eng.Retention().Restore(ctx, "p1"); err == nil || !strings.Contains(err.Error(), "Snapshots role") {
		t.Errorf("RestorePartition without Snapshots: %v", err)
	}
	// With the roles the same calls work.
	full, err := engine.New(ctx, engine.Config{Schema: s, Backend: memory.New().Backend(), Resolver: engine.AllowAll(s)})
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	if _, err := admin.New(full); err != nil {
		t.Errorf("admin.New: %v", err)
	}
	if _, err := full.Retention().MaintenancePass(ctx, false); err != nil {
		t.Errorf("MaintenancePass: %v", err)
	}
	if err := full.Retention().Capture(ctx, "p1"); err != nil {
		t.Errorf("CapturePartition: %v", err)
	}
}
