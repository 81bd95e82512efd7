package homes

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// The roles of Homes, checked at compile time: those of postgres.Store
// (every role but ImageCopier). Every call naming a partition goes to the
// partition's home; the calls of no partition are answered from every
// home or from main.
var (
	_ storage.Lifecycle      = (*Homes)(nil)
	_ storage.Log            = (*Homes)(nil)
	_ storage.Rows           = (*Homes)(nil)
	_ storage.Clients        = (*Homes)(nil)
	_ storage.Checkpoints    = (*Homes)(nil)
	_ storage.Retention      = (*Homes)(nil)
	_ storage.Snapshots      = (*Homes)(nil)
	_ storage.Leases         = (*Homes)(nil)
	_ storage.Reactions      = (*Homes)(nil)
	_ storage.BlobIndex      = (*Homes)(nil)
	_ storage.Querier        = (*Homes)(nil)
	_ storage.AdminReader    = (*Homes)(nil)
	_ storage.Ownership      = (*Homes)(nil)
	_ storage.ClientHandOver = (*Homes)(nil)
	_ storage.RowEncoder     = (*Homes)(nil)
	_ storage.HomeNamer      = (*Homes)(nil)
	_ storage.PushTx         = (*homeTx)(nil)
)

// Backend returns the roles of the deployment: those of postgres.Store.
func (h *Homes) Backend() storage.Backend {
	return storage.Backend{
		Lifecycle: h, Log: h, Rows: h, Clients: h, Checkpoints: h,
		Retention: h, Snapshots: h, Leases: h, Reactions: h, Blobs: h, Queries: h, Admin: h, Ownership: h,
		HandOver: h, Homes: h, RowEncoder: h,
	}
}

// reading returns the home of partition for a call that only reads it.
func (h *Homes) reading(ctx context.Context, partition string) (*home, error) {
	hm, err := h.lookup(ctx, partition)
	if err == nil {
		hm.calls.Add(1)
	}
	return hm, err
}

// writing returns the home of partition for a call that writes it,
// placing the partition first when needed.
func (h *Homes) writing(ctx context.Context, partition string) (*home, error) {
	hm, err := h.place(ctx, partition)
	if err == nil {
		hm.calls.Add(1)
	}
	return hm, err
}

// TouchPartition implements storage.Log.
func (h *Homes) TouchPartition(ctx context.Context, partition string, nowMs int64) (storage.PartitionInfo, error) {
	hm, err := h.writing(ctx, partition)
	if err != nil {
		return storage.PartitionInfo{Partition: partition}, err
	}
	info, err := hm.st.TouchPartition(ctx, partition, nowMs)
	return info, h.unavailable(hm, err)
}

// ReadPartition implements storage.Log.
func (h *Homes) ReadPartition(ctx context.Context, partition string) (storage.PartitionInfo, error) {
	hm, err := h.reading(ctx, partition)
	if err != nil {
		return storage.PartitionInfo{Partition: partition}, err
	}
	info, err := hm.st.ReadPartition(ctx, partition)
	if err == nil && !info.Exists {
		// A partition moved out leaves its marker: the entry was stale.
		if _, _, moved, merr := hm.st.MoveMarker(ctx, partition); merr == nil && moved {
			h.Forget(partition)
			if hm, err = h.reading(ctx, partition); err != nil {
				return info, err
			}
			info, err = hm.st.ReadPartition(ctx, partition)
		}
	}
	return info, h.unavailable(hm, err)
}

// RotateLogEpoch implements storage.Log.
func (h *Homes) RotateLogEpoch(ctx context.Context, partition string, nowMs int64) (string, error) {
	hm, err := h.writing(ctx, partition)
	if err != nil {
		return "", err
	}
	ep, err := hm.st.RotateLogEpoch(ctx, partition, nowMs)
	return ep, h.unavailable(hm, err)
}

// BeginPush implements storage.Log: a transaction of the partition's home
// (homeTx).
func (h *Homes) BeginPush(ctx context.Context, partition string) (storage.PushTx, error) {
	hm, err := h.writing(ctx, partition)
	if err != nil {
		return nil, err
	}
	tx, err := hm.st.BeginPush(ctx, partition)
	if err != nil {
		return nil, h.unavailable(hm, err)
	}
	return &homeTx{PushTx: tx, h: h, hm: hm}, nil
}

