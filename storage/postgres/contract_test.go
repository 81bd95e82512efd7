package postgres_test

import (
	"sync"
	"testing"

	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/storage/storagetest"
)

func TestContract(t *testing.T) {
	var mu sync.Mutex
	schemas := map[storage.Store]string{}
	storagetest.RunShared(t, func(t *testing.T) storage.Store {
		name := pgtest.NewSchema(t)
		s := pgtest.OpenSchema(t, name, postgres.Options{MaxConns: 4})
		mu.Lock()
		schemas[s] = name
		mu.Unlock()
		return s
	}, func(t *testing.T, s storage.Store) storage.Store {
		mu.Lock()
		name := schemas[s]
		mu.Unlock()
		return pgtest.OpenSchema(t, name, postgres.Options{MaxConns: 4})
	})
}
