package sqlite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// The roles of a Dir, checked at compile time. Every call naming a
// partition goes to the partition's file; the calls of no partition are
// answered from every file (listings merged in their contract's order,
// counts summed) or from the home file (blob metadata, the maintenance
// lease).
var (
	_ storage.Lifecycle   = (*Dir)(nil)
	_ storage.Log         = (*Dir)(nil)
	_ storage.Rows        = (*Dir)(nil)
	_ storage.Clients     = (*Dir)(nil)
	_ storage.Checkpoints = (*Dir)(nil)
	_ storage.Retention   = (*Dir)(nil)
	_ storage.Snapshots   = (*Dir)(nil)
	_ storage.Leases      = (*Dir)(nil)
	_ storage.Reactions   = (*Dir)(nil)
	_ storage.BlobIndex   = (*Dir)(nil)
	_ storage.Querier     = (*Dir)(nil)
	_ storage.AdminReader = (*Dir)(nil)
	_ storage.RowEncoder  = (*Dir)(nil)
	_ storage.ImageCopier = (*Dir)(nil)
	_ storage.PushTx      = (*dirTx)(nil)
)

// Backend returns the directory's roles: those of sqlite.Store (every
// role but Ownership). With one file they are the file's Store itself, so
// K = 1 costs nothing over sqlite.Open.
func (d *Dir) Backend() storage.Backend {
	if len(d.files) == 1 {
		return d.home().Backend()
	}
	return storage.Backend{
		Lifecycle: d, Log: d, Rows: d, Clients: d, Checkpoints: d,
		Retention: d, Snapshots: d, Leases: d, Reactions: d, Blobs: d, Queries: d, Admin: d,
		RowEncoder: d, ImageCopier: d,
	}
}

// EnsureSchema implements storage.Lifecycle on every file, each file
// with the declarations of its partitions. Declarations are validated
// before any file is touched. A file whose check finds an undeclared
// pending checkpoint (ErrCheckpointIncomplete) does not stop the others:
// every file is made current, then those errors are returned together.
// Each file's bump is atomic; a failure of one file's storage leaves the
// files before it bumped (running EnsureSchema again completes it).
func (d *Dir) EnsureSchema(ctx context.Context, sch *schema.Schema, decls ...storage.CheckpointDeclaration) error {
	for _, dc := range decls {
		if err := dc.Validate(); err != nil {
			return fmt.Errorf("sqlite: ensure schema v%d: %w", sch.Version, err)
		}
	}
	var incomplete []error
	for _, st := range d.files {
		mine := make([]storage.CheckpointDeclaration, 0, len(decls))
		for _, dc := range decls {
			if d.of(dc.Partition) == st {
				mine = append(mine, dc)
			}
		}
		err := st.EnsureSchema(ctx, sch, mine...)
		switch {
		case err == nil:
		case errors.Is(err, storage.ErrCheckpointIncomplete):
			incomplete = append(incomplete, err)
		default:
			return d.afterCheckpointChange(ctx, err)
		}
	}
	return d.afterCheckpointChange(ctx, errors.Join(incomplete...))
}

// TouchPartition implements storage.Log.
func (d *Dir) TouchPartition(ctx context.Context, partition string, nowMs int64) (storage.PartitionInfo, error) {
	return d.of(partition).TouchPartition(ctx, partition, nowMs)
}

// ReadPartition implements storage.Log.
func (d *Dir) ReadPartition(ctx context.Context, partition string) (storage.PartitionInfo, error) {
	return d.of(partition).ReadPartition(ctx, partition)
}

// RotateLogEpoch implements storage.Log.
func (d *Dir) RotateLogEpoch(ctx context.Context, partition string, nowMs int64) (string, error) {
	return d.of(partition).RotateLogEpoch(ctx, partition, nowMs)
}

// BeginPush implements storage.Log: a transaction of the partition's file
// (dirTx).
func (d *Dir) BeginPush(ctx context.Context, partition string) (storage.PushTx, error) {
	i := FileOf(partition, len(d.files))
	tx, err := d.files[i].BeginPush(ctx, partition)
	if err != nil {
		return nil, err
	}
	return &dirTx{PushTx: tx, inner: tx.(*pushTx), d: d, file: i}, nil
}

