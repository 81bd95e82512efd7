package postgres_test

import (
	"sync"
	"testing"

	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/storage/storagetest"
)

// postgresRoles are the roles the PostgreSQL store has: every one but
// the fast path ImageCopier (and the only one with Ownership).
var postgresRoles = []string{"Lifecycle", "Log", "Rows", "Clients", "Checkpoints",
	"Retention", "Snapshots", "Leases", "Reactions", "Blobs", "Queries", "Admin", "Ownership", "HandOver", "RowEncoder"}

func TestContract(t *testing.T) {
	var mu sync.Mutex
	schemas := map[storage.Lifecycle]string{}
	storagetest.RunShared(t, postgresRoles, func(t *testing.T) storage.Backend {
		name := pgtest.NewSchema(t)
		s := pgtest.OpenSchema(t, name, postgres.Options{MaxConns: 4})
		mu.Lock()
		schemas[s] = name
		mu.Unlock()
		return s.Backend()
	}, func(t *testing.T, b storage.Backend) storage.Backend {
		mu.Lock()
		name := schemas[b.Lifecycle]
		mu.Unlock()
		return pgtest.OpenSchema(t, name, postgres.Options{MaxConns: 4}).Backend()
	})
}
