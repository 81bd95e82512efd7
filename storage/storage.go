// Package storage defines the storage contract synclane's engine runs on:
// the per-partition commit log with its changes and scope index, the
// relational row tables of the synced schema (one row per (partition,
// primary key), each with a server version), idempotency records, the
// partition registry (log epoch, max commitSeq, horizon) and client records.
//
// The contract is cut into roles (roles.go), one small interface per
// domain: Lifecycle, Log (with its PushTx), Rows, Clients, Checkpoints,
// Retention, Snapshots, Leases, Reactions, BlobIndex, Querier and
// AdminReader, plus the optional fast paths RowEncoder and ImageCopier.
// A backend gathers the roles it has in one Backend value; a role it lacks
// is a nil field, and the engine checks at start that every feature it is
// configured with has its role. Nobody discovers a role by type assertion.
//
// Implementations live in subpackages (memory, sqlite, postgres), each
// building its Backend, and all pass the contract suite in
// storage/storagetest, which runs each role's cases on every backend that
// has the role.
//
// Concurrency contract: any number of goroutines may call a backend's
// roles at once.
// A PushTx holds its partition's write lock from BeginPush until Commit or
// Rollback, so two PushTx for one partition never overlap, in one process
// or (for shared backends) across processes. Readers never see a commit
// before its PushTx committed.
//
// Unstorable values (limits.go): every backend refuses the same writes no
// backend can store (ErrUnstorable, checked before anything is written:
// CheckPartition, CheckCommit, CheckIdempotency, CheckRow, CheckClient),
// so one client's bad data never fails another's commit in a group
// commit. Reads treat a key or scope value that is not Storable as absent:
// it matches nothing and is never sent to the database.
package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
)

// Sentinel errors. Implementations wrap them with %w and add context.
var (
	// ErrConstraint reports a relational constraint violation (unique index,
	// NOT NULL, ...) on a row write, classified from the driver's structured
	// error code (never from message text). PutRow also wraps it, together
	// with ErrUnstorable, around a row no backend can store (CheckRow). The
	// caller rolls back to its savepoint and rejects the commit with
	// sync.constraint_violation.
	ErrConstraint = errors.New("storage: constraint violation")
	// ErrConflictingSeq reports that AppendCommit was given a seq other than
	// MaxCommitSeq+1 for the transaction's partition.
	ErrConflictingSeq = errors.New("storage: commit seq is not max+1")
	// ErrTxDone reports use of a PushTx after Commit or Rollback.
	ErrTxDone = errors.New("storage: transaction already finished")
	// ErrSchemaNotEnsured reports a call that needs EnsureSchema first.
	ErrSchemaNotEnsured = errors.New("storage: EnsureSchema has not run")
	// ErrSchemaNewer reports that the database holds a schema version newer
	// than the one EnsureSchema was given.
	ErrSchemaNewer = errors.New("storage: stored schema version is newer than the running one")
	// ErrSchemaChanged reports that the database holds a different schema
	// (by schema.Schema.Fingerprint) at the version EnsureSchema was given:
	// the schema was edited without bumping its version. Nothing is
	// changed; the fix is a higher version.
	ErrSchemaChanged = errors.New("storage: the schema differs from the one stored at the same version; bump the schema version")
)

// Lifecycle is the role that makes a backend current for the synced
// schema and releases it. Every backend has it.
type Lifecycle interface {
	// EnsureSchema creates (or migrates to) the system tables and one row
	// table per synced table of s. It is idempotent and must run before any
	// other call. Migration adds tables, columns and indexes; it never drops
	// data. A stored schema version above s.Version fails with ErrSchemaNewer.
	// The store keeps s.Fingerprint() with the version: at an equal version
	// a different stored fingerprint fails with ErrSchemaChanged before
	// anything is changed, and a missing one (a store from before
	// fingerprints) is adopted.
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

	// Close releases the backend's resources (every role of its Backend).
	// It does not wait for open PushTx: callers finish them first.
	Close() error
}

