package retention

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/storage"
)

// ErrNoRetention reports MaintenancePass on an engine whose storage
// backend has no Retention role (Prune answers it too, wrapped).
var ErrNoRetention = errors.New("engine: the storage backend has no Retention role")

// ErrNoSnapshots reports Capture on an engine whose storage backend has
// no Snapshots role (Restore answers a like error).
var ErrNoSnapshots = errors.New("engine: the storage backend has no Snapshots role")

// DefaultBatchCommits is how many commits one pruning transaction
// deletes unless Options.BatchCommits says otherwise.
const DefaultBatchCommits = 250

// Options configure pruning and the maintenance loop
// (engine.Config.Retention; SPEC §4.6, see storage.Retention).
type Options struct {
	// Policy is the policy of MaintenancePass and the maintenance loop. The
	// zero value means storage.DefaultRetentionPolicy() (the normative
	// floors); hosts should only raise them (storage.RetentionPolicy's
	// CheckFloors).
	Policy storage.RetentionPolicy
	// Interval between the maintenance loop's passes; 0 runs no loop
	// (MaintenancePass and Prune still work when called).
	Interval time.Duration
	// BatchCommits bounds the commits one pruning transaction deletes, and
	// so how long it holds the partition (default
	// DefaultBatchCommits).
	BatchCommits int
}

// PruneReport is one partition's pruning run.
type PruneReport struct {
	Partition string
	// Plan is the plan the run pruned toward (made by its first batch).
	Plan storage.RetentionPlan
	// HorizonBefore and HorizonAfter bracket the run.
	HorizonBefore, HorizonAfter int64
	// Commits, Changes and IdempotencyRecords count the rows deleted;
	// Tombstones the delete tombstones (SPEC §2.2) that went with them.
	Commits, Changes, IdempotencyRecords, Tombstones int64
	// Batches counts the pruning transactions and BatchTime sums their
	// durations; Took is the whole run, pauses included.
	Batches   int
	BatchTime time.Duration
	Took      time.Duration
}

// BatchProgress is one committed pruning batch (or, for a dry run, the
// counted run), as PassOptions.OnBatch sees it.
type BatchProgress struct {
	Partition string
	// Batch numbers the partition's batches from 1.
	Batch int
	// Commits, Changes, IdempotencyRecords and Tombstones count what the
	// batch deleted (for a dry run: what the run would delete).
	Commits, Changes, IdempotencyRecords, Tombstones int64
	// HorizonSeq is the horizon after the batch and Target the planned one.
	HorizonSeq, Target int64
	// Elapsed is the time since the partition's run started.
	Elapsed time.Duration
	DryRun  bool
}

// PassOptions configure one MaintenancePassWith or PruneWith call.
type PassOptions struct {
	// DryRun deletes nothing and reports what the run would delete.
	DryRun bool
	// OnBatch, when set, is called after every committed batch (and once
	// per partition for a dry run), on the calling goroutine.
	OnBatch func(BatchProgress)
}

// stopGrace bounds how long a pruning run waits for its batch in flight
// after its context ended (the batch is one bounded transaction; its
// counts are reported when it answers).
const stopGrace = time.Minute

// MaintenanceReport is one maintenance pass.
type MaintenanceReport struct {
	// Skipped is true when another process (or pass) held the maintenance
	// lock: this pass did nothing.
	Skipped bool
	// Checked counts the partitions looked at; Pruned lists the runs that
	// moved a horizon (with DryRun: that would). NotOwned counts the
	// partitions left to the cluster members that own them (cluster mode).
	Checked  int
	NotOwned int
	Pruned   []PruneReport
	// Kept lists the partitions checked and not pruned, each with the plan
	// that kept it (Plan.Binding says why: storage.BindingMinRetained,
	// BindingActiveClient, BindingCheckpoint, BindingNothing).
	Kept []PruneReport
	// SegmentsExpired counts the segments whose TTL had passed and whose
	// bytes the pass dropped (none with DryRun).
	SegmentsExpired int
	// BlobsSwept counts the orphan blobs the pass removed (none with DryRun).
	BlobsSwept int
	Took       time.Duration
}

