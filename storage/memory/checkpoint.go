package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/synclane/synclane/storage"
)

// declare inserts the checkpoint if absent and raises the fence; d.mu
// must be held.
func (d *db) declare(dc storage.CheckpointDeclaration, nowMs int64) storage.Checkpoint {
	ref := storage.CheckpointRef{Partition: dc.Partition, Name: dc.Name}
	c := d.cps[ref]
	if c == nil {
		c = &storage.Checkpoint{Partition: dc.Partition, Name: dc.Name, SchemaVersion: dc.SchemaVersion,
			State: storage.CheckpointDeclared, UpdatedAtMs: nowMs}
		d.cps[ref] = c
	}
	if d.fences[dc.Partition] < dc.SchemaVersion {
		d.fences[dc.Partition] = dc.SchemaVersion
	}
	return *c
}

// DeclareCheckpoint inserts the checkpoint as declared if absent and raises
// the partition's fence, atomically.
func (s *Store) DeclareCheckpoint(ctx context.Context, dc storage.CheckpointDeclaration, nowMs int64) (storage.Checkpoint, error) {
	if err := ctx.Err(); err != nil {
		return storage.Checkpoint{}, err
	}
	if err := s.open(); err != nil {
		return storage.Checkpoint{}, err
	}
	if err := dc.Validate(); err != nil {
		return storage.Checkpoint{}, fmt.Errorf("memory: declare checkpoint: %w", err)
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return s.d.declare(dc, nowMs), nil
}

// ClaimCheckpoint increments the owner epoch of a non-activated checkpoint.
func (s *Store) ClaimCheckpoint(ctx context.Context, dc storage.CheckpointDeclaration, nowMs int64) (storage.Checkpoint, error) {
	if err := ctx.Err(); err != nil {
		return storage.Checkpoint{}, err
	}
	if err := s.open(); err != nil {
		return storage.Checkpoint{}, err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	c := s.d.cps[storage.CheckpointRef{Partition: dc.Partition, Name: dc.Name}]
	if c == nil || c.State == storage.CheckpointActivated {
		return storage.Checkpoint{}, fmt.Errorf("memory: claim checkpoint %s/%s: %w", dc.Partition, dc.Name, storage.ErrCheckpointNotDeclared)
	}
	c.OwnerEpoch++
	c.State = storage.CheckpointBackfilling
	c.SchemaVersion = dc.SchemaVersion
	c.UpdatedAtMs = nowMs
	return *c, nil
}

// ActivateCheckpoint takes the partition's write lock, then decides under
// the database lock.
func (s *Store) ActivateCheckpoint(ctx context.Context, partition, name string, epoch, watermark int64, sources []string, nowMs int64) (storage.ActivationOutcome, error) {
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return "", fmt.Errorf("memory: activate checkpoint %s/%s: %w", partition, name, err)
	}
	if err := p.acquire(ctx); err != nil {
		return "", fmt.Errorf("memory: activate checkpoint %s/%s: %w", partition, name, err)
	}
	defer p.release()
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.cps[storage.CheckpointRef{Partition: partition, Name: name}]
	fence, fenced := d.fences[partition]
	if c == nil || !fenced || fence < c.SchemaVersion {
		return "", fmt.Errorf("memory: activate checkpoint %s/%s: %w", partition, name, storage.ErrCheckpointFenceMissing)
	}
	p.mu.RLock()
	changed := p.changedAbove(sources, watermark)
	horizon := p.info.HorizonSeq
	p.mu.RUnlock()
	switch {
	case len(sources) > 0 && changed:
		return storage.Stale, nil
	case len(sources) > 0 && horizon > watermark:
		return storage.Unverifiable, nil
	}
	if c.OwnerEpoch != epoch || c.State == storage.CheckpointActivated {
		return storage.Stale, nil
	}
	c.State = storage.CheckpointActivated
	c.Watermark = watermark
	c.UpdatedAtMs = nowMs
	return storage.Activated, nil
}

// changedAbove reports whether a committed change of a table in sources
// has seq > seq; p.mu must be held.
func (p *part) changedAbove(sources []string, seq int64) bool {
	for i := len(p.commits) - 1; i >= 0 && p.commits[i].Seq > seq; i-- {
		for _, ch := range p.commits[i].Changes {
			if slices.Contains(sources, ch.Table) {
				return true
			}
		}
	}
	return false
}

// ReadCheckpoints returns every checkpoint ordered by (partition, name).
func (s *Store) ReadCheckpoints(ctx context.Context) ([]storage.Checkpoint, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.open(); err != nil {
		return nil, err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	out := make([]storage.Checkpoint, 0, len(s.d.cps))
	for _, c := range s.d.cps {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b storage.Checkpoint) int {
		return compareRefs(storage.CheckpointRef{Partition: a.Partition, Name: a.Name}, storage.CheckpointRef{Partition: b.Partition, Name: b.Name})
	})
	return out, nil
}

// ReadServeGate reads marker, epoch and pending under the database lock.
func (s *Store) ReadServeGate(ctx context.Context, partition string, running int32) (storage.ServeGate, error) {
	if err := ctx.Err(); err != nil {
		return storage.ServeGate{}, err
	}
	if err := s.open(); err != nil {
		return storage.ServeGate{}, err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return s.d.gate(partition, running), nil
}

// gate reads the serve gate; d.mu must be held.
func (d *db) gate(partition string, running int32) storage.ServeGate {
	g := storage.ServeGate{StoredSchemaVersion: d.marker}
	if p := d.parts[partition]; p != nil {
		p.mu.RLock()
		if p.info.Exists {
			g.LogEpoch = p.info.LogEpoch
			g.HorizonSeq = p.info.HorizonSeq
		}
		p.mu.RUnlock()
	}
	g.Pending = d.pending(running)
	return g
}

// pending lists the checkpoints at version that are not activated,
// ordered by (partition, name); d.mu must be held.
func (d *db) pending(version int32) []storage.CheckpointRef {
	var out []storage.CheckpointRef
	for ref, c := range d.cps {
		if c.SchemaVersion == version && c.State != storage.CheckpointActivated {
			out = append(out, ref)
		}
	}
	slices.SortFunc(out, compareRefs)
	return out
}

// compareRefs orders checkpoint references by (partition, name), the order
// the SQL backends read them in.
func compareRefs(a, b storage.CheckpointRef) int {
	return cmp.Or(strings.Compare(a.Partition, b.Partition), strings.Compare(a.Name, b.Name))
}

// PruneThrough drops the partition's commits with seq <= seq (at most its
// max commit seq), their scope index entries and the tombstones at or
// below the new horizon, and raises its horizon.
func (s *Store) PruneThrough(ctx context.Context, partition string, seq int64) error {
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return fmt.Errorf("memory: prune %q: %w", partition, err)
	}
	if err := p.acquire(ctx); err != nil {
		return fmt.Errorf("memory: prune %q: %w", partition, err)
	}
	defer p.release()
	p.mu.Lock()
	defer p.mu.Unlock()
	seq = min(seq, p.info.MaxCommitSeq)
	if seq <= p.info.HorizonSeq {
		return nil
	}
	for _, ids := range p.tombs {
		for id, ts := range ids {
			if ts <= seq {
				delete(ids, id)
			}
		}
	}
	p.dropThrough(seq)
	return nil
}

// advance is a staged AdvanceCheckpoint.
type advance struct {
	ref                     storage.CheckpointRef
	watermark, observedRows int64
	nowMs                   int64
}

// AdvanceCheckpoint checks the owner epoch now and stages the write; it is
// published with the transaction's other writes on Commit (a claim that
// lands in between is ordered after this transaction, as the row lock of
// the SQL backends orders it).
func (tx *pushTx) AdvanceCheckpoint(ctx context.Context, name string, epoch, watermark, observedRows int64) (bool, error) {
	if err := tx.check(ctx, "advance checkpoint"); err != nil {
		return false, err
	}
	ref := storage.CheckpointRef{Partition: tx.info.Partition, Name: name}
	d := tx.s.d
	d.mu.Lock()
	c := d.cps[ref]
	ok := c != nil && c.OwnerEpoch == epoch
	d.mu.Unlock()
	if !ok {
		return false, nil
	}
	tx.advances = append(tx.advances, advance{ref: ref, watermark: watermark, observedRows: observedRows, nowMs: time.Now().UnixMilli()})
	tx.undo = append(tx.undo, func() { tx.advances = tx.advances[:len(tx.advances)-1] })
	return true, nil
}

// applyAdvances publishes the staged advances; d.mu must be held.
func (tx *pushTx) applyAdvances(d *db) {
	for _, a := range tx.advances {
		if c := d.cps[a.ref]; c != nil {
			c.Watermark, c.ObservedRows, c.UpdatedAtMs = a.watermark, a.observedRows, a.nowMs
		}
	}
}

// ReadServeGate reads the gate while the transaction holds the partition
// lock.
func (tx *pushTx) ReadServeGate(ctx context.Context, running int32) (storage.ServeGate, error) {
	if err := tx.check(ctx, "read serve gate"); err != nil {
		return storage.ServeGate{}, err
	}
	d := tx.s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.gate(tx.info.Partition, running)
	g.LogEpoch = tx.info.LogEpoch
	return g, nil
}

// checkFence rejects an append when the partition's fence is above the
// transaction's writer version.
func (tx *pushTx) checkFence() error {
	d := tx.s.d
	d.mu.Lock()
	f := d.fences[tx.info.Partition]
	d.mu.Unlock()
	if f > tx.running {
		return fmt.Errorf("fence %d above writer version %d: %w", f, tx.running, storage.ErrWriterFenced)
	}
	return nil
}
