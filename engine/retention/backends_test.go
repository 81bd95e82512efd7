package retention_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/storage/storagetest"
)

// backends are the stores the engine-level retention cases run on: every
// backend package, each with a way to open a second handle on the same
// database (another process) for the cases that need two.
var backends = []struct {
	name string
	// open returns a fresh backend on which EnsureSchema has not run, and
	// share, which opens a second, not yet ensured handle on its database
	// (closed when t ends).
	open func(t *testing.T) (b storage.Backend, share func() storage.Backend)
}{
	{"memory", func(t *testing.T) (storage.Backend, func() storage.Backend) {
		s := memory.New()
		return s.Backend(), func() storage.Backend {
			h := s.Share()
			t.Cleanup(func() { _ = h.Close() })
			return h.Backend()
		}
	}},
	{"sqlite", func(t *testing.T) (storage.Backend, func() storage.Backend) {
		path := filepath.Join(t.TempDir(), "sync.db")
		open := func() *sqlite.Store {
			s, err := sqlite.Open(t.Context(), path, sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		return open().Backend(), func() storage.Backend {
			h := open()
			t.Cleanup(func() { _ = h.Close() })
			return h.Backend()
		}
	}},
	{"postgres", func(t *testing.T) (storage.Backend, func() storage.Backend) {
		name := pgtest.NewSchema(t)
		return pgtest.OpenSchema(t, name, postgres.Options{MaxConns: 4}).Backend(), func() storage.Backend {
			return pgtest.OpenSchema(t, name, postgres.Options{MaxConns: 4}).Backend()
		}
	}},
}

// test is one engine-level retention case; shared cases (two processes on
// one database) use env.share, which every backend here has.
type test struct {
	name   string
	shared bool
	fn     func(e *env)
}

// env is a backend under test, ensured with storagetest.SchemaV1.
type env struct {
	t     *testing.T
	b     storage.Backend
	ctx   context.Context
	sch   *schema.Schema
	notes *schema.Table
	// share opens a second, not yet ensured handle on the same database.
	share func() storage.Backend
}

// base is the clock's start (Unix ms) in the cases.
const base = int64(1_700_000_000_000)

// note builds a notes row of storagetest.SchemaV1.
func note(id, project, body string) ssp2.Row { return ssp2.Row{id, project, body} }

func (e *env) readPartition(partition string) storage.PartitionInfo {
	e.t.Helper()
	p, err := e.b.Log.ReadPartition(e.ctx, partition)
	if err != nil {
		e.t.Fatalf("ReadPartition(%q): %v", partition, err)
	}
	return p
}

func (e *env) scanRows(partition string, q storage.RowQuery) []storage.RowRecord {
	e.t.Helper()
	r, err := e.b.Rows.ScanRows(e.ctx, partition, q)
	if err != nil {
		e.t.Fatalf("ScanRows(%q): %v", partition, err)
	}
	return r
}

// TestRetentionThroughTheEngine runs the engine-level retention cases on
// every backend: each case gets a fresh store, ensured, closed when it
// ends.
func TestRetentionThroughTheEngine(t *testing.T) {
	sch := storagetest.MustParse(storagetest.SchemaV1)
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			for _, tc := range retentionEngineTests {
				t.Run(tc.name, func(t *testing.T) {
					b, share := be.open(t)
					if !b.Has("Retention") {
						t.Fatalf("the %s backend has no Retention role", be.name)
					}
					e := &env{t: t, b: b, ctx: t.Context(), sch: sch, notes: sch.Table("notes"), share: share}
					if err := b.Lifecycle.EnsureSchema(e.ctx, sch); err != nil {
						t.Fatalf("EnsureSchema(v%d): %v", sch.Version, err)
					}
					defer func() {
						if err := b.Lifecycle.Close(); err != nil {
							t.Errorf("Close: %v", err)
						}
					}()
					tc.fn(e)
				})
			}
		})
	}
}
