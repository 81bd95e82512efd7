package storage

import (
	"context"

	"github.com/synclane/synclane/protocol/schema"
)

// The optional interfaces the engine discovered by type assertion before
// storage.Backend, kept only until every consumer takes a Backend (the
// next commit deletes this file): each is now a role of Backend or a
// method of every PushTx.

// Store is the storage backend of one synclane process.
type Store interface {
	// EnsureSchema creates (or migrates to) the system tables and one row
	// table per synced table of s. It is idempotent and must run before any
	// other call. Migration adds tables, columns and indexes; it never drops
	// data. A stored schema version above s.Version fails with ErrSchemaNewer.
	//
	// It records s.Version as the store's running schema version, which
	// every commit append writes as its writer version (checked by the
	// writer fence trigger). When it raises the stored schema marker, it
	// installs every declaration in decls (checkpoint row and fence) in the
	// same transaction as the marker, so a failed bump leaves nothing
	// behind; on PostgreSQL that transaction first takes an EXCLUSIVE lock
	// on the partitions table, so writers unaware of the bump wait and then
	// hit the fence. A same-version call installs nothing. Finally, a
	// checkpoint at s.Version that is neither activated nor in decls makes
	// it return an error wrapping ErrCheckpointIncomplete.
	EnsureSchema(ctx context.Context, s *schema.Schema, decls ...CheckpointDeclaration) error

	Checkpoints
	Retention
	Snapshots
	Leases // auth lease records (lease.go)

	// TouchPartition returns the partition's registry entry, creating it on
	// first contact with a fresh unpredictable log epoch (NewLogEpoch). A
	// partition name CheckPartition refuses fails with ErrUnstorable (as in
	// RotateLogEpoch and BeginPush).
	TouchPartition(ctx context.Context, partition string, nowMs int64) (PartitionInfo, error)

	// ReadPartition returns the partition's registry entry without creating
	// it; a never-touched partition is returned with Exists == false.
	ReadPartition(ctx context.Context, partition string) (PartitionInfo, error)

	// RotateLogEpoch gives the partition a new unpredictable log epoch
	// (NewLogEpoch), marks the epoch required (wire v1 refused from then on)
	// and deletes the partition's client records, under the partition write
	// lock. It returns the new epoch.
	RotateLogEpoch(ctx context.Context, partition string, nowMs int64) (string, error)

	// BeginPush opens a write transaction holding the partition's write lock
	// (taken before anything is read). The partition is created if needed.
	BeginPush(ctx context.Context, partition string) (PushTx, error)

	// LookupIdempotency returns the stored outcome of (clientID,
	// clientCommitID) in the partition, or nil. Used for the optimistic
	// check before the lock; the authoritative check is PushTx's.
	LookupIdempotency(ctx context.Context, partition, clientID, clientCommitID string) (*IdempotencyRecord, error)

	// ScanChanges returns, oldest first, the commits with seq in
	// (q.AfterSeq, q.UpToSeq] that have at least one change of q.Table whose
	// stored scopes match q.Scopes, each with only those matching changes.
	// It returns whole commits and stops after the commit that brings the
	// number of returned changes to q.LimitChanges or more, reporting
	// Truncated when it stopped for that reason before reaching q.UpToSeq.
	// Implementations use a scope index: they must not read every change of
	// the partition.
	ScanChanges(ctx context.Context, partition string, q ChangeQuery) (ChangeScan, error)

	// ScanRows returns up to q.Limit current rows of q.Table in the
	// partition whose scope columns match q.Scopes, ordered by primary key
	// (byte order), strictly after q.AfterRowID when it is non-nil.
	ScanRows(ctx context.Context, partition string, q RowQuery) ([]RowRecord, error)

	// GetClient returns the client record, or nil.
	GetClient(ctx context.Context, partition, clientID string) (*ClientRecord, error)

	// PutClient creates or replaces client records, all in one transaction
	// (the engine writes buffered records back in batches). Replacing a
	// record never changes its ActorID: the binding of a clientID to its
	// actor is immutable (see BindClient); only RotateLogEpoch, which
	// deletes the client records, resets it.
	//
	// A record no backend can store (CheckClient) is skipped, not written,
	// and does not keep the others from being stored: PutClient then
	// commits all the storable records and returns an error wrapping
	// ErrUnstorable that names every skipped clientID (QuoteID). Any other
	// error means the storable records were not (or not certainly)
	// written; writing them again is safe.
	PutClient(ctx context.Context, partition string, recs ...ClientRecord) error

	// BindClient binds clientID to actorID in partition unless it is already
	// bound, durably and atomically across processes sharing the store (the
	// first binding wins), and returns the actor the clientID is bound to
	// after the call. It creates a minimal client record (cursor -1, no
	// subscriptions) when none exists; an existing record is left unchanged.
	//
	// The created record has UpdatedAtMs nowMs and WireVersion 0. A
	// clientID or actorID no backend can store (CheckClient) fails with an
	// error wrapping ErrUnstorable and binds nothing.
	BindClient(ctx context.Context, partition, clientID, actorID string, nowMs int64) (boundActor string, err error)

	// Close releases the backend's resources. It does not wait for open
	// PushTx: callers finish them first.
	Close() error
}

