// Package memory is an in-memory storage.Store for unit tests. It keeps
// everything in Go maps, loses it on Close, and passes the storagetest
// contract suite.
//
// Each partition has its own write lock (held by a PushTx from BeginPush to
// Commit or Rollback), so pushes to different partitions run in parallel.
// A PushTx stages its writes in an overlay with an undo log (for
// savepoints) and publishes them atomically on Commit; readers only ever
// see committed state.
//
// Share returns a second handle on the same data with its own running
// schema version, standing in for a second process. The writer fence is
// simulated in Go: AppendCommit fails with storage.ErrWriterFenced when the
// partition's fence is above the handle's running version (0 before
// EnsureSchema), and Commit checks again under the database lock.
// AdvanceCheckpoint checks the owner epoch when called and publishes with
// Commit (undone by Rollback and RollbackToSavepoint).
//
// Backfill checkpoints (RFC 0007), readings chosen where the notes leave
// questions open (the safe answer each time):
//   - EnsureSchema has no memoized fast path: every call, including a
//     same-version restart, re-checks for checkpoints at the running
//     version that are neither activated nor declared by the caller
//     (storage.ErrCheckpointIncomplete, after the schema is made current).
//     The check, like the serve gate's pending list, is database-wide.
//   - Declarations are validated (non-empty partition and name, schema
//     version >= 1) before anything is written, on every EnsureSchema call,
//     so an invalid one fails a bump without touching marker or rows.
//   - A stored marker above the running version is storage.ErrSchemaNewer
//     (a sentinel the engine can map to sync.schema_not_ready, not a plain
//     error).
//   - AdvanceCheckpoint has no state check (as the contract says) and,
//     having no clock argument, stamps updated_at_ms from the wall clock.
//     ClaimCheckpoint overwrites schema_version; a claim above the fence
//     makes activation fail with storage.ErrCheckpointFenceMissing.
//   - After Unverifiable the runner re-activates with a watermark at or
//     above the partition's horizon (the stored history is gone).
//   - Checkpoint calls, ReadServeGate and PruneThrough need EnsureSchema
//     first, like every other call.
package memory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
)

// Store is an in-memory storage.Store handle. The zero value is not usable;
// call New. Handles made by Share see the same data (like two processes on
// one database) but each has its own running schema version.
type Store struct {
	d *db

	mu     sync.Mutex // guards sch and closed
	sch    *schema.Schema
	closed bool
}

// db is the state shared by every handle of one in-memory database. Lock
// order: db.mu before part.mu; neither is held while waiting for a
// partition's write lock.
type db struct {
	mu     sync.Mutex
	parts  map[string]*part
	marker int32 // stored schema version, 0 before the first EnsureSchema
	cps    map[storage.CheckpointRef]*storage.Checkpoint
	fences map[string]int32 // partition -> required writer version
}

var _ storage.Store = (*Store)(nil)

// New returns an empty store. EnsureSchema must run before anything else.
func New() *Store {
	return &Store{d: &db{
		parts:  map[string]*part{},
		cps:    map[storage.CheckpointRef]*storage.Checkpoint{},
		fences: map[string]int32{},
	}}
}

// Share returns a second handle on the same data with its own running
// schema version (EnsureSchema has not run on it), standing in for a
// second process on one database. Closing one handle does not close the
// other.
func (s *Store) Share() *Store { return &Store{d: s.d} }

// running returns the handle's running schema version (0 before
// EnsureSchema).
func (s *Store) running() int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sch == nil {
		return 0
	}
	return s.sch.Version
}

type idemKey struct{ client, commit string }

// part is one partition. lock is its write lock (a one-slot semaphore so
// waiting honours context cancellation); mu guards the committed state.
type part struct {
	lock chan struct{}

	mu      sync.RWMutex
	info    storage.PartitionInfo
	rows    map[string]map[string]storage.RowRecord // table -> rowID -> row
	commits []storage.CommitRecord                  // commits[i].Seq == i+1
	// scopeIdx maps table -> "var\x00value" -> ascending seqs of commits
	// with at least one change of table carrying that scope value.
	scopeIdx map[string]map[string][]int64
	idem     map[idemKey]storage.IdempotencyRecord
	clients  map[string]storage.ClientRecord
}