// LookupIdempotency implements storage.Log.
func (h *Homes) LookupIdempotency(ctx context.Context, partition, clientID, clientCommitID string) (*storage.IdempotencyRecord, error) {
	hm, err := h.reading(ctx, partition)
	if err != nil {
		return nil, err
	}
	rec, err := hm.st.LookupIdempotency(ctx, partition, clientID, clientCommitID)
	return rec, h.unavailable(hm, err)
}

// ScanChanges implements storage.Log.
func (h *Homes) ScanChanges(ctx context.Context, partition string, q storage.ChangeQuery) (storage.ChangeScan, error) {
	hm, err := h.reading(ctx, partition)
	if err != nil {
		return storage.ChangeScan{}, err
	}
	sc, err := hm.st.ScanChanges(ctx, partition, q)
	return sc, h.unavailable(hm, err)
}

// LatestScopeCommit implements storage.Log.
func (h *Homes) LatestScopeCommit(ctx context.Context, partition string, q storage.ScopeCommitQuery) (int64, error) {
	hm, err := h.reading(ctx, partition)
	if err != nil {
		return 0, err
	}
	n, err := hm.st.LatestScopeCommit(ctx, partition, q)
	return n, h.unavailable(hm, err)
}

// ScanRows implements storage.Rows.
func (h *Homes) ScanRows(ctx context.Context, partition string, q storage.RowQuery) ([]storage.RowRecord, error) {
	hm, err := h.reading(ctx, partition)
	if err != nil {
		return nil, err
	}
	rs, err := hm.st.ScanRows(ctx, partition, q)
	return rs, h.unavailable(hm, err)
}

// VisitRows implements storage.Rows.
func (h *Homes) VisitRows(ctx context.Context, partition string, q storage.RowQuery, fn func(rec storage.RowRecord) error) error {
	hm, err := h.reading(ctx, partition)
	if err != nil {
		return err
	}
	return h.unavailable(hm, hm.st.VisitRows(ctx, partition, q, fn))
}

// EncodeRows implements storage.RowEncoder.
func (h *Homes) EncodeRows(ctx context.Context, partition string, q storage.RowQuery, sb *ssp2.SegmentBuilder) (storage.EncodedRows, error) {
	hm, err := h.reading(ctx, partition)
	if err != nil {
		return storage.EncodedRows{}, err
	}
	out, err := hm.st.EncodeRows(ctx, partition, q, sb)
	return out, h.unavailable(hm, err)
}

// GetClient implements storage.Clients.
func (h *Homes) GetClient(ctx context.Context, partition, clientID string) (*storage.ClientRecord, error) {
	hm, err := h.reading(ctx, partition)
	if err != nil {
		return nil, err
	}
	rec, err := hm.st.GetClient(ctx, partition, clientID)
	return rec, h.unavailable(hm, err)
}

// PutClient implements storage.Clients.
func (h *Homes) PutClient(ctx context.Context, partition string, recs ...storage.ClientRecord) error {
	hm, err := h.writing(ctx, partition)
	if err != nil {
		return err
	}
	return h.unavailable(hm, hm.st.PutClient(ctx, partition, recs...))
}

// AdvanceClients implements storage.Clients.
func (h *Homes) AdvanceClients(ctx context.Context, partition, logEpoch string, acks ...storage.ClientAdvance) (int, error) {
	hm, err := h.writing(ctx, partition)
	if err != nil {
		return 0, err
	}
	n, err := hm.st.AdvanceClients(ctx, partition, logEpoch, acks...)
	return n, h.unavailable(hm, err)
}

// BindClients binds several clientIds of partition in one durable write
// on the partition's home (postgres.Store.BindClients: one transaction).
func (h *Homes) BindClients(ctx context.Context, partition string, nowMs int64, binds ...storage.ClientBinding) ([]storage.BoundClient, error) {
	hm, err := h.writing(ctx, partition)
	if err != nil {
		return nil, err
	}
	got, err := hm.st.BindClients(ctx, partition, nowMs, binds...)
	return got, h.unavailable(hm, err)
}

// BindClient implements storage.Clients.
func (h *Homes) BindClient(ctx context.Context, partition, clientID, actorID string, nowMs int64) (string, error) {
	hm, err := h.writing(ctx, partition)
	if err != nil {
		return "", err
	}
	a, err := hm.st.BindClient(ctx, partition, clientID, actorID, nowMs)
	return a, h.unavailable(hm, err)
}

