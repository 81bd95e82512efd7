package storage

import (
	"context"
	"errors"
	"fmt"
)

// Backfill checkpoints, the writer fence and the serve gate (RFC 0007).
//
// A checkpoint names a backfill that a schema version needs before its data
// may be served. Declaring it raises the partition's writer fence to its
// schema version, so commit appends from older binaries are rejected by the
// database itself (a trigger), without their cooperation. The serve gate is
// what every request reads on entry and again before it answers: the stored
// schema version, the partition's log epoch and the pending checkpoints.

// Checkpoint-related errors. Implementations wrap them with %w.
var (
	// ErrCheckpointNotDeclared: no such checkpoint, or (for claim) it is
	// already activated.
	ErrCheckpointNotDeclared = errors.New("storage: checkpoint_not_declared")
	// ErrCheckpointFenceMissing: activation found no writer fence for the
	// partition, or one below the checkpoint's schema version.
	ErrCheckpointFenceMissing = errors.New("storage: checkpoint_fence_missing")
	// ErrCheckpointIncomplete: EnsureSchema found a checkpoint at the
	// running schema version that is neither activated nor declared by the
	// caller. The schema itself has been made current; the serve gate
	// refuses requests until the checkpoint is activated.
	ErrCheckpointIncomplete = errors.New("storage: checkpoint_incomplete")
	// ErrWriterFenced: the database's writer fence rejected a commit append
	// because this store's running schema version is below the partition's
	// required writer version (the trigger's sync.storage.writer_fence_rejected),
	// classified from the driver's structured error, never from text.
	ErrWriterFenced = errors.New("storage: writer_fence_rejected")
)

// CheckpointState is the lifecycle state of a checkpoint.
type CheckpointState string

// Checkpoint states (enforced by a database CHECK). Activated is final for
// its schema version.
const (
	CheckpointDeclared    CheckpointState = "declared"
	CheckpointBackfilling CheckpointState = "backfilling"
	CheckpointActivated   CheckpointState = "activated"
)

// CheckpointDeclaration names a checkpoint a process installs with its
// schema version.
type CheckpointDeclaration struct {
	Partition     string
	Name          string
	SchemaVersion int32
}

// Validate rejects declarations no backend could store: an empty partition
// or name, or a schema version below 1.
func (d CheckpointDeclaration) Validate() error {
	if d.Partition == "" || d.Name == "" {
		return fmt.Errorf("invalid checkpoint declaration %q/%q: empty partition or name", d.Partition, d.Name)
	}
	if d.SchemaVersion < 1 {
		return fmt.Errorf("invalid checkpoint declaration %s/%s: schema version %d < 1", d.Partition, d.Name, d.SchemaVersion)
	}
	return nil
}

// Checkpoint is a stored checkpoint.
type Checkpoint struct {
	Partition     string
	Name          string
	SchemaVersion int32
	State         CheckpointState
	// Watermark is the highest source commit seq the projection reflects.
	Watermark int64
	// OwnerEpoch fences backfill runners: the holder of the current epoch
	// owns the checkpoint.
	OwnerEpoch   int64
	ObservedRows int64
	UpdatedAtMs  int64
}

// ActivationOutcome is the result of ActivateCheckpoint.
type ActivationOutcome string

// Activation outcomes. Stale and Unverifiable leave the row unchanged.
const (
	// Activated: the checkpoint is now activated at the given watermark.
	Activated ActivationOutcome = "activated"
	// Stale: a source table changed above the watermark, the owner epoch is
	// not the current one, or the row is already activated.
	Stale ActivationOutcome = "stale"
	// Unverifiable: the source history above the watermark was pruned
	// (horizon > watermark), so coverage cannot be proven.
	Unverifiable ActivationOutcome = "unverifiable"
)

// CheckpointRef names a checkpoint.
type CheckpointRef struct {
	Partition string
	Name      string
}

