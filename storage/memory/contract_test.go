package memory_test

import (
	"testing"

	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/storagetest"
)

// memoryRoles are the roles the memory store has: every one but Queries,
// Ownership and the fast paths RowEncoder and ImageCopier.
var memoryRoles = []string{"Lifecycle", "Log", "Rows", "Clients", "Checkpoints",
	"Retention", "Snapshots", "Leases", "Reactions", "Blobs", "Admin", "HandOver"}

func TestContract(t *testing.T) {
	storagetest.RunShared(t, memoryRoles, func(t *testing.T) storage.Backend { return memory.New().Backend() },
		func(t *testing.T, b storage.Backend) storage.Backend {
			h := b.Lifecycle.(*memory.Store).Share()
			t.Cleanup(func() { _ = h.Close() })
			return h.Backend()
		})
}