// Log is the role of the per-partition commit log: the partition registry
// (log epoch, max commitSeq, horizon), the push transaction that appends
// to the log and writes the rows, idempotency lookups and change scans.
// Every backend has it.
type Log interface {
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
	// On a backend with the Ownership role, a fence ctx carries (WithFence)
	// is checked under that lock: a stale one fails with ErrOwnershipLost
	// and no transaction is opened.
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

	// LatestScopeCommit returns the newest seq <= q.UpToSeq of a commit
	// with a change of q.Table whose stored value of scope variable q.Var
	// is one of q.Values — the candidates the scope index gives ScanChanges
	// for a query whose first variable (in name order) is q.Var — or 0 when
	// there is none above the horizon. It reads the scope index: one seek
	// per value, whatever the log's length. It is the SQLite-lane scope pin
	// of SPEC §4.7 before the horizon raises it.
	LatestScopeCommit(ctx context.Context, partition string, q ScopeCommitQuery) (int64, error)
}

// Rows is the role that reads the committed rows of the synced tables
// (bootstraps, backfills, host reads). Every backend has it; the optional
// fast paths RowEncoder and ImageCopier (rowvisit.go) read the same rows.
type Rows interface {
	// ScanRows returns up to q.Limit current rows of q.Table in the
	// partition whose scope columns match q.Scopes, ordered by primary key
	// in the key's native order (keys.go: byte order for string and json
	// keys, numeric for integer keys, false before true), strictly after
	// q.AfterRowID when it is non-nil (AfterKey).
	ScanRows(ctx context.Context, partition string, q RowQuery) ([]RowRecord, error)

	// VisitRows calls fn for each row ScanRows(ctx, partition, q) would
	// return, in the same order, from one consistent read, instead of
	// returning them as a slice, so a caller that encodes them as it goes
	// (a bootstrap page) holds one row, not the page. rec.Values is
	// reused between calls: it is valid only during the call (copy what
	// you keep; rec.RowID and string values are immutable and may be
	// kept). When fn returns an error, VisitRows stops and returns it
	// unwrapped; a storage error is wrapped with %w. A query that matches
	// nothing calls fn zero times. fn runs while the read is open: it
	// must not call back into the store.
	VisitRows(ctx context.Context, partition string, q RowQuery, fn func(rec RowRecord) error) error
}

// Clients is the role that stores the server's client records (clientId
// to actor binding, registered subscriptions, cursor watermark). Every
// backend has it.
type Clients interface {
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

	// BindClients is BindClient for several clientIDs of partition in one
	// durable write: one transaction (SQLite: one member of the push
	// commit group, so one fsync shared with every other partition's
	// writes waiting then; PostgreSQL: one transaction, one WAL flush),
	// and no binding is returned before all of them are durable. Its i-th
	// answer is binds[i]'s: the actor the clientID is bound to after the
	// call and whether this call created its minimal record (cursor -1, no
	// subscriptions, UpdatedAtMs nowMs, WireVersion 0), so a caller that
	// created it knows the stored record without reading it back. A
	// clientID may appear twice: the first occurrence's actor wins, as
	// between two callers. Unlike BindClient it does not read before it
	// writes: the caller has looked the clientIDs up already. A binding no
	// backend can store (CheckClient) fails the call with an error
	// wrapping ErrUnstorable and binds nothing; any other error means
	// nothing is known to be bound (binding again is safe).
	BindClients(ctx context.Context, partition string, nowMs int64, binds ...ClientBinding) ([]BoundClient, error)

	// AdvanceClients persists realtime acknowledgements (SPEC §8.2), all
	// in one transaction that first checks the partition's log epoch is
	// logEpoch (under a lock RotateLogEpoch's transaction conflicts with,
	// so a rotation is wholly before or after it). For each ack, the
	// existing record of a.ClientID bound to a.ActorID gets cursor =
	// max(cursor, a.Cursor) and UpdatedAtMs = max(UpdatedAtMs, a.AtMs);
	// nothing else of the record changes (subscriptions, wire version and
	// actor written by a concurrent sync round stay). A missing record is
	// never created, and one bound to another actor, another epoch (a
	// delayed ack from before a rotation) or a partition never created
	// change nothing. It returns how many records it updated; an
	// unstorable clientID or actorID counts as missing.
	AdvanceClients(ctx context.Context, partition, logEpoch string, acks ...ClientAdvance) (applied int, err error)
}

