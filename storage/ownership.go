package storage

import (
	"context"
	"errors"
)

// ErrOwnershipLost: a write carried a fence generation that is no longer
// the partition's (another member claimed it).
var ErrOwnershipLost = errors.New("storage: partition ownership moved to another member")

type fenceKey struct{}

// WithFence returns ctx carrying the ownership generation the caller holds
// for its partition writes.
func WithFence(ctx context.Context, generation int64) context.Context {
	return context.WithValue(ctx, fenceKey{}, generation)
}

// FenceFrom returns the generation carried by ctx (ok false: unfenced,
// e.g. single-process mode).
func FenceFrom(ctx context.Context) (generation int64, ok bool) {
	generation, ok = ctx.Value(fenceKey{}).(int64)
	return generation, ok
}

// Ownership is the role of a store shared by cluster members: partition
// ownership generations.
type Ownership interface {
	// ClaimPartition records owner as the partition's owner with a new
	// generation and returns it.
	ClaimPartition(ctx context.Context, partition, owner string, nowMs int64) (generation int64, err error)
	// PartitionOwner returns the recorded owner and generation.
	PartitionOwner(ctx context.Context, partition string) (owner string, generation int64, err error)
}
