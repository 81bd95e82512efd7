package storage

import (
	"context"
	"errors"
)

// Partition ownership (cluster mode). Several processes share one store and
// each partition has at most one owner member at a time. Ownership can
// move (a member leaves, pauses too long or is cut off), so an owner that
// was deposed without knowing it must never commit: every activation of a
// partition takes a new ownership generation with ClaimPartition, and the
// writes it then makes carry that generation in their context
// (WithFence). A store with the Ownership role checks it, under the
// partition's write lock, against the generation recorded for the
// partition, and refuses a write carrying any other with ErrOwnershipLost.

// ErrOwnershipLost: a write carried a fence generation that is no longer the
// partition's (another member claimed it). The write was refused whole:
// nothing of it is stored. It is not transient: retrying with the same
// fence fails the same way.
var ErrOwnershipLost = errors.New("storage: partition ownership moved to another member")

// fenceKey is the context key of WithFence.
type fenceKey struct{}

// WithFence returns ctx carrying the ownership generation the caller holds
// for its partition writes (as ClaimPartition returned it: at least 1; a
// smaller one is never current). A backend with the Ownership role checks
// it on each fenced write (see Ownership); backends without the role
// ignore it.
func WithFence(ctx context.Context, generation int64) context.Context {
	return context.WithValue(ctx, fenceKey{}, generation)
}

// noFence is the fenceKey value WithoutFence stores.
type noFence struct{}

// WithoutFence returns ctx carrying no fence, whatever its parent carries:
// FenceFrom reports none and the store checks no generation. It is for
// the writes that are safe for any member to make (ClientHandOver, and
// Clients.AdvanceClients, whose conditions keep a newer write standing).
func WithoutFence(ctx context.Context) context.Context {
	return context.WithValue(ctx, fenceKey{}, noFence{})
}

// FenceFrom returns the generation carried by ctx (ok false: unfenced, e.g.
// single-process mode, where writes are checked against no generation).
func FenceFrom(ctx context.Context) (generation int64, ok bool) {
	generation, ok = ctx.Value(fenceKey{}).(int64)
	return generation, ok
}

// Ownership is the role of a store shared by cluster members: partition
// ownership generations. Only backends that several processes share have
// it (PostgreSQL); cluster mode needs it.
//
// The guarantee: a write of a partition whose context carries a fence
// (WithFence) commits only if the fence equals the partition's recorded
// generation when the write has locked the partition's registry entry
// (its write lock; for PutClient and DeclareCheckpoint a share lock, which
// ClaimPartition waits for just the same), and that lock is held until it
// commits. So a fenced write either commits before a claim that replaces
// its generation returns, or fails. The fenced writes are a PushTx (checked
// by BeginPush, so everything written through it is covered: rows, log,
// PutClients, reactions, blob references, AdvanceCheckpoint),
// RotateLogEpoch, PruneBatch, CapturePartition, RestorePartition,
// ActivateCheckpoint, PruneThrough, DeclareCheckpoint, PutClient and
// AdvanceClients; a fenced one whose generation is not the current one
// fails with an error wrapping ErrOwnershipLost and writes nothing (a
// fence below 1 is never current, so a fenced write of a partition never
// claimed always fails; a call with nothing to write, such as PruneBatch
// with maxCommits < 1, may return without checking). TouchPartition,
// BindClient, ClaimCheckpoint, SwapLease, ClientHandOver's
// HandOverClients, the reaction queue's calls (ClaimReactions and the
// rest) and the blob uploads of the Blobs role ignore the fence. A context
// without a fence (or one WithoutFence returned) is not checked at all.
type Ownership interface {
	// ClaimPartition records owner (a non-empty Storable name, else
	// ErrUnstorable) as the partition's owner with a new generation (previous + 1; the first
	// claim gives 1), creating the partition's registry entry if needed
	// (as TouchPartition: fresh log epoch), and returns it. It ignores any
	// fence ctx carries. It takes the partition's write lock, so it waits
	// for every write transaction holding an older generation to end; once
	// it returns, no transaction fenced with an older generation can
	// commit. Concurrent claims are serialized and get distinct
	// generations. After an error the claim may or may not have been
	// recorded; claiming again gives a newer generation either way.
	ClaimPartition(ctx context.Context, partition, owner string, nowMs int64) (generation int64, err error)
	// PartitionOwner returns the recorded owner and generation ("" and 0
	// when never claimed or the partition does not exist), as committed
	// when it reads (it takes no lock: the answer may be stale by the time
	// the caller acts on it; only a fenced write checks under the lock).
	PartitionOwner(ctx context.Context, partition string) (owner string, generation int64, err error)
}
