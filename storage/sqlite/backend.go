package sqlite

import "github.com/synclane/synclane/storage"

// The roles of the sqlite store, checked at compile time: the checklist a
// backend fills (see storage.Backend).
var (
	_ storage.Lifecycle   = (*Store)(nil)
	_ storage.Log         = (*Store)(nil)
	_ storage.Rows        = (*Store)(nil)
	_ storage.Clients     = (*Store)(nil)
	_ storage.Checkpoints = (*Store)(nil)
	_ storage.Retention   = (*Store)(nil)
	_ storage.Snapshots   = (*Store)(nil)
	_ storage.Leases      = (*Store)(nil)
	_ storage.Reactions   = (*Store)(nil)
	_ storage.BlobIndex   = (*Store)(nil)
	_ storage.Querier     = (*Store)(nil)
	_ storage.AdminReader = (*Store)(nil)
	_ storage.PushTx      = (*pushTx)(nil)
	_ storage.RowEncoder  = (*Store)(nil)
	_ storage.ImageCopier = (*Store)(nil)
)

// Backend returns the store's roles. It has every role, the fast paths
// RowEncoder and ImageCopier included, but Ownership (one process owns the
// file: no cluster mode; fences in a context are ignored).
func (s *Store) Backend() storage.Backend {
	return storage.Backend{
		Lifecycle: s, Log: s, Rows: s, Clients: s, Checkpoints: s,
		Retention: s, Snapshots: s, Leases: s, Reactions: s, Blobs: s, Queries: s, Admin: s,
		RowEncoder: s, ImageCopier: s,
	}
}