// Commits sums the commits the pass deleted.
func (r MaintenanceReport) Commits() int64 {
	var n int64
	for _, p := range r.Pruned {
		n += p.Commits
	}
	return n
}

// Stats are the engine's pruning counters since start.
type Stats struct {
	// Passes and SkippedPasses count maintenance passes (skipped: the lock
	// was held elsewhere); LastPassMs is the engine clock at the end of the
	// last one (0 before any).
	Passes        uint64 `json:"passes"`
	SkippedPasses uint64 `json:"skippedPasses"`
	LastPassMs    int64  `json:"lastPassMs"`
	// Commits, Changes and IdempotencyRecords count rows pruned by this
	// process (maintenance passes and Prune calls).
	Commits            uint64 `json:"commits"`
	Changes            uint64 `json:"changes"`
	IdempotencyRecords uint64 `json:"idempotencyRecords"`
	// Tombstones counts the delete tombstones pruned with them.
	Tombstones uint64 `json:"tombstones"`
	// Horizons holds the horizon of every partition this process pruned
	// or planned, as it last saw it.
	Horizons map[string]int64 `json:"horizons"`
}

type retentionMetrics struct {
	mu sync.Mutex
	s  Stats
}

func (m *retentionMetrics) observe(r PruneReport) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.s.Commits += uint64(r.Commits)
	m.s.Changes += uint64(r.Changes)
	m.s.IdempotencyRecords += uint64(r.IdempotencyRecords)
	m.s.Tombstones += uint64(r.Tombstones)
	if m.s.Horizons == nil {
		m.s.Horizons = map[string]int64{}
	}
	m.s.Horizons[r.Partition] = r.HorizonAfter
}

func (m *retentionMetrics) pass(skipped bool, nowMs int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if skipped {
		m.s.SkippedPasses++
	} else {
		m.s.Passes++
	}
	m.s.LastPassMs = nowMs
}

func (m *retentionMetrics) snapshot() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.s
	s.Horizons = maps.Clone(m.s.Horizons)
	return s
}

// Policy returns the policy of the maintenance loop (Options.Policy, or
// the defaults).
func (s *Service) Policy() storage.RetentionPolicy {
	if s.opts.Policy == (storage.RetentionPolicy{}) {
		return storage.DefaultRetentionPolicy()
	}
	return s.opts.Policy
}

// Prune prunes one partition under policy, ages read from the engine's
// clock: the partition's actor writes its buffered client records back and
// plans the target horizon, then deletes toward it in batches of
// Options.BatchCommits commits, each one storage transaction that
// holds the partition only for itself (pushes queued meanwhile go first);
// after each batch Prune waits as long as the batch took, so pruning uses
// at most half of the partition's (on SQLite: the database's) write time.
// With dryRun it only plans. Prune needs no maintenance lock: concurrent
// runs split the work. policy is taken as given (tests may go below the
// floors).
func (s *Service) Prune(ctx context.Context, part string, policy storage.RetentionPolicy, dryRun bool) (PruneReport, error) {
	return s.PruneWith(ctx, part, policy, PassOptions{DryRun: dryRun})
}