// LookupIdempotency implements storage.Log.
func (d *Dir) LookupIdempotency(ctx context.Context, partition, clientID, clientCommitID string) (*storage.IdempotencyRecord, error) {
	return d.of(partition).LookupIdempotency(ctx, partition, clientID, clientCommitID)
}

// ScanChanges implements storage.Log.
func (d *Dir) ScanChanges(ctx context.Context, partition string, q storage.ChangeQuery) (storage.ChangeScan, error) {
	return d.of(partition).ScanChanges(ctx, partition, q)
}

// LatestScopeCommit implements storage.Log.
func (d *Dir) LatestScopeCommit(ctx context.Context, partition string, q storage.ScopeCommitQuery) (int64, error) {
	return d.of(partition).LatestScopeCommit(ctx, partition, q)
}

// ScanRows implements storage.Rows.
func (d *Dir) ScanRows(ctx context.Context, partition string, q storage.RowQuery) ([]storage.RowRecord, error) {
	return d.of(partition).ScanRows(ctx, partition, q)
}

// VisitRows implements storage.Rows.
func (d *Dir) VisitRows(ctx context.Context, partition string, q storage.RowQuery, fn func(rec storage.RowRecord) error) error {
	return d.of(partition).VisitRows(ctx, partition, q, fn)
}

// EncodeRows implements storage.RowEncoder.
func (d *Dir) EncodeRows(ctx context.Context, partition string, q storage.RowQuery, sb *ssp2.SegmentBuilder) (storage.EncodedRows, error) {
	return d.of(partition).EncodeRows(ctx, partition, q, sb)
}

// CopyRowsToImage implements storage.ImageCopier.
func (d *Dir) CopyRowsToImage(ctx context.Context, partition string, q storage.RowQuery, imagePath string) (int64, error) {
	return d.of(partition).CopyRowsToImage(ctx, partition, q, imagePath)
}

// GetClient implements storage.Clients.
func (d *Dir) GetClient(ctx context.Context, partition, clientID string) (*storage.ClientRecord, error) {
	return d.of(partition).GetClient(ctx, partition, clientID)
}

// PutClient implements storage.Clients.
func (d *Dir) PutClient(ctx context.Context, partition string, recs ...storage.ClientRecord) error {
	return d.of(partition).PutClient(ctx, partition, recs...)
}

// AdvanceClients implements storage.Clients.
func (d *Dir) AdvanceClients(ctx context.Context, partition, logEpoch string, acks ...storage.ClientAdvance) (int, error) {
	return d.of(partition).AdvanceClients(ctx, partition, logEpoch, acks...)
}

// BindClient implements storage.Clients.
func (d *Dir) BindClient(ctx context.Context, partition, clientID, actorID string, nowMs int64) (string, error) {
	return d.of(partition).BindClient(ctx, partition, clientID, actorID, nowMs)
}

// BindClients implements storage.Clients.
func (d *Dir) BindClients(ctx context.Context, partition string, nowMs int64, binds ...storage.ClientBinding) ([]storage.BoundClient, error) {
	return d.of(partition).BindClients(ctx, partition, nowMs, binds...)
}

// DeclareCheckpoint implements storage.Checkpoints.
func (d *Dir) DeclareCheckpoint(ctx context.Context, dc storage.CheckpointDeclaration, nowMs int64) (storage.Checkpoint, error) {
	cp, err := d.of(dc.Partition).DeclareCheckpoint(ctx, dc, nowMs)
	return cp, d.afterCheckpointChange(ctx, err)
}

// afterCheckpointChange gives the files a new checkpoint generation after
// a call that may have changed which checkpoints are pending; err is the
// call's error, returned as it is. A failed generation write is logged,
// not returned: the call's change is committed (an error would have its
// caller retry a declaration or activation that already took effect, and
// an activation retried answers stale), and the other files' gates see
// the change within maxPendingAge without it, as after a process that
// died between the two.
func (d *Dir) afterCheckpointChange(ctx context.Context, err error) error {
	if genErr := d.newCheckpointGen(context.WithoutCancel(ctx)); genErr != nil {
		d.log.Warn("sqlite: checkpoint generation not renewed; the other files' serve gates see the change within their backstop",
			zap.Duration("backstop", maxPendingAge), zap.Error(genErr))
	}
	return err
}