// ClientHandOver is the role that takes over the client records a
// partition's deposed owner still buffered (cluster mode: another member
// claimed the partition before the owner wrote them back, so the fence
// refuses its Clients.PutClient). Those records are the last rounds of
// their clients the deposed owner served; dropping them would leave each
// client's stored record at an older round. A store with the Ownership
// role should have it (PostgreSQL has both; memory has it too, for tests).
type ClientHandOver interface {
	// HandOverClients writes recs, client records of partition at log
	// epoch logEpoch, ignoring any fence ctx carries, all in one
	// transaction that first checks the partition's log epoch is logEpoch
	// (under a lock RotateLogEpoch's transaction conflicts with, as
	// AdvanceClients does); at another epoch, or for a partition never
	// created, it writes nothing and returns 0 (the records belong to an
	// epoch whose records were deleted). Each record is created when the
	// partition holds none for its clientID, and replaces the stored one
	// only when that one is bound to the same actor and is not newer (its
	// UpdatedAtMs at most rec's); otherwise the stored record stays as it
	// is. So a record written meanwhile from a later round of the client
	// (by the partition's new owner, whose writes are fenced as usual) is
	// never replaced by an earlier one, and the stored ActorID never
	// changes. (An equal UpdatedAtMs is replaced: a client's first round
	// is served in the millisecond BindClient stamped its minimal record
	// with, while two rounds of one client on two members within one
	// millisecond do not happen.) It returns how many records it created
	// or replaced.
	//
	// A record no backend can store (CheckClient) is skipped as PutClient
	// skips it: the others are written and the error wraps ErrUnstorable,
	// naming the skipped clientIDs. Any other error means nothing was (or
	// not certainly) written; handing the same records over again is safe.
	HandOverClients(ctx context.Context, partition, logEpoch string, recs ...ClientRecord) (written int, err error)
}

// ClientBinding is one clientId → actor binding Clients.BindClients makes.
type ClientBinding struct {
	ClientID, ActorID string
}

// BoundClient is Clients.BindClients' answer for one binding: the actor
// the clientID is bound to, and whether the call created its record.
type BoundClient struct {
	ActorID string
	Created bool
}

// CheckBindings checks every binding of BindClients with CheckClient; the
// first refusal is returned.
func CheckBindings(partition string, binds []ClientBinding) error {
	for _, b := range binds {
		if err := CheckClient(partition, ClientRecord{ClientID: b.ClientID, ActorID: b.ActorID}); err != nil {
			return err
		}
	}
	return nil
}

// ClientAdvance is one acknowledgement Clients.AdvanceClients persists:
// the session's actor, the acked cursor and when it arrived (Unix ms).
type ClientAdvance struct {
	ClientID string
	ActorID  string
	Cursor   int64
	AtMs     int64
}

// PartitionInfo is a partition registry entry.
type PartitionInfo struct {
	Partition     string
	Exists        bool
	LogEpoch      string
	EpochRequired bool
	MaxCommitSeq  int64
	HorizonSeq    int64
}