func newPart(name string) *part {
	return &part{
		lock:     make(chan struct{}, 1),
		info:     storage.PartitionInfo{Partition: name},
		rows:     map[string]map[string]storage.RowRecord{},
		scopeIdx: map[string]map[string][]int64{},
		idem:     map[idemKey]storage.IdempotencyRecord{},
		clients:  map[string]storage.ClientRecord{},
	}
}

// schemaAndPart returns the ensured schema and the partition's state,
// allocating the (not yet existing) partition state on first use.
func (s *Store) schemaAndPart(name string) (*schema.Schema, *part, error) {
	s.mu.Lock()
	closed, sch := s.closed, s.sch
	s.mu.Unlock()
	if closed {
		return nil, nil, fmt.Errorf("memory: store is closed")
	}
	if sch == nil {
		return nil, nil, storage.ErrSchemaNotEnsured
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	p := s.d.parts[name]
	if p == nil {
		p = newPart(name)
		s.d.parts[name] = p
	}
	return sch, p, nil
}

// create makes the partition exist with a fresh epoch; p.mu must be held.
func (p *part) create() error {
	if p.info.Exists {
		return nil
	}
	ep, err := newEpoch()
	if err != nil {
		return err
	}
	p.info.Exists = true
	p.info.LogEpoch = ep
	return nil
}

// TouchPartition returns the partition's entry, creating it on first
// contact with a random 128-bit epoch.
func (s *Store) TouchPartition(ctx context.Context, partition string, nowMs int64) (storage.PartitionInfo, error) {
	if err := ctx.Err(); err != nil {
		return storage.PartitionInfo{}, err
	}
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return storage.PartitionInfo{}, fmt.Errorf("memory: touch partition %q: %w", partition, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.create(); err != nil {
		return storage.PartitionInfo{}, fmt.Errorf("memory: touch partition %q: %w", partition, err)
	}
	return p.info, nil
}

// ReadPartition returns the committed entry; Exists is false if the
// partition was never created.
func (s *Store) ReadPartition(ctx context.Context, partition string) (storage.PartitionInfo, error) {
	if err := ctx.Err(); err != nil {
		return storage.PartitionInfo{}, err
	}
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return storage.PartitionInfo{}, fmt.Errorf("memory: read partition %q: %w", partition, err)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.info, nil
}

// RotateLogEpoch takes the partition's write lock (honouring ctx while
// waiting), creates the partition if needed, sets a new epoch, marks it
// required and deletes the partition's client records.
func (s *Store) RotateLogEpoch(ctx context.Context, partition string, nowMs int64) (string, error) {
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return "", fmt.Errorf("memory: rotate epoch of %q: %w", partition, err)
	}
	if err := p.acquire(ctx); err != nil {
		return "", fmt.Errorf("memory: rotate epoch of %q: %w", partition, err)
	}
	defer p.release()
	ep, err := newEpoch()
	if err != nil {
		return "", fmt.Errorf("memory: rotate epoch of %q: %w", partition, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.info.Exists = true
	p.info.LogEpoch = ep
	p.info.EpochRequired = true
	p.clients = map[string]storage.ClientRecord{}
	return ep, nil
}

func (p *part) acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case p.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *part) release() { <-p.lock }

// LookupIdempotency returns the committed record, or nil.
func (s *Store) LookupIdempotency(ctx context.Context, partition, clientID, clientCommitID string) (*storage.IdempotencyRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return nil, fmt.Errorf("memory: lookup idempotency: %w", err)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	rec, ok := p.idem[idemKey{clientID, clientCommitID}]
	if !ok {
		return nil, nil
	}
	rec = copyIdem(rec)
	return &rec, nil
}

// GetClient returns a copy of the client record, or nil.
func (s *Store) GetClient(ctx context.Context, partition, clientID string) (*storage.ClientRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return nil, fmt.Errorf("memory: get client: %w", err)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	rec, ok := p.clients[clientID]
	if !ok {
		return nil, nil
	}
	rec.Subscriptions = cloneBytes(rec.Subscriptions)
	return &rec, nil
}

// PutClient stores a copy of rec, replacing any previous record.
func (s *Store) PutClient(ctx context.Context, partition string, recs ...storage.ClientRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return fmt.Errorf("memory: put client: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, rec := range recs {
		rec.Subscriptions = cloneBytes(rec.Subscriptions)
		p.clients[rec.ClientID] = rec
	}
	return nil
}

// Close marks the store closed; later calls fail.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

func newEpoch() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("random epoch: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
