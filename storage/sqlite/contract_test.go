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

func TestContract(t *testing.T) {
	var mu sync.Mutex
	paths := map[storage.Store]string{}
	storagetest.RunShared(t, func(t *testing.T) storage.Store {
		path := filepath.Join(t.TempDir(), "sync.db")
		s, err := sqlite.Open(t.Context(), path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		paths[s] = path
		mu.Unlock()
		return s
	}, func(t *testing.T, s storage.Store) storage.Store {
		mu.Lock()
		path := paths[s]
		mu.Unlock()
		h, err := sqlite.Open(t.Context(), path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close() })
		return h
	})
}
