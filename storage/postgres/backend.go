package postgres

import "github.com/synclane/synclane/storage"

// The roles of the postgres store, checked at compile time: the checklist a
// backend fills (see storage.Backend).
var (
	_ storage.Lifecycle      = (*Store)(nil)
	_ storage.Log            = (*Store)(nil)
	_ storage.Rows           = (*Store)(nil)
	_ storage.Clients        = (*Store)(nil)
	_ storage.Checkpoints    = (*Store)(nil)
	_ storage.Retention      = (*Store)(nil)
	_ storage.Snapshots      = (*Store)(nil)
	_ storage.Leases         = (*Store)(nil)
	_ storage.Reactions      = (*Store)(nil)
	_ storage.BlobIndex      = (*Store)(nil)
	_ storage.Querier        = (*Store)(nil)
	_ storage.AdminReader    = (*Store)(nil)
	_ storage.Ownership      = (*Store)(nil)
	_ storage.ClientHandOver = (*Store)(nil)
	_ storage.PushTx         = (*pushTx)(nil)
	_ storage.RowEncoder     = (*Store)(nil)
)

// Backend returns the store's roles. It has every role but the fast path
// ImageCopier (it writes no SQLite files); it is the only backend with
// Ownership (several processes can share it), and has HandOver with it.
func (s *Store) Backend() storage.Backend {
	return storage.Backend{
		Lifecycle: s, Log: s, Rows: s, Clients: s, Checkpoints: s,
		Retention: s, Snapshots: s, Leases: s, Reactions: s, Blobs: s, Queries: s, Admin: s, Ownership: s,
		HandOver: s, RowEncoder: s,
	}
}
