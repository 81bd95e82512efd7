package sqlite_test

import (
	"sync"
	"testing"

	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/storage/storagetest"
)

// TestContractDir runs the contract suite on a directory of three files:
// the cases' partitions land in different files, and the calls of no
// partition (listings, counts, blobs, reactions, the serve gate's pending
// list) are answered across them.
func TestContractDir(t *testing.T) {
	var mu sync.Mutex
	dirs := map[storage.Lifecycle]string{}
	storagetest.RunShared(t, sqliteRoles, func(t *testing.T) storage.Backend {
		dir := t.TempDir()
		d, err := sqlite.OpenDir(t.Context(), dir, sqlite.DirOptions{Files: 3})
		if err != nil {
			t.Fatal(err)
		}
		if d.Files() != 3 {
			t.Fatalf("Files() = %d, want 3", d.Files())
		}
		b := d.Backend()
		mu.Lock()
		dirs[b.Lifecycle] = dir
		mu.Unlock()
		return b
	}, func(t *testing.T, b storage.Backend) storage.Backend {
		mu.Lock()
		dir := dirs[b.Lifecycle]
		mu.Unlock()
		h, err := sqlite.OpenDir(t.Context(), dir, sqlite.DirOptions{Files: 3, FilesExplicit: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close() })
		return h.Backend()
	})
}