// ServeGate is what a request reads to decide whether it may be served.
// It is never memoized by the store.
type ServeGate struct {
	// StoredSchemaVersion is the database's schema marker (0 when absent).
	StoredSchemaVersion int32
	// LogEpoch is the request partition's log epoch ("" when unregistered).
	LogEpoch string
	// Pending lists every checkpoint, across all partitions, at the running
	// schema version that is not activated, ordered by (partition, name).
	Pending []CheckpointRef
	// HorizonSeq is the request partition's horizon (0 when unregistered),
	// read in the same snapshot: a reply built from the log is released
	// only for cursors at or above the horizon read after it was built.
	HorizonSeq int64
	// OwnerGeneration is the request partition's ownership generation
	// (the Ownership role's; 0 on a backend without it, for an unclaimed
	// or unregistered partition), read in the same snapshot. A cluster
	// member compares it with the generation it claimed, so a reply built
	// after another member claimed the partition is never released: reads
	// are fenced like writes.
	OwnerGeneration int64
}

// Checkpoints is the Checkpoints role of a backend: backfill
// checkpoints, the writer fence and the serve gate every request reads.
// Every backend has it.
type Checkpoints interface {
	// DeclareCheckpoint inserts the checkpoint as declared if absent
	// (watermark, owner epoch and observed rows 0) and raises the
	// partition's writer fence to max(current, d.SchemaVersion), in one
	// transaction. Re-declaring returns the existing row unchanged, even
	// an activated one.
	DeclareCheckpoint(ctx context.Context, d CheckpointDeclaration, nowMs int64) (Checkpoint, error)

	// ClaimCheckpoint increments the owner epoch of a non-activated
	// checkpoint, moves declared to backfilling and sets its schema version
	// to d.SchemaVersion, in one statement; concurrent claims get distinct
	// epochs. A missing or activated checkpoint is ErrCheckpointNotDeclared.
	ClaimCheckpoint(ctx context.Context, d CheckpointDeclaration, nowMs int64) (Checkpoint, error)

	// ActivateCheckpoint runs under the partition write lock (the lock
	// pushes take): a missing checkpoint or fence, or a fence below the
	// checkpoint's version, is ErrCheckpointFenceMissing; a source change
	// (any change of a table in sources) above watermark is Stale; a
	// horizon above watermark is Unverifiable; otherwise the row becomes
	// activated with the given watermark if epoch is its owner epoch and it
	// is not activated yet (Activated), else Stale.
	ActivateCheckpoint(ctx context.Context, partition, name string, epoch, watermark int64, sources []string, nowMs int64) (ActivationOutcome, error)

	// ReadCheckpoints returns every checkpoint ordered by (partition, name).
	ReadCheckpoints(ctx context.Context) ([]Checkpoint, error)

	// ReadServeGate reads the gate for a request to partition by a process
	// running schema version running, in one consistent read.
	ReadServeGate(ctx context.Context, partition string, running int32) (ServeGate, error)

	// PruneThrough deletes the partition's commits (and their changes and
	// scope index entries) with seq <= seq and raises its horizon to seq,
	// under the partition write lock; delete tombstones (SPEC §2.2) at or
	// below the new horizon go with them, as in Retention.PruneBatch.
	// Idempotency records are kept. It never prunes above the partition's
	// max commit seq.
	PruneThrough(ctx context.Context, partition string, seq int64) error
}

// CheckpointTx is the checkpoint and serve-gate part of every PushTx.
type CheckpointTx interface {
	// AdvanceCheckpoint compares-and-sets the checkpoint's watermark and
	// observed rows where its owner epoch equals epoch (no state check),
	// inside the push transaction so the projection writes and the advance
	// commit together. It reports false, never an error, when superseded.
	AdvanceCheckpoint(ctx context.Context, name string, epoch, watermark, observedRows int64) (bool, error)

	// ReadServeGate reads the gate inside the transaction, under the
	// partition lock.
	ReadServeGate(ctx context.Context, running int32) (ServeGate, error)
}
