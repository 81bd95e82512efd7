package memory

import (
	"context"

	"github.com/synclane/synclane/storage"
)

// Query always fails with storage.ErrQueryUnsupported: the in-memory store
// holds rows as Go values and cannot execute registered SQL. The engine
// answers operation.storage_unsupported.
func (s *Store) Query(ctx context.Context, partition string, running int32, q storage.Query, check func(storage.ServeGate) error) (storage.QueryResult, error) {
	return storage.QueryResult{}, storage.ErrQueryUnsupported
}