// PushTx is a write transaction on one partition holding its write lock.
// It is used by one goroutine at a time. Every backend's PushTx has every
// method: the parts of other roles (CheckpointTx, BlobTx, ReactionTx)
// write in the push transaction whether or not the backend has their
// store-level role, and the batch paths (Prefetch, PutClients,
// CommittedGate) have contracts every backend meets.
type PushTx interface {
	CheckpointTx
	BlobTx
	ReactionTx

	// Partition returns the registry entry as read under the lock; its
	// MaxCommitSeq follows the AppendCommit calls made in this transaction.
	Partition() PartitionInfo

	// LookupIdempotency is the authoritative idempotency check under the lock.
	LookupIdempotency(ctx context.Context, clientID, clientCommitID string) (*IdempotencyRecord, error)

	// GetRow returns the current row (as seen by this transaction), or nil
	// (also for a rowID that is not Storable, without asking the database).
	GetRow(ctx context.Context, t *schema.Table, rowID string) (*RowRecord, error)

	// Savepoint marks a point RollbackToSavepoint returns to. Savepoints do
	// not nest: a new Savepoint replaces the previous one.
	Savepoint(ctx context.Context) error
	// RollbackToSavepoint undoes every write since the last Savepoint and
	// keeps the transaction open.
	RollbackToSavepoint(ctx context.Context) error
	// ReleaseSavepoint keeps the writes since the last Savepoint.
	ReleaseSavepoint(ctx context.Context) error

	// PutRow inserts or replaces the row rec.RowID of t with rec.Values,
	// rec.Version and rec.ColumnVersions (stored as given, nil as NULL).
	// A violated constraint returns an error wrapping ErrConstraint; the
	// caller must then RollbackToSavepoint. A row no backend can store
	// (CheckRow) returns an error wrapping ErrUnstorable and ErrConstraint
	// before anything is written. PutRow leaves the row's tombstone alone
	// (ClearTombstone removes it).
	PutRow(ctx context.Context, t *schema.Table, rec RowRecord) error
	// DeleteRow deletes the row if it exists and records its tombstone
	// (SPEC §2.2): (partition, table, rowID, tombstoneSeq), replacing an
	// earlier tombstone of the row. tombstoneSeq is the seq of the commit
	// the delete belongs to (>= 1). Both writes are undone together by
	// RollbackToSavepoint and Rollback. The tombstone is recorded whether
	// or not the row existed (the caller decides when a delete leaves
	// one), except for a rowID CheckTombstone refuses: no such row can
	// exist, and it gets none.
	DeleteRow(ctx context.Context, t *schema.Table, rowID string, tombstoneSeq int64) error
	// Tombstone returns the commit seq of the row's tombstone as this
	// transaction sees it, or 0 when the row has none (also for a rowID
	// CheckTombstone refuses, without asking the database). Pruning
	// removes tombstones at or below the horizon (Retention), but a
	// caller that must ignore older ones compares the seq with the
	// horizon itself.
	Tombstone(ctx context.Context, t *schema.Table, rowID string) (int64, error)
	// ClearTombstone removes the row's tombstone, if any (an insert over an
	// absent row clears it, SPEC §2.2). RollbackToSavepoint and Rollback
	// undo it.
	ClearTombstone(ctx context.Context, t *schema.Table, rowID string) error

	// AppendCommit appends c to the log; c.Seq must be MaxCommitSeq+1. A
	// commit rejected by the partition's writer fence fails with an error
	// wrapping ErrWriterFenced (possibly only at Commit on backends that
	// defer log writes); the transaction must then be rolled back.
	//
	// A commit no backend can store (CheckCommit) fails here, on every
	// backend, with an error wrapping ErrUnstorable and nothing of it
	// appended: after RollbackToSavepoint the other commits of the
	// transaction commit normally. Backends that defer log writes to Commit
	// never fail Commit because of one commit's data.
	AppendCommit(ctx context.Context, c CommitRecord) error
	// PutIdempotency stores the outcome of a commit (applied or rejected).
	// A record no backend can store (CheckIdempotency) fails with an error
	// wrapping ErrUnstorable and nothing written. The record's log
	// position is the transaction's MaxCommitSeq at the call (an applied
	// commit's own seq when called after its AppendCommit); PruneBatch
	// deletes a rejected record once the horizon reaches it.
	PutIdempotency(ctx context.Context, rec IdempotencyRecord) error

	// ScanRows is Rows.ScanRows as the transaction sees it (its own staged
	// writes included), for host hooks that read candidate state inside
	// the push transaction (the whole-commit validator). It has
	// Rows.ScanRows' contract (scope match, primary-key order,
	// AfterRowID, Limit) on the transaction's partition.
	ScanRows(ctx context.Context, q RowQuery) ([]RowRecord, error)

	// Query runs the registered query q on the transaction's partition
	// inside the transaction, so it reads the candidate state: the rows
	// as the writes staged so far in this transaction leave them (host
	// hooks and commands, SPEC §6.7-6.8). It is read-only in effect: a
	// statement that tries to write fails with ErrQueryFailed and leaves
	// nothing written. Unlike Querier.Query it reads no serve gate (the
	// transaction read it), and QueryResult.MaxCommitSeq is the
	// transaction's (Partition().MaxCommitSeq). It fails with
	// ErrQueryTooLarge or ErrQueryFailed, after which the transaction
	// stays usable, with ErrTxQueryUnsupported on a backend without SQL
	// (every backend without the Queries role), or with a storage error,
	// after which the transaction must be rolled back. A Query q
	// RenderQuery refuses fails before anything is sent.
	Query(ctx context.Context, q Query) (QueryResult, error)

	// ScanByColumn returns, as the transaction sees them (its own staged
	// writes included), up to q.Limit rows of q.Table whose column
	// q.Column equals q.Value, ordered by primary key, strictly after
	// q.AfterRowID when it is non-nil, each with its ColumnVersions. It is
	// how the partition finds the children of a deleted parent row (SPEC
	// §6.11): backends read them through the reference column's index
	// (schema.Table.ReferenceIndexIdent), which EnsureSchema creates for
	// every declared reference. A query ColumnQuery.Check refuses fails
	// before anything is read.
	ScanByColumn(ctx context.Context, q ColumnQuery) ([]RowRecord, error)

	// PutClients writes client records inside the push transaction, so a
	// partition that pushes does not pay a write transaction of its own
	// for its buffered client records. It has Clients.PutClient's
	// contract on the transaction's partition (an existing record's
	// ActorID never changes; records CheckClient refuses are skipped and
	// named by an error wrapping ErrUnstorable, the others written),
	// except that the records are durable exactly when the transaction
	// commits and are discarded with it on Rollback (and by
	// RollbackToSavepoint when written after the savepoint). Any other
	// error is a storage failure of the transaction.
	PutClients(ctx context.Context, recs ...ClientRecord) error

	// CommittedGate returns the serve gate a backend read again once the
	// transaction was durable, when it does so (SQLite: one read for the
	// whole commit group it shared a COMMIT with). After Commit returned
	// nil, it returns that read for the transaction's partition, at the
	// running version of the transaction's own ReadServeGate call; ok is
	// false when there is none (a backend that does not read the gate
	// after its COMMIT, no gate read in the transaction, or the read
	// after the COMMIT failed) and always before Commit returned. A reply
	// built entirely before Commit may be verified against it: the read
	// happened after the commit.
	CommittedGate() (g ServeGate, ok bool)

	// Prefetch announces the idempotency records and rows the calls that
	// follow will look up, so a backend that can read many of them in one
	// round trip (PostgreSQL) does so and answers the LookupIdempotency
	// and GetRow calls that follow for them from memory (and, for a row
	// that is absent, the Tombstone call that may follow); a backend that
	// cannot may do nothing and return nil. It changes no answer: each
	// prefetched value is handed out once, a row or tombstone written in
	// the transaction afterwards (PutRow, DeleteRow, ClearTombstone) is
	// read from the database again, and a record put in the transaction is answered
	// from the transaction as before. Keys that are not Storable are
	// skipped; keys of unknown tables are the caller's to leave out. The
	// slices are not kept after the call. An error leaves the
	// transaction as usable as a failed LookupIdempotency would.
	Prefetch(ctx context.Context, idem []IdempotencyKey, rows []RowKey) error

	// Commit makes every write durable at once and releases the lock.
	Commit(ctx context.Context) error
	// Rollback discards the transaction and releases the lock. It is a no-op
	// after Commit, so `defer tx.Rollback(ctx)` is always safe.
	Rollback(ctx context.Context) error
}