// PruneWith is Prune with progress reporting. When ctx ends during a
// batch, the run waits for that batch (up to a minute), then stops: the
// report counts every committed batch, and the error wraps ctx's. A dry
// run's report counts what the run would delete (storage
// Retention.CountPrune) and leaves HorizonAfter at HorizonBefore.
func (s *Service) PruneWith(ctx context.Context, part string, policy storage.RetentionPolicy, opts PassOptions) (PruneReport, error) {
	dryRun := opts.DryRun
	rep := PruneReport{Partition: part}
	if err := policy.Validate(); err != nil {
		return rep, fmt.Errorf("engine: prune %q: %w", part, err)
	}
	if part == "" {
		return rep, fmt.Errorf("engine: prune: empty partition name")
	}
	if verr := partition.ValidateIdentity("retention", part); verr != nil {
		return rep, fmt.Errorf("engine: prune %q: %w", part, verr)
	}
	if s.rt == nil {
		return rep, fmt.Errorf("engine: prune %q: %w", part, ErrNoRetention)
	}
	start := time.Now()
	var through int64
	var epoch string
	var pause *time.Timer
	replanned := false
	for first := true; ; {
		if pause != nil {
			// Pace: after each batch, leave the partition (and, on SQLite,
			// the database's single writer) to pushes for as long as the
			// batch's transaction took, so pruning never takes more than
			// half of it.
			select {
			case <-pause.C:
			case <-ctx.Done():
				pause.Stop()
				rep.Took = time.Since(start)
				s.metrics.observe(rep)
				return rep, fmt.Errorf("engine: prune %q: %w", part, ctx.Err())
			}
		}
		if err := ctx.Err(); err != nil {
			rep.Took = time.Since(start)
			s.metrics.observe(rep)
			return rep, fmt.Errorf("engine: prune %q: %w", part, err)
		}
		// The batch runs, and is waited for, past the end of ctx (bounded by
		// stopGrace), so a stop never loses the count of a committed batch.
		bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		stopWait := context.AfterFunc(ctx, func() { time.AfterFunc(stopGrace, cancel) })
		j := partition.NewPruneJob(bctx)
		j.Policy, j.Through, j.LogEpoch, j.MaxCommits, j.DryRun = policy, through, epoch, s.batchCommits(), dryRun
		s.deps.Actors.Submit(part, j)
		o := j.Wait(bctx)
		stopWait()
		cancel()
		if errors.Is(o.Err, storage.ErrLogEpochChanged) && !replanned {
			// The log was rotated or restored since the plan (SPEC §4.6):
			// the batch deleted nothing; plan again from the new log's
			// inputs, once per run.
			s.deps.Logger.Info("partition log epoch changed while pruning; planning again", zap.String("partition", part),
				zap.String("planned_epoch", epoch))
			replanned, first, through, epoch, pause = true, true, 0, "", nil
			continue
		}
		if o.Err != nil {
			rep.Took = time.Since(start)
			s.metrics.observe(rep)
			return rep, fmt.Errorf("engine: prune %q: %w", part, o.Err)
		}
		if first {
			rep.Plan, through, epoch = o.Plan, o.Plan.Target, o.Plan.Partition.LogEpoch
			rep.HorizonBefore, rep.HorizonAfter = o.Plan.Partition.HorizonSeq, o.Plan.Partition.HorizonSeq
			first = false
		}
		if dryRun {
			rep.Commits, rep.Changes, rep.IdempotencyRecords, rep.Tombstones = o.Result.Commits, o.Result.Changes, o.Result.IdempotencyRecords, o.Result.Tombstones
			if opts.OnBatch != nil && o.Result.Commits > 0 {
				opts.OnBatch(BatchProgress{Partition: part, Batch: 1, Commits: o.Result.Commits, Changes: o.Result.Changes,
					IdempotencyRecords: o.Result.IdempotencyRecords, Tombstones: o.Result.Tombstones, HorizonSeq: o.Result.HorizonSeq, Target: through, Elapsed: time.Since(start), DryRun: true})
			}
			break
		}
		if o.Result.Commits > 0 {
			rep.Batches++
			rep.BatchTime += o.Took
		}
		rep.Commits += o.Result.Commits
		rep.Changes += o.Result.Changes
		rep.IdempotencyRecords += o.Result.IdempotencyRecords
		rep.Tombstones += o.Result.Tombstones
		rep.HorizonAfter = max(rep.HorizonAfter, o.Result.HorizonSeq)
		if opts.OnBatch != nil && o.Result.Commits > 0 {
			opts.OnBatch(BatchProgress{Partition: part, Batch: rep.Batches, Commits: o.Result.Commits, Changes: o.Result.Changes,
				IdempotencyRecords: o.Result.IdempotencyRecords, Tombstones: o.Result.Tombstones, HorizonSeq: rep.HorizonAfter, Target: through, Elapsed: time.Since(start)})
		}
		if o.Result.Commits == 0 || rep.HorizonAfter >= through {
			break
		}
		pause = time.NewTimer(o.Took)
	}
	rep.Took = time.Since(start)
	if dryRun {
		return rep, nil
	}
	s.metrics.observe(rep)
	if rep.Commits > 0 {
		s.deps.Logger.Info("partition pruned", zap.String("partition", part),
			zap.Int64("horizon_before", rep.HorizonBefore), zap.Int64("horizon_after", rep.HorizonAfter),
			zap.Int64("commits", rep.Commits), zap.Int64("changes", rep.Changes), zap.Int64("idempotency_records", rep.IdempotencyRecords), zap.Int64("tombstones", rep.Tombstones),
			zap.String("binding", rep.Plan.Binding), zap.Int("batches", rep.Batches), zap.Duration("took", rep.Took))
	}
	return rep, nil
}