// RowVisitor is a Store that hands the rows of a row query to a callback
// one at a time instead of returning them as a slice, so a caller that
// encodes them as it goes (a bootstrap page) holds one row, not the page.
// Every backend implements it (the storagetest contract checks it).
type RowVisitor interface {
	// VisitRows calls fn for each row ScanRows(ctx, partition, q) would
	// return, in the same order, from one consistent read. rec.Values is
	// reused between calls: it is valid only during the call (copy what
	// you keep; rec.RowID and string values are immutable and may be
	// kept). When fn returns an error, VisitRows stops and returns it
	// unwrapped; a storage error is wrapped with %w. A query that matches
	// nothing calls fn zero times. fn runs while the read is open: it
	// must not call back into the store.
	VisitRows(ctx context.Context, partition string, q RowQuery, fn func(rec RowRecord) error) error
}

// BlobCounter is implemented by every backend that implements BlobIndex.
// CountBlobs scans the blob metadata and reference tables (cost grows with
// the number of blobs: meant for operators' views, not the request path).
type BlobCounter interface {
	CountBlobs(ctx context.Context) (BlobCounts, error)
}

// DeadLetters is implemented by every backend's store: an operator's
// actions on dead-lettered reactions. Both act only on a reaction that is
// dead-lettered and report false (nothing written) for any other id.
type DeadLetters interface {
	// RedriveReaction makes the dead-lettered reaction id pending again,
	// due at nowMs, with MaxAttempts more attempts: its attempt count is
	// kept (outcomes are fenced by it, so a late outcome of a claim from
	// before the dead letter cannot match a new claim) and MaxAttempts
	// becomes Attempts+MaxAttempts; its last error is kept until the next
	// attempt.
	RedriveReaction(ctx context.Context, id, nowMs int64) (bool, error)
	// DeleteDeadReaction removes the dead-lettered reaction id.
	DeleteDeadReaction(ctx context.Context, id int64) (bool, error)
}

// TxRowScanner is implemented by every backend's PushTx: ScanRows as the
// transaction sees it (its own staged writes included), for host hooks
// that read candidate state inside the push transaction (the whole-commit
// validator). It has Store.ScanRows' contract (scope match, primary-key
// byte order, AfterRowID, Limit) on the transaction's partition.
type TxRowScanner interface {
	ScanRows(ctx context.Context, q RowQuery) ([]RowRecord, error)
}

// TxClientWriter is implemented by a PushTx that can write client records
// inside the push transaction, so a partition that pushes does not pay a
// write transaction of its own for its buffered client records. PutClients
// has Store.PutClient's contract on the transaction's partition (an
// existing record's ActorID never changes; records CheckClient refuses are
// skipped and named by an error wrapping ErrUnstorable, the others
// written), except that the records are durable exactly when the
// transaction commits and are discarded with it on Rollback.
type TxClientWriter interface {
	PutClients(ctx context.Context, recs ...ClientRecord) error
}

// TxCommittedGate is implemented by a PushTx whose Commit also reads the
// serve gate again once the transaction is durable, one read for the
// whole commit group it shared a COMMIT with. After Commit returned nil,
// CommittedGate returns that read for the transaction's partition, at the
// running version of the transaction's own ReadServeGate call; ok is
// false when there is none (no gate read in the transaction, or the read
// after the COMMIT failed) and always before Commit returned. A reply
// built entirely before Commit may be verified against it: the read
// happened after the commit.
type TxCommittedGate interface {
	CommittedGate() (g ServeGate, ok bool)
}

// PushPrefetcher is implemented by a PushTx that can read many
// idempotency records and rows in one round trip (PostgreSQL). Prefetch
// reads the named keys as they stand in the transaction, so that the
// LookupIdempotency and GetRow calls that follow for them answer from
// memory. It changes no answer: each prefetched value is handed out once,
// a row written in the transaction afterwards (PutRow, DeleteRow) is read
// from the database again, and a record put in the transaction is answered
// from the transaction as before. Keys that are not Storable are skipped;
// keys of unknown tables are the caller's to leave out. An error leaves
// the transaction as usable as a failed LookupIdempotency would.
type PushPrefetcher interface {
	Prefetch(ctx context.Context, idem []IdempotencyKey, rows []RowKey) error
}
