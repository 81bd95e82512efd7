package sqlite_test

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/storage/storagetest"
)

func openTemp(t testing.TB) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "sync.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sqliteRoles are the roles the SQLite store has: every one but
// Ownership (one process: no cluster mode).
var sqliteRoles = []string{"Lifecycle", "Log", "Rows", "Clients", "Checkpoints",
	"Retention", "Snapshots", "Leases", "Reactions", "Blobs", "Queries", "Admin", "RowEncoder", "ImageCopier"}

func TestContract(t *testing.T) {
	var mu sync.Mutex
	paths := map[storage.Lifecycle]string{}
	storagetest.RunShared(t, sqliteRoles, func(t *testing.T) storage.Backend {
		path := filepath.Join(t.TempDir(), "sync.db")
		s, err := sqlite.Open(t.Context(), path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		paths[s] = path
		mu.Unlock()
		return s.Backend()
	}, func(t *testing.T, b storage.Backend) storage.Backend {
		mu.Lock()
		path := paths[b.Lifecycle]
		mu.Unlock()
		h, err := sqlite.Open(t.Context(), path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close() })
		return h.Backend()
	})
}
