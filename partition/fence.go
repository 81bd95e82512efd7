package partition

import (
	"context"
	"fmt"

	"github.com/synclane/synclane/storage"
)

// Fenced reads (cluster mode). Writes are fenced by the store: each one
// checks the ownership generation under the partition's lock. A read takes
// no lock, so the actor checks the generation itself: every serve-gate read
// (the one a reply is built under and the verify before it is released)
// also reads the partition's ownership generation in the same snapshot,
// and a generation other than the one this actor claimed fails the read
// with storage.ErrOwnershipLost. A reply is therefore released only when,
// at its verify, no other member had claimed the partition yet: a member
// cut off from the membership keeps serving what it still owns, and stops
// the moment the database says otherwise, without presenting stale data as
// current.

// fencedGate is a GateReader that refuses a gate whose ownership
// generation is not fence.
type fencedGate struct {
	r     GateReader
	fence int64
}

// ReadServeGate implements GateReader.
func (f fencedGate) ReadServeGate(ctx context.Context, partition string, running int32) (storage.ServeGate, error) {
	g, err := f.r.ReadServeGate(ctx, partition, running)
	if err != nil {
		return g, err
	}
	if g.OwnerGeneration != f.fence {
		return g, fmt.Errorf("partition %s: fence generation %d held, current generation %d (read): %w",
			storage.QuoteID(partition), f.fence, g.OwnerGeneration, storage.ErrOwnershipLost)
	}
	return g, nil
}

// gateReader returns the reader of the partition's serve gate: fenced by
// the claimed ownership generation in cluster mode on a store with the
// Ownership role (the one that fences writes and records generations),
// the store's own otherwise.
func (p *Partition) gateReader() GateReader {
	if p.cfg.Claim == nil || p.fence == 0 || p.cfg.Backend.Ownership == nil {
		return p.cfg.Backend.Checkpoints
	}
	return fencedGate{r: p.cfg.Backend.Checkpoints, fence: p.fence}
}
