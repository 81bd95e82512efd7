package memory

import "github.com/synclane/synclane/storage"

// The roles of the memory store, checked at compile time: the checklist a
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
	_ storage.AdminReader    = (*Store)(nil)
	_ storage.ClientHandOver = (*Store)(nil)
	_ storage.PushTx         = (*pushTx)(nil)
)

// Backend returns the store's roles. It has every role but Queries (it
// holds rows as Go values and cannot run registered SQL: an engine with
// registered queries on it is refused at start), Ownership (it lives in
// one process: no cluster mode; fences in a context are ignored) and the
// fast paths RowEncoder and ImageCopier. (It has HandOver, without
// Ownership, for the partition's tests of a hand-over.)
func (s *Store) Backend() storage.Backend {
	return storage.Backend{
		Lifecycle: s, Log: s, Rows: s, Clients: s, Checkpoints: s,
		Retention: s, Snapshots: s, Leases: s, Reactions: s, Blobs: s, Admin: s, HandOver: s,
	}
}
