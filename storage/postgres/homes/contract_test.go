package homes_test

import (
	"sync"
	"testing"

	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/storagetest"
)

// homesRoles are the roles of Homes: those of postgres.Store.
var homesRoles = []string{"Lifecycle", "Log", "Rows", "Clients", "Checkpoints",
	"Retention", "Snapshots", "Leases", "Reactions", "Blobs", "Queries", "Admin", "Ownership", "HandOver", "Homes", "RowEncoder"}

// TestContract runs the storage contract suite on two homes in two
// databases of the test server (created and dropped by the test): the
// cases' partitions land in both, and the calls of no partition
// (listings, counts, blobs, reactions, the serve gate's pending list)
// are answered across them.
func TestContract(t *testing.T) {
	dbs := twoDatabases(t)
	var mu sync.Mutex
	places := map[storage.Lifecycle]place{}
	storagetest.RunShared(t, homesRoles, func(t *testing.T) storage.Backend {
		p := newPlace(t, dbs)
		b := p.open(t, postgres.Options{}).Backend()
		mu.Lock()
		places[b.Lifecycle] = p
		mu.Unlock()
		return b
	}, func(t *testing.T, b storage.Backend) storage.Backend {
		mu.Lock()
		p := places[b.Lifecycle]
		mu.Unlock()
		return p.open(t, postgres.Options{}).Backend()
	})
}