// HandOverClients implements storage.ClientHandOver.
func (h *Homes) HandOverClients(ctx context.Context, partition, logEpoch string, recs ...storage.ClientRecord) (int, error) {
	hm, err := h.writing(ctx, partition)
	if err != nil {
		return 0, err
	}
	n, err := hm.st.HandOverClients(ctx, partition, logEpoch, recs...)
	return n, h.unavailable(hm, err)
}

// DeclareCheckpoint implements storage.Checkpoints.
func (h *Homes) DeclareCheckpoint(ctx context.Context, dc storage.CheckpointDeclaration, nowMs int64) (storage.Checkpoint, error) {
	hm, err := h.writing(ctx, dc.Partition)
	if err != nil {
		return storage.Checkpoint{}, err
	}
	cp, err := hm.st.DeclareCheckpoint(ctx, dc, nowMs)
	return cp, h.afterCheckpointChange(ctx, h.unavailable(hm, err))
}

// ClaimCheckpoint implements storage.Checkpoints.
func (h *Homes) ClaimCheckpoint(ctx context.Context, dc storage.CheckpointDeclaration, nowMs int64) (storage.Checkpoint, error) {
	hm, err := h.writing(ctx, dc.Partition)
	if err != nil {
		return storage.Checkpoint{}, err
	}
	cp, err := hm.st.ClaimCheckpoint(ctx, dc, nowMs)
	return cp, h.afterCheckpointChange(ctx, h.unavailable(hm, err))
}

// ActivateCheckpoint implements storage.Checkpoints.
func (h *Homes) ActivateCheckpoint(ctx context.Context, partition, name string, epoch, watermark int64, sources []string, nowMs int64) (storage.ActivationOutcome, error) {
	hm, err := h.writing(ctx, partition)
	if err != nil {
		return "", err
	}
	out, err := hm.st.ActivateCheckpoint(ctx, partition, name, epoch, watermark, sources, nowMs)
	return out, h.afterCheckpointChange(ctx, h.unavailable(hm, err))
}

// everyHome returns what list answers for every home, concatenated in
// home order (the caller merges them into its contract's order).
func everyHome[T any](h *Homes, list func(*home) ([]T, error)) ([]T, error) {
	var out []T
	for _, hm := range h.homes {
		xs, err := list(hm)
		if err != nil {
			return nil, h.unavailable(hm, fmt.Errorf("homes: home %q: %w", hm.name, err))
		}
		out = append(out, xs...)
	}
	return out, nil
}

// ReadCheckpoints implements storage.Checkpoints: every home's, ordered
// by (partition, name).
func (h *Homes) ReadCheckpoints(ctx context.Context) ([]storage.Checkpoint, error) {
	out, err := everyHome(h, func(hm *home) ([]storage.Checkpoint, error) { return hm.st.ReadCheckpoints(ctx) })
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// ReadServeGate implements storage.Checkpoints: the partition's home's
// gate with the pending checkpoints of every other home (gate.go).
func (h *Homes) ReadServeGate(ctx context.Context, partition string, running int32) (storage.ServeGate, error) {
	hm, err := h.reading(ctx, partition)
	if err != nil {
		return storage.ServeGate{}, err
	}
	g, gen, err := hm.st.ReadServeGateGen(ctx, partition, running)
	if err != nil {
		return g, h.unavailable(hm, err)
	}
	refs, err := h.pendingElsewhere(ctx, hm.idx, gen, running)
	if err != nil {
		return storage.ServeGate{}, err
	}
	return withPending(g, refs), nil
}

// PruneThrough implements storage.Checkpoints.
func (h *Homes) PruneThrough(ctx context.Context, partition string, seq int64) error {
	hm, err := h.reading(ctx, partition)
	if err != nil {
		return err
	}
	return h.unavailable(hm, hm.st.PruneThrough(ctx, partition, seq))
}

// ListPartitions implements storage.Retention: every home's, ordered by
// partition id.
func (h *Homes) ListPartitions(ctx context.Context) ([]storage.PartitionInfo, error) {
	out, err := everyHome(h, func(hm *home) ([]storage.PartitionInfo, error) { return hm.st.ListPartitions(ctx) })
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b storage.PartitionInfo) int { return strings.Compare(a.Partition, b.Partition) })
	return out, nil
}