// IdempotencyKey names one idempotency record of a partition.
type IdempotencyKey struct {
	ClientID, ClientCommitID string
}

// RowKey names one row of a partition.
type RowKey struct {
	Table *schema.Table
	RowID string
}

// RowRecord is one stored row.
type RowRecord struct {
	RowID   string
	Version int64    // server_version >= 1
	Values  ssp2.Row // full row in column order; Values[t.PK] == RowID
	// ColumnVersions are the row's column versions (SPEC §2.2). PushTx
	// reads (GetRow, ScanRows) fill them; Rows.ScanRows and VisitRows
	// (bootstraps, which never need them) may leave them nil.
	ColumnVersions ColumnVersions
}

// ChangeRecord is one change of a commit.
type ChangeRecord struct {
	Table      string
	RowID      string
	Op         ssp2.OpKind
	RowVersion int64             // upserts only (0 for deletes)
	Scopes     map[string]string // scope var -> value
	Row        []byte            // row-codec bytes, upserts only
}

// CommitRecord is one appended commit.
type CommitRecord struct {
	Seq            int64
	CreatedAtMs    int64
	ActorID        string
	ClientID       string
	ClientCommitID string
	Changes        []ChangeRecord
}

// IdempotencyRecord is the durable outcome of (partition, clientID,
// clientCommitID).
type IdempotencyRecord struct {
	ClientID       string
	ClientCommitID string
	Status         ssp2.CommitStatus // CommitApplied or CommitRejected
	CommitSeq      int64             // 0 when rejected
	// Result is the engine's encoding of the result records; opaque here.
	Result []byte
}

