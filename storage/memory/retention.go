package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// ListPartitions returns the entries of the created partitions by name.
func (s *Store) ListPartitions(ctx context.Context) ([]storage.PartitionInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.open(); err != nil {
		return nil, err
	}
	s.d.mu.Lock()
	parts := slices.Collect(maps.Values(s.d.parts))
	s.d.mu.Unlock()
	var out []storage.PartitionInfo
	for _, p := range parts {
		p.mu.RLock()
		if p.info.Exists {
			out = append(out, p.info)
		}
		p.mu.RUnlock()
	}
	slices.SortFunc(out, func(a, b storage.PartitionInfo) int { return strings.Compare(a.Partition, b.Partition) })
	return out, nil
}

// ReadRetentionInputs reads the checkpoint floor under the database lock,
// then the entry and the client records under the partition's state lock.
func (s *Store) ReadRetentionInputs(ctx context.Context, partition string, activeAfterMs int64) (storage.RetentionInputs, error) {
	if err := ctx.Err(); err != nil {
		return storage.RetentionInputs{}, err
	}
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return storage.RetentionInputs{}, fmt.Errorf("memory: read retention inputs: %w", err)
	}
	in := storage.RetentionInputs{MinActiveCursor: -1, CheckpointFloor: -1}
	s.d.mu.Lock()
	for ref, c := range s.d.cps {
		if ref.Partition == partition && c.State != storage.CheckpointActivated && (in.CheckpointFloor < 0 || c.Watermark < in.CheckpointFloor) {
			in.CheckpointFloor = c.Watermark
		}
	}
	s.d.mu.Unlock()
	p.mu.RLock()
	defer p.mu.RUnlock()
	in.Partition = p.info
	for _, c := range p.clients {
		if c.UpdatedAtMs > activeAfterMs && c.Cursor >= 0 {
			if in.ActiveClients == 0 || c.Cursor < in.MinActiveCursor {
				in.MinActiveCursor = c.Cursor
			}
			in.ActiveClients++
		}
	}
	return in, nil
}

// FirstCommitAfter walks the committed log from afterSeq.
func (s *Store) FirstCommitAfter(ctx context.Context, partition string, afterSeq, upToSeq, createdAfterMs int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return 0, fmt.Errorf("memory: first commit after: %w", err)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	base := p.info.HorizonSeq
	for i := max(afterSeq-base, 0); i < int64(len(p.commits)); i++ {
		c := &p.commits[i]
		if c.Seq > upToSeq {
			break
		}
		if c.CreatedAtMs > createdAfterMs {
			return c.Seq, nil
		}
	}
	return 0, nil
}

// PruneBatch deletes one batch under the partition's write lock (the one
// RotateLogEpoch and RestorePartition take), with the committed state
// published at once under its state lock; the epoch is verified first.
func (s *Store) PruneBatch(ctx context.Context, partition string, req storage.PruneRequest) (storage.PruneResult, error) {
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return storage.PruneResult{}, fmt.Errorf("memory: prune %q: %w", partition, err)
	}
	if err := p.acquire(ctx); err != nil {
		return storage.PruneResult{}, fmt.Errorf("memory: prune %q: %w", partition, err)
	}
	defer p.release()
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.info.HorizonSeq
	res := storage.PruneResult{PreviousHorizonSeq: h, HorizonSeq: h}
	if !p.info.Exists {
		return storage.PruneResult{}, nil
	}
	if p.info.LogEpoch != req.LogEpoch {
		return res, fmt.Errorf("memory: prune %q at epoch %q (now %q): %w", partition, req.LogEpoch, p.info.LogEpoch, storage.ErrLogEpochChanged)
	}
	if req.MaxCommits < 1 {
		return res, nil
	}
	upTo := min(req.ThroughSeq, p.info.MaxCommitSeq, h+int64(req.MaxCommits))
	if upTo <= h {
		return res, nil
	}
	for _, c := range p.commits[:upTo-h] {
		res.Commits++
		res.Changes += int64(len(c.Changes))
		k := idemKey{c.ClientID, c.ClientCommitID}
		if e, ok := p.idem[k]; ok && e.rec.Status == ssp2.CommitApplied && e.rec.CommitSeq == c.Seq {
			delete(p.idem, k)
			res.IdempotencyRecords++
		}
	}
	for k, e := range p.idem {
		if e.rec.Status == ssp2.CommitRejected && e.pos <= upTo {
			delete(p.idem, k)
			res.IdempotencyRecords++
		}
	}
	for _, ids := range p.tombs {
		for id, seq := range ids {
			if seq <= upTo {
				delete(ids, id)
				res.Tombstones++
			}
		}
	}
	p.dropThrough(upTo)
	res.HorizonSeq = upTo
	return res, nil
}

// CountPrune counts what PruneBatch would delete through throughSeq,
// under the partition's state lock.
func (s *Store) CountPrune(ctx context.Context, partition string, throughSeq int64) (storage.PruneResult, error) {
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return storage.PruneResult{}, fmt.Errorf("memory: count prune %q: %w", partition, err)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	h := p.info.HorizonSeq
	res := storage.PruneResult{PreviousHorizonSeq: h, HorizonSeq: h}
	upTo := min(throughSeq, p.info.MaxCommitSeq)
	if !p.info.Exists {
		return storage.PruneResult{}, nil
	}
	if upTo <= h {
		return res, nil
	}
	for _, c := range p.commits[:upTo-h] {
		res.Commits++
		res.Changes += int64(len(c.Changes))
		if e, ok := p.idem[idemKey{c.ClientID, c.ClientCommitID}]; ok && e.rec.Status == ssp2.CommitApplied && e.rec.CommitSeq == c.Seq {
			res.IdempotencyRecords++
		}
	}
	for _, e := range p.idem {
		if e.rec.Status == ssp2.CommitRejected && e.pos <= upTo {
			res.IdempotencyRecords++
		}
	}
	for _, ids := range p.tombs {
		for _, seq := range ids {
			if seq <= upTo {
				res.Tombstones++
			}
		}
	}
	res.HorizonSeq = upTo
	return res, nil
}