// ReadRetentionInputs implements storage.Retention.
func (h *Homes) ReadRetentionInputs(ctx context.Context, partition string, activeAfterMs int64) (storage.RetentionInputs, error) {
	hm, err := h.reading(ctx, partition)
	if err != nil {
		return storage.RetentionInputs{}, err
	}
	in, err := hm.st.ReadRetentionInputs(ctx, partition, activeAfterMs)
	return in, h.unavailable(hm, err)
}

// FirstCommitAfter implements storage.Retention.
func (h *Homes) FirstCommitAfter(ctx context.Context, partition string, afterSeq, upToSeq, createdAfterMs int64) (int64, error) {
	hm, err := h.reading(ctx, partition)
	if err != nil {
		return 0, err
	}
	n, err := hm.st.FirstCommitAfter(ctx, partition, afterSeq, upToSeq, createdAfterMs)
	return n, h.unavailable(hm, err)
}

// PruneBatch implements storage.Retention.
func (h *Homes) PruneBatch(ctx context.Context, partition string, req storage.PruneRequest) (storage.PruneResult, error) {
	hm, err := h.reading(ctx, partition)
	if err != nil {
		return storage.PruneResult{}, err
	}
	r, err := hm.st.PruneBatch(ctx, partition, req)
	return r, h.unavailable(hm, err)
}

// CountPrune implements storage.Retention.
func (h *Homes) CountPrune(ctx context.Context, partition string, throughSeq int64) (storage.PruneResult, error) {
	hm, err := h.reading(ctx, partition)
	if err != nil {
		return storage.PruneResult{}, err
	}
	r, err := hm.st.CountPrune(ctx, partition, throughSeq)
	return r, h.unavailable(hm, err)
}

// TryLockMaintenance implements storage.Retention: one lock, in main,
// for every home (one maintenance pass at a time in the deployment).
func (h *Homes) TryLockMaintenance(ctx context.Context) (func(), bool, error) {
	unlock, ok, err := h.main().st.TryLockMaintenance(ctx)
	return unlock, ok, h.unavailable(h.main(), err)
}

// CapturePartition implements storage.Snapshots.
func (h *Homes) CapturePartition(ctx context.Context, partition string) error {
	hm, err := h.writing(ctx, partition)
	if err != nil {
		return err
	}
	return h.unavailable(hm, hm.st.CapturePartition(ctx, partition))
}

// RestorePartition implements storage.Snapshots.
func (h *Homes) RestorePartition(ctx context.Context, partition string, nowMs int64) (string, error) {
	hm, err := h.writing(ctx, partition)
	if err != nil {
		return "", err
	}
	ep, err := hm.st.RestorePartition(ctx, partition, nowMs)
	return ep, h.unavailable(hm, err)
}

// GetLease implements storage.Leases.
func (h *Homes) GetLease(ctx context.Context, partition, clientID string) (*storage.LeaseRecord, error) {
	hm, err := h.reading(ctx, partition)
	if err != nil {
		return nil, err
	}
	rec, err := hm.st.GetLease(ctx, partition, clientID)
	return rec, h.unavailable(hm, err)
}

// FindLease implements storage.Leases.
func (h *Homes) FindLease(ctx context.Context, partition, leaseID string) (*storage.LeaseRecord, error) {
	hm, err := h.reading(ctx, partition)
	if err != nil {
		return nil, err
	}
	rec, err := hm.st.FindLease(ctx, partition, leaseID)
	return rec, h.unavailable(hm, err)
}

// SwapLease implements storage.Leases.
func (h *Homes) SwapLease(ctx context.Context, partition string, rec storage.LeaseRecord, prevMAC []byte) (bool, error) {
	hm, err := h.writing(ctx, partition)
	if err != nil {
		return false, err
	}
	ok, err := hm.st.SwapLease(ctx, partition, rec, prevMAC)
	return ok, h.unavailable(hm, err)
}

// errPendingStale ends a query's snapshot whose gate needs the other
// homes read again (Query).
var errPendingStale = fmt.Errorf("homes: the other homes' pending checkpoints are to be read again")