// ClaimCheckpoint implements storage.Checkpoints.
func (d *Dir) ClaimCheckpoint(ctx context.Context, dc storage.CheckpointDeclaration, nowMs int64) (storage.Checkpoint, error) {
	cp, err := d.of(dc.Partition).ClaimCheckpoint(ctx, dc, nowMs)
	return cp, d.afterCheckpointChange(ctx, err)
}

// ActivateCheckpoint implements storage.Checkpoints.
func (d *Dir) ActivateCheckpoint(ctx context.Context, partition, name string, epoch, watermark int64, sources []string, nowMs int64) (storage.ActivationOutcome, error) {
	out, err := d.of(partition).ActivateCheckpoint(ctx, partition, name, epoch, watermark, sources, nowMs)
	return out, d.afterCheckpointChange(ctx, err)
}

// everyFile returns what list answers for every file of d, concatenated
// in file order (the caller merges them into its contract's order).
func everyFile[T any](d *Dir, list func(*Store) ([]T, error)) ([]T, error) {
	var out []T
	for _, st := range d.files {
		xs, err := list(st)
		if err != nil {
			return nil, err
		}
		out = append(out, xs...)
	}
	return out, nil
}

// ReadCheckpoints implements storage.Checkpoints: every file's, ordered by
// (partition, name).
func (d *Dir) ReadCheckpoints(ctx context.Context) ([]storage.Checkpoint, error) {
	out, err := everyFile(d, func(st *Store) ([]storage.Checkpoint, error) { return st.ReadCheckpoints(ctx) })
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

// ReadServeGate implements storage.Checkpoints: the partition's file's
// gate with the pending checkpoints of every other file.
func (d *Dir) ReadServeGate(ctx context.Context, partition string, running int32) (storage.ServeGate, error) {
	i := FileOf(partition, len(d.files))
	g, gen, err := d.files[i].readServeGate(ctx, partition, running)
	if err != nil {
		return g, err
	}
	return d.withPendingElsewhere(ctx, g, i, gen, running)
}

// PruneThrough implements storage.Checkpoints.
func (d *Dir) PruneThrough(ctx context.Context, partition string, seq int64) error {
	return d.of(partition).PruneThrough(ctx, partition, seq)
}

// ListPartitions implements storage.Retention: every file's, ordered by
// partition id.
func (d *Dir) ListPartitions(ctx context.Context) ([]storage.PartitionInfo, error) {
	out, err := everyFile(d, func(st *Store) ([]storage.PartitionInfo, error) { return st.ListPartitions(ctx) })
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b storage.PartitionInfo) int { return strings.Compare(a.Partition, b.Partition) })
	return out, nil
}

// ReadRetentionInputs implements storage.Retention.
func (d *Dir) ReadRetentionInputs(ctx context.Context, partition string, activeAfterMs int64) (storage.RetentionInputs, error) {
	return d.of(partition).ReadRetentionInputs(ctx, partition, activeAfterMs)
}

// FirstCommitAfter implements storage.Retention.
func (d *Dir) FirstCommitAfter(ctx context.Context, partition string, afterSeq, upToSeq, createdAfterMs int64) (int64, error) {
	return d.of(partition).FirstCommitAfter(ctx, partition, afterSeq, upToSeq, createdAfterMs)
}

// PruneBatch implements storage.Retention.
func (d *Dir) PruneBatch(ctx context.Context, partition string, req storage.PruneRequest) (storage.PruneResult, error) {
	return d.of(partition).PruneBatch(ctx, partition, req)
}

// CountPrune implements storage.Retention.
func (d *Dir) CountPrune(ctx context.Context, partition string, throughSeq int64) (storage.PruneResult, error) {
	return d.of(partition).CountPrune(ctx, partition, throughSeq)
}

// TryLockMaintenance implements storage.Retention: one lease, in the home
// file, for the whole directory.
func (d *Dir) TryLockMaintenance(ctx context.Context) (func(), bool, error) {
	return d.home().TryLockMaintenance(ctx)
}