// dropThrough removes the commits with seq <= seq (above the horizon, at
// most the max seq) and their scope index entries, and raises the horizon;
// p.mu must be held for writing.
func (p *part) dropThrough(seq int64) {
	base := p.info.HorizonSeq
	p.commits = slices.Clone(p.commits[seq-base:])
	p.info.HorizonSeq = seq
	for _, m := range p.scopeIdx {
		for k, seqs := range m {
			i, _ := slices.BinarySearch(seqs, seq+1)
			if i == len(seqs) {
				delete(m, k)
			} else {
				m[k] = slices.Clone(seqs[i:])
			}
		}
	}
}

// maintenance is the database-wide maintenance lock every handle shares.
type maintenance struct{ mu sync.Mutex }

// TryLockMaintenance takes the database's maintenance lock (shared by
// every handle made by Share) without waiting.
func (s *Store) TryLockMaintenance(ctx context.Context) (func(), bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	if err := s.open(); err != nil {
		return nil, false, err
	}
	if !s.d.maint.mu.TryLock() {
		return nil, false, nil
	}
	var once sync.Once
	return func() { once.Do(s.d.maint.mu.Unlock) }, true, nil
}

// snapshot is a captured partition.
type snapshot struct {
	info     storage.PartitionInfo
	rows     map[string]map[string]storage.RowRecord
	commits  []storage.CommitRecord
	scopeIdx map[string]map[string][]int64
	idem     map[idemKey]idemEntry
	tombs    map[string]map[string]int64
	// blobRefs are the partition's blob references at the capture.
	blobRefs map[rowKey]rowBlobs
}

// copyState deep-copies the partition's committed log and rows; p.mu must
// be held.
func (p *part) copyState() *snapshot {
	sn := &snapshot{info: p.info, rows: make(map[string]map[string]storage.RowRecord, len(p.rows)),
		commits: make([]storage.CommitRecord, len(p.commits)), scopeIdx: make(map[string]map[string][]int64, len(p.scopeIdx)),
		idem: make(map[idemKey]idemEntry, len(p.idem)), tombs: copyTombs(p.tombs)}
	for t, m := range p.rows {
		cp := make(map[string]storage.RowRecord, len(m))
		for id, r := range m {
			cp[id] = copyRecord(r, len(r.Values))
		}
		sn.rows[t] = cp
	}
	for i, c := range p.commits {
		sn.commits[i] = copyCommit(c)
	}
	for t, m := range p.scopeIdx {
		cp := make(map[string][]int64, len(m))
		for k, seqs := range m {
			cp[k] = slices.Clone(seqs)
		}
		sn.scopeIdx[t] = cp
	}
	for k, e := range p.idem {
		e.rec = copyIdem(e.rec)
		sn.idem[k] = e
	}
	return sn
}

// CapturePartition deep-copies the partition's committed state under its
// write lock into the database (shared by every handle).
func (s *Store) CapturePartition(ctx context.Context, partition string) error {
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return fmt.Errorf("memory: capture %q: %w", partition, err)
	}
	if err := p.acquire(ctx); err != nil {
		return fmt.Errorf("memory: capture %q: %w", partition, err)
	}
	defer p.release()
	p.mu.RLock()
	sn := p.copyState()
	sn.blobRefs = s.d.blobs.captureRefs(partition)
	p.mu.RUnlock()
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.d.snaps == nil {
		s.d.snaps = map[string]*snapshot{}
	}
	s.d.snaps[partition] = sn
	return nil
}

// RestorePartition replaces the partition's state with a copy of its
// capture and rotates its epoch, under its write lock, published at once.
func (s *Store) RestorePartition(ctx context.Context, partition string, nowMs int64) (string, error) {
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return "", fmt.Errorf("memory: restore %q: %w", partition, err)
	}
	if err := p.acquire(ctx); err != nil {
		return "", fmt.Errorf("memory: restore %q: %w", partition, err)
	}
	defer p.release()
	s.d.mu.Lock()
	sn := s.d.snaps[partition]
	s.d.mu.Unlock()
	if sn == nil {
		return "", fmt.Errorf("memory: restore %q: %w", partition, storage.ErrNoSnapshot)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	src := &part{info: sn.info, rows: sn.rows, commits: sn.commits, scopeIdx: sn.scopeIdx, idem: sn.idem, tombs: sn.tombs}
	cp := src.copyState()
	p.rows, p.commits, p.scopeIdx, p.idem, p.tombs = cp.rows, cp.commits, cp.scopeIdx, cp.idem, cp.tombs
	ep := storage.NewLogEpoch()
	p.info = storage.PartitionInfo{Partition: partition, Exists: true, LogEpoch: ep, EpochRequired: true,
		MaxCommitSeq: sn.info.MaxCommitSeq, HorizonSeq: sn.info.HorizonSeq}
	p.clients = map[string]storage.ClientRecord{}
	s.d.blobs.restoreRefs(partition, sn.blobRefs)
	return ep, nil
}