func (s *Service) batchCommits() int {
	if n := s.opts.BatchCommits; n > 0 {
		return n
	}
	return DefaultBatchCommits
}

// MaintenancePass runs one maintenance pass: with the store's maintenance
// lock (one process at a time on a shared database; the pass is skipped
// when another holds it), every partition whose log is longer than the
// policy's retained minimum is pruned with Policy (Prune), then expired
// segments and orphan blobs (Deps.Segments, Deps.Blobs) are swept. With
// dryRun nothing is deleted and Pruned lists what would be.
func (s *Service) MaintenancePass(ctx context.Context, dryRun bool) (MaintenanceReport, error) {
	return s.MaintenancePassWith(ctx, PassOptions{DryRun: dryRun})
}

// MaintenancePassWith is MaintenancePass with progress reporting; it also
// lists the partitions it kept (MaintenanceReport.Kept). When ctx ends,
// the pass stops after the batch in flight and the report counts what
// was pruned (the error is ctx's).
func (s *Service) MaintenancePassWith(ctx context.Context, opts PassOptions) (MaintenanceReport, error) {
	dryRun := opts.DryRun
	start := time.Now()
	var rep MaintenanceReport
	rt := s.rt
	if rt == nil {
		return rep, ErrNoRetention
	}
	owns := s.deps.Owns
	var unlock func()
	if owns == nil {
		var ok bool
		var err error
		if unlock, ok, err = rt.TryLockMaintenance(ctx); err != nil {
			return rep, fmt.Errorf("engine: maintenance lock: %w", err)
		} else if !ok {
			rep.Skipped = true
			s.metrics.pass(true, s.deps.Now().UnixMilli())
			s.deps.Logger.Debug("maintenance pass skipped: another process holds the maintenance lock")
			return rep, nil
		}
		defer unlock()
	}
	parts, err := rt.ListPartitions(ctx)
	if err != nil {
		return rep, fmt.Errorf("engine: maintenance: list partitions: %w", err)
	}
	policy := s.Policy()
	var firstErr error
	for _, p := range parts {
		if ctx.Err() != nil {
			rep.Took = time.Since(start)
			return rep, ctx.Err()
		}
		if owns != nil && !owns(p.Partition) {
			rep.NotOwned++
			continue
		}
		rep.Checked++
		if p.MaxCommitSeq-policy.MinRetainedCommits <= p.HorizonSeq {
			// Nothing the policy could prune: no actor woken.
			kept := PruneReport{Partition: p.Partition, HorizonBefore: p.HorizonSeq, HorizonAfter: p.HorizonSeq,
				Plan: storage.RetentionPlan{RetentionInputs: storage.RetentionInputs{Partition: p, MinActiveCursor: -1, CheckpointFloor: -1},
					Target: p.HorizonSeq, Binding: storage.BindingNothing}}
			if p.MaxCommitSeq > p.HorizonSeq {
				kept.Plan.Binding = storage.BindingMinRetained
			}
			rep.Kept = append(rep.Kept, kept)
			continue
		}
		pr, err := s.PruneWith(ctx, p.Partition, policy, opts)
		if err != nil {
			if pr.Commits > 0 {
				rep.Pruned = append(rep.Pruned, pr) // committed batches before the failure or stop
			}
			if ctx.Err() != nil {
				rep.Took = time.Since(start)
				return rep, err
			}
			s.deps.Logger.Warn("maintenance: pruning a partition failed", zap.String("partition", p.Partition), zap.Error(err))
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if pr.Commits > 0 || (dryRun && pr.Plan.Prunable()) {
			rep.Pruned = append(rep.Pruned, pr)
		} else {
			rep.Kept = append(rep.Kept, pr)
		}
	}
	if owns != nil && !dryRun {
		// The store-wide sweeps run on one member at a time.
		unlock, ok, err := rt.TryLockMaintenance(ctx)
		if err != nil || !ok {
			if err != nil {
				s.deps.Logger.Warn("maintenance: the sweep lock could not be taken", zap.Error(err))
			}
			rep.Took = time.Since(start)
			s.metrics.pass(false, s.deps.Now().UnixMilli())
			return rep, firstErr
		}
		defer unlock()
	}
	if !dryRun {
		// Expired segments (the segment cache's own sweeper also runs
		// between passes; sweeping twice is harmless).
		n, err := s.deps.Segments.Sweep(ctx)
		rep.SegmentsExpired = n
		if err != nil {
			s.deps.Logger.Warn("maintenance: segment sweep failed", zap.Error(err))
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	if !dryRun {
		n, err := s.deps.Blobs.Sweep(ctx)
		rep.BlobsSwept = n
		if err != nil {
			s.deps.Logger.Warn("maintenance: blob sweep failed", zap.Error(err))
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	rep.Took = time.Since(start)
	s.metrics.pass(false, s.deps.Now().UnixMilli())
	lvl := zap.DebugLevel
	if (len(rep.Pruned) > 0 || rep.SegmentsExpired > 0) && !dryRun {
		lvl = zap.InfoLevel
	}
	s.deps.Logger.Log(lvl, "maintenance pass", zap.Int("partitions_checked", rep.Checked), zap.Int("partitions_pruned", len(rep.Pruned)),
		zap.Int64("commits", rep.Commits()), zap.Int("segments_expired", rep.SegmentsExpired), zap.Int("blobs_swept", rep.BlobsSwept), zap.Bool("dry_run", dryRun), zap.Duration("took", rep.Took))
	return rep, firstErr
}

// runMaintenance runs a maintenance pass every interval until ctx ends.
func (s *Service) runMaintenance(ctx context.Context, every time.Duration) {
	defer close(s.maintDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := s.MaintenancePass(ctx, false); err != nil && ctx.Err() == nil {
			s.deps.Logger.Warn("maintenance pass failed", zap.Error(err))
		}
	}
}

// Capture takes a storage snapshot of the partition (see
// storage.Snapshots) for a later Restore.
func (s *Service) Capture(ctx context.Context, part string) error {
	if s.snaps == nil {
		return fmt.Errorf("engine: capture %q: %w", part, ErrNoSnapshots)
	}
	if err := s.snaps.CapturePartition(ctx, part); err != nil {
		return fmt.Errorf("engine: capture %q: %w", part, err)
	}
	return nil
}

// Restore brings the partition back to its last capture and
// rotates its log epoch, through the partition's actor (which drops the
// client records and log tail of the replaced log), and returns the new
// epoch: clients that are ahead of the restored log get resetRequired and
// bootstrap again.
func (s *Service) Restore(ctx context.Context, part string) (string, error) {
	j := partition.NewRestoreJob(ctx)
	s.deps.Actors.Submit(part, j)
	ep, err := j.Wait(ctx)
	if err != nil {
		return "", fmt.Errorf("engine: restore %q: %w", part, err)
	}
	s.deps.Logger.Info("partition restored from its snapshot; log epoch rotated", zap.String("partition", part), zap.String("epoch", ep))
	return ep, nil
}