// ChangeQuery selects changes for an incremental pull.
type ChangeQuery struct {
	Table string
	// Scopes is the effective scope map: a change matches iff, for every
	// var in Scopes, its stored value for that var is in the list.
	Scopes       map[string][]string
	AfterSeq     int64
	UpToSeq      int64
	LimitChanges int
}

// ScopeCommitQuery selects the scope index entries Log.LatestScopeCommit
// reads: changes of Table carrying one of Values for scope variable Var,
// in commits up to UpToSeq.
type ScopeCommitQuery struct {
	Table   string
	Var     string
	Values  []string
	UpToSeq int64
}

// CommitChanges is one commit with the changes a ChangeQuery selected.
type CommitChanges struct {
	Seq         int64
	CreatedAtMs int64
	ActorID     string
	Changes     []ChangeRecord
}

// ChangeScan is the answer to ScanChanges.
type ChangeScan struct {
	Commits   []CommitChanges
	Truncated bool
}

// RowQuery selects one bootstrap page.
type RowQuery struct {
	Table *schema.Table
	// Scopes is the effective scope map keyed by scope var; a row matches
	// iff, for every var, the value of the var's column is in the list.
	Scopes     map[string][]string
	AfterRowID *string
	Limit      int
}

// ColumnQuery selects rows of one table by one column's value
// (PushTx.ScanByColumn).
type ColumnQuery struct {
	Table *schema.Table
	// Column is the index of the column in Table.Columns; Value a non-nil
	// value of its Go type (ssp2.Row's types).
	Column int
	Value  any
	// AfterRowID, when non-nil, starts strictly after that primary key.
	AfterRowID *string
	// Limit is 1 to MaxColumnQueryLimit.
	Limit int
}

// MaxColumnQueryLimit is the largest page ScanByColumn returns.
const MaxColumnQueryLimit = 1000

// Check refuses a query no backend answers: a column outside t, a nil
// value or one that does not fit the column's type (ValueFits), a limit
// outside 1-MaxColumnQueryLimit, an AfterRowID that is not Storable (no
// stored row has such a primary key, and PostgreSQL would fail the
// transaction on it: a page's AfterRowID is the last row of the page
// before).
func (q ColumnQuery) Check(t *schema.Table) error {
	switch {
	case q.Column < 0 || q.Column >= len(t.Columns):
		return fmt.Errorf("scan by column: table %q has no column %d", t.Name, q.Column)
	case q.Value == nil || !ValueFits(t.Columns[q.Column], q.Value):
		return fmt.Errorf("scan by column: %T is not a value of %q.%q", q.Value, t.Name, t.Columns[q.Column].Name)
	case q.Limit < 1 || q.Limit > MaxColumnQueryLimit:
		return fmt.Errorf("scan by column: limit %d outside 1-%d", q.Limit, MaxColumnQueryLimit)
	case q.AfterRowID != nil && !Storable(*q.AfterRowID):
		return fmt.Errorf("scan by column: after row id %s is not a stored primary key (not valid UTF-8 or holds U+0000)", QuoteID(*q.AfterRowID))
	}
	return nil
}

// ClientRecord is the server's record of one client in a partition.
type ClientRecord struct {
	ClientID string
	ActorID  string
	// Subscriptions is the engine's encoding of the registered
	// subscriptions; opaque here.
	Subscriptions json.RawMessage
	Cursor        int64
	WireVersion   uint16
	UpdatedAtMs   int64
}