// Query implements storage.Querier on the partition's home (its gate
// check sees that home's gate with the other homes' pending checkpoints).
//
// The query's snapshot holds a connection of the partition's home, so
// the other homes are never read inside it (a query of home i waiting for
// home j's pool while holding i's, and one of j waiting for i's, would
// deadlock once both pools are taken): when the reading the snapshot's
// gate generation needs is not at hand, the snapshot is given up, the
// other homes are read and the query starts again.
func (h *Homes) Query(ctx context.Context, partition string, running int32, q storage.Query, check func(storage.ServeGate) error) (storage.QueryResult, error) {
	hm, err := h.reading(ctx, partition)
	if err != nil {
		return storage.QueryResult{}, err
	}
	var fresh *pendingReading
	for {
		var stale string
		missed := false
		res, err := hm.st.QueryGen(ctx, partition, running, q, func(g storage.ServeGate, gen string) error {
			r := fresh
			if r == nil || r.gen != gen || r.running != running {
				if r = h.cachedPending(hm.idx, gen, running); r == nil {
					stale, missed = gen, true
					return errPendingStale
				}
			}
			return check(withPending(g, r.refs))
		})
		if !missed {
			return res, h.unavailable(hm, err)
		}
		refs, err := h.pendingElsewhere(ctx, hm.idx, stale, running)
		if err != nil {
			return storage.QueryResult{}, err
		}
		fresh = &pendingReading{gen: stale, running: running, refs: refs}
	}
}

// AdminPartitions implements storage.AdminReader: the first limit
// partitions after after across every home, in id order.
func (h *Homes) AdminPartitions(ctx context.Context, after string, limit int) ([]storage.PartitionOverview, error) {
	out, err := everyHome(h, func(hm *home) ([]storage.PartitionOverview, error) { return hm.st.AdminPartitions(ctx, after, limit) })
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b storage.PartitionOverview) int { return strings.Compare(a.Partition, b.Partition) })
	if limit = storage.ClampAdminLimit(limit); len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// AdminPartition implements storage.AdminReader.
func (h *Homes) AdminPartition(ctx context.Context, partition string) (storage.PartitionOverview, error) {
	hm, err := h.reading(ctx, partition)
	if err != nil {
		return storage.PartitionOverview{}, err
	}
	o, err := hm.st.AdminPartition(ctx, partition)
	return o, h.unavailable(hm, err)
}

// AdminClients implements storage.AdminReader.
func (h *Homes) AdminClients(ctx context.Context, partition, after string, limit int) ([]storage.ClientRecord, error) {
	hm, err := h.reading(ctx, partition)
	if err != nil {
		return nil, err
	}
	cs, err := hm.st.AdminClients(ctx, partition, after, limit)
	return cs, h.unavailable(hm, err)
}

// AdminCommits implements storage.AdminReader.
func (h *Homes) AdminCommits(ctx context.Context, partition string, beforeSeq int64, limit int) ([]storage.CommitRecord, error) {
	hm, err := h.reading(ctx, partition)
	if err != nil {
		return nil, err
	}
	cs, err := hm.st.AdminCommits(ctx, partition, beforeSeq, limit)
	return cs, h.unavailable(hm, err)
}

// AdminRow implements storage.AdminReader.
func (h *Homes) AdminRow(ctx context.Context, partition string, t *schema.Table, rowID string) (*storage.RowRecord, error) {
	hm, err := h.reading(ctx, partition)
	if err != nil {
		return nil, err
	}
	r, err := hm.st.AdminRow(ctx, partition, t, rowID)
	return r, h.unavailable(hm, err)
}

// PartitionHome implements storage.HomeNamer: the cached or directory
// entry's home, or (not placed yet) the home a placement would choose.
func (h *Homes) PartitionHome(ctx context.Context, partition string) (string, error) {
	hm, err := h.lookup(ctx, partition)
	if err != nil {
		return "", err
	}
	return hm.name, nil
}

// ClaimPartition implements storage.Ownership in the partition's home:
// the ownership row, and the fence every write checks, stay with the
// data.
func (h *Homes) ClaimPartition(ctx context.Context, partition, owner string, nowMs int64) (int64, error) {
	hm, err := h.writing(ctx, partition)
	if err != nil {
		return 0, err
	}
	g, err := hm.st.ClaimPartition(ctx, partition, owner, nowMs)
	return g, h.unavailable(hm, err)
}

// PartitionOwner implements storage.Ownership.
func (h *Homes) PartitionOwner(ctx context.Context, partition string) (string, int64, error) {
	hm, err := h.reading(ctx, partition)
	if err != nil {
		return "", 0, err
	}
	o, g, err := hm.st.PartitionOwner(ctx, partition)
	return o, g, h.unavailable(hm, err)
}