// MaintenanceHolder reads the home file's maintenance lease
// (Store.MaintenanceHolder).
func (d *Dir) MaintenanceHolder(ctx context.Context) (storage.MaintenanceHolder, bool, error) {
	return d.home().MaintenanceHolder(ctx)
}

// CapturePartition implements storage.Snapshots.
func (d *Dir) CapturePartition(ctx context.Context, partition string) error {
	return d.of(partition).CapturePartition(ctx, partition)
}

// RestorePartition implements storage.Snapshots.
func (d *Dir) RestorePartition(ctx context.Context, partition string, nowMs int64) (string, error) {
	return d.of(partition).RestorePartition(ctx, partition, nowMs)
}

// GetLease implements storage.Leases.
func (d *Dir) GetLease(ctx context.Context, partition, clientID string) (*storage.LeaseRecord, error) {
	return d.of(partition).GetLease(ctx, partition, clientID)
}

// FindLease implements storage.Leases.
func (d *Dir) FindLease(ctx context.Context, partition, leaseID string) (*storage.LeaseRecord, error) {
	return d.of(partition).FindLease(ctx, partition, leaseID)
}

// SwapLease implements storage.Leases.
func (d *Dir) SwapLease(ctx context.Context, partition string, rec storage.LeaseRecord, prevMAC []byte) (bool, error) {
	return d.of(partition).SwapLease(ctx, partition, rec, prevMAC)
}

// Query implements storage.Querier on the partition's file (its serve
// gate check sees that file's gate; the pending checkpoints of the other
// files are added to it).
//
// The query's snapshot holds a read connection of the partition's file,
// so the other files are never read inside it: a query of file i waiting
// for file j's read pool while holding i's, and one of j waiting for i's
// while holding j's, would deadlock once both pools are taken. When the
// reading of the other files the snapshot's checkpoint generation needs
// is not at hand, the snapshot is given up, the other files are read
// (under that generation, which was seen before the reading began) and
// the query starts again.
func (d *Dir) Query(ctx context.Context, partition string, running int32, q storage.Query, check func(storage.ServeGate) error) (storage.QueryResult, error) {
	i := FileOf(partition, len(d.files))
	var fresh *pendingReading // taken by this call, whatever its age
	for {
		var stale string
		missed := false
		res, err := d.files[i].query(ctx, partition, running, q, func(g storage.ServeGate, gen string) error {
			r := fresh
			if r == nil || r.gen != gen || r.running != running {
				if r = d.cachedPending(i, gen, running); r == nil {
					stale, missed = gen, true
					return errPendingStale
				}
			}
			return check(withPending(g, r.refs))
		})
		if !missed {
			return res, err
		}
		refs, err := d.pendingElsewhere(ctx, i, stale, running)
		if err != nil {
			return storage.QueryResult{}, fmt.Errorf("sqlite: read serve gate: %w", err)
		}
		fresh = &pendingReading{gen: stale, running: running, refs: refs}
	}
}

// AdminPartitions implements storage.AdminReader: the first limit
// partitions after after across every file, in id order.
func (d *Dir) AdminPartitions(ctx context.Context, after string, limit int) ([]storage.PartitionOverview, error) {
	out, err := everyFile(d, func(st *Store) ([]storage.PartitionOverview, error) { return st.AdminPartitions(ctx, after, limit) })
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
func (d *Dir) AdminPartition(ctx context.Context, partition string) (storage.PartitionOverview, error) {
	return d.of(partition).AdminPartition(ctx, partition)
}

// AdminClients implements storage.AdminReader.
func (d *Dir) AdminClients(ctx context.Context, partition, after string, limit int) ([]storage.ClientRecord, error) {
	return d.of(partition).AdminClients(ctx, partition, after, limit)
}

// AdminCommits implements storage.AdminReader.
func (d *Dir) AdminCommits(ctx context.Context, partition string, beforeSeq int64, limit int) ([]storage.CommitRecord, error) {
	return d.of(partition).AdminCommits(ctx, partition, beforeSeq, limit)
}

// AdminRow implements storage.AdminReader.
func (d *Dir) AdminRow(ctx context.Context, partition string, t *schema.Table, rowID string) (*storage.RowRecord, error) {
	return d.of(partition).AdminRow(ctx, partition, t, rowID)
}
