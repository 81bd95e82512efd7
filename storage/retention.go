package storage

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Retention (SPEC §4.6): pruning the commit log below a partition's
// horizon.
//
// The policy has three limits, each with a normative floor that hosts may
// raise but not lower:
//   - never prune past the lowest cursor of a client active within
//     ActiveWindowMs (14 days);
//   - a commit at least AgeForceMs old (30 days) may be forced out even
//     when an active client still needs it;
//   - always keep the newest MinRetainedCommits commits (1,000).
//
// A backfill checkpoint of the partition that is not activated yet holds
// the horizon at its watermark like an active client (activation proves
// coverage from the log above the watermark); AgeForceMs overrides it too.
//
// Pruning advances the partition's horizon and removes, at or below it,
// commits, their changes and scope index entries, and the idempotency
// records that can no longer be replayed: an applied commit's record goes
// with the commit, a rejected commit's record once the horizon reaches the
// log position it was written at (the partition's max commit seq then).
// Delete tombstones (SPEC §2.2) at or below the horizon go in the same
// pass.

// Normative retention floors (SPEC §4.6).
const (
	// DefaultActiveWindow is how recently a client must have been seen
	// for its cursor to hold the horizon back.
	DefaultActiveWindow = 14 * 24 * time.Hour
	// DefaultAgeForce is the age from which a commit may be pruned even
	// when an active client's cursor is below it.
	DefaultAgeForce = 30 * 24 * time.Hour
	// DefaultMinRetainedCommits is how many of the newest commits are
	// always kept.
	DefaultMinRetainedCommits = 1000
)

// RetentionPolicy is one set of retention limits. DefaultRetentionPolicy
// holds the normative floors; CheckFloors refuses anything below them.
type RetentionPolicy struct {
	// ActiveWindowMs: a client whose record was updated less than this
	// long ago is active, and the horizon never passes its cursor.
	ActiveWindowMs int64
	// AgeForceMs: a commit created at least this long ago may be pruned
	// even when an active client's cursor (or a pending checkpoint) is
	// below it.
	AgeForceMs int64
	// MinRetainedCommits: the newest this many commits are always kept.
	MinRetainedCommits int64
}

// DefaultRetentionPolicy returns the normative floors: 14 days, 30 days,
// 1,000 commits.
func DefaultRetentionPolicy() RetentionPolicy {
	return RetentionPolicy{
		ActiveWindowMs:     DefaultActiveWindow.Milliseconds(),
		AgeForceMs:         DefaultAgeForce.Milliseconds(),
		MinRetainedCommits: DefaultMinRetainedCommits,
	}
}

// Validate refuses negative limits.
func (p RetentionPolicy) Validate() error {
	if p.ActiveWindowMs < 0 || p.AgeForceMs < 0 || p.MinRetainedCommits < 0 {
		return fmt.Errorf("retention policy %+v: limits must not be negative", p)
	}
	return nil
}

// CheckFloors refuses a policy below the normative floors (what a host may
// configure; tests may go lower through the engine's API).
func (p RetentionPolicy) CheckFloors() error {
	if err := p.Validate(); err != nil {
		return err
	}
	d := DefaultRetentionPolicy()
	switch {
	case p.ActiveWindowMs < d.ActiveWindowMs:
		return fmt.Errorf("active window %v is below the floor of %v", time.Duration(p.ActiveWindowMs)*time.Millisecond, DefaultActiveWindow)
	case p.AgeForceMs < d.AgeForceMs:
		return fmt.Errorf("force age %v is below the floor of %v", time.Duration(p.AgeForceMs)*time.Millisecond, DefaultAgeForce)
	case p.MinRetainedCommits < d.MinRetainedCommits:
		return fmt.Errorf("minimum retained commits %d is below the floor of %d", p.MinRetainedCommits, DefaultMinRetainedCommits)
	}
	return nil
}

// RetentionInputs are the facts about one partition a retention plan is
// computed from, read by Retention.ReadRetentionInputs.
type RetentionInputs struct {
	// Partition is the registry entry (Exists false: nothing to prune).
	Partition PartitionInfo
	// ActiveClients counts the client records updated after the query's
	// activeAfterMs with a cursor >= 0; MinActiveCursor is their lowest
	// cursor (-1 when there is none).
	ActiveClients   int64
	MinActiveCursor int64
	// CheckpointFloor is the lowest watermark of the partition's
	// checkpoints that are not activated (-1 when there is none).
	CheckpointFloor int64
}

// Retention limits that can bind a plan's target (RetentionPlan.Binding).
const (
	BindingNothing      = "nothing"            // nothing to prune
	BindingMinRetained  = "minRetainedCommits" // the newest commits kept
	BindingActiveClient = "activeClient"       // an active client's cursor
	BindingCheckpoint   = "checkpoint"         // a pending checkpoint's watermark
	BindingAgeForce     = "ageForce"           // commits forced out by age
)

// RetentionPlan is how far a partition's horizon may move now.
type RetentionPlan struct {
	RetentionInputs
	// Target is the horizon the policy allows; nothing is pruned when it is
	// not above Partition.HorizonSeq.
	Target int64
	// Binding names the limit that decided Target (Binding* constants).
	Binding string
}

// Prunable reports whether the plan moves the horizon.
func (p RetentionPlan) Prunable() bool { return p.Target > p.Partition.HorizonSeq }

// PruneResult is what one PruneBatch removed (SPEC §4.6: the previous
// and new horizon and the removed commits, from the batch's transaction).
type PruneResult struct {
	// PreviousHorizonSeq is the partition's horizon before the batch, as
	// read under the partition write lock; HorizonSeq the horizon after it
	// (never lower).
	PreviousHorizonSeq int64
	HorizonSeq         int64
	// Commits, Changes and IdempotencyRecords count the rows deleted.
	Commits, Changes, IdempotencyRecords int64
	// Tombstones counts the delete tombstones (SPEC §2.2) removed with
	// them: every tombstone at or below the new horizon goes in the same
	// pass.
	Tombstones int64
}

// Add accumulates another batch's counts: the horizon is the later one's,
// the previous horizon the first one's (a zero r takes o whole).
func (r *PruneResult) Add(o PruneResult) {
	if *r == (PruneResult{}) {
		*r = o
		return
	}
	r.PreviousHorizonSeq = min(r.PreviousHorizonSeq, o.PreviousHorizonSeq)
	r.HorizonSeq = max(r.HorizonSeq, o.HorizonSeq)
	r.Commits += o.Commits
	r.Changes += o.Changes
	r.IdempotencyRecords += o.IdempotencyRecords
	r.Tombstones += o.Tombstones
}

// Retention is the Retention role of a backend: pruning the commit log
// and the maintenance lock. Every backend has it; the engine needs it for
// the maintenance loop (engine.Config.Retention.Interval) and answers
// Prune and MaintenancePass without it with an error.
type Retention interface {
	// ListPartitions returns every registered partition's entry, ordered
	// by name.
	ListPartitions(ctx context.Context) ([]PartitionInfo, error)

	// RetentionReader reads what PlanRetention plans from.
	RetentionReader

	// PruneBatch is SPEC §4.6's pruneCommitsThrough, bounded to a batch.
	// In one transaction under the partition write lock (the lock pushes,
	// RotateLogEpoch and Snapshots.RestorePartition take, so pruning and an
	// epoch rotation or restore serialize) it first verifies that the
	// partition's log epoch is req.LogEpoch — another epoch (a rotation or
	// a restore since the caller read its retention inputs) fails with
	// ErrLogEpochChanged before anything is deleted, and the caller must
	// plan again — then raises the horizon h to upTo = min(req.ThroughSeq,
	// MaxCommitSeq, h+req.MaxCommits), deleting the commits with seq in
	// (h, upTo], their changes and scope index entries, the applied
	// idempotency records of those commits, the rejected ones written at a
	// log position (the partition's max commit seq then) <= upTo, and the
	// delete tombstones at or below upTo. The horizon and the deletes
	// commit or roll back together, so a batch lost in a crash (or whose
	// reply is lost) leaves nothing half done and is safe to repeat. It
	// never lowers the horizon; upTo <= h or MaxCommits < 1 deletes
	// nothing and returns the horizon as is; a never-created partition
	// cannot be pruned (zero result, no error). Concurrent calls are safe:
	// each batch starts from the horizon it reads under the lock.
	PruneBatch(ctx context.Context, partition string, req PruneRequest) (PruneResult, error)

	// CountPrune counts, in one consistent read and deleting nothing, what
	// PruneBatch calls raising the horizon h to upTo = min(throughSeq,
	// MaxCommitSeq) would delete now: the commits with seq in (h, upTo],
	// their changes, the applied idempotency records of those commits and
	// the rejected ones written at a log position <= upTo (none when upTo
	// <= h). PreviousHorizonSeq is h and HorizonSeq upTo (h when upTo <=
	// h). A never-created partition counts nothing. It is what a dry run
	// reports.
	CountPrune(ctx context.Context, partition string, throughSeq int64) (PruneResult, error)

	// TryLockMaintenance takes the store-wide maintenance lock without
	// waiting: ok is false when another holder (another process on a
	// shared database, or another handle) has it. unlock releases it; it
	// is safe to call once. The lock only keeps two maintenance passes from
	// doing the same work; pruning is safe without it.
	TryLockMaintenance(ctx context.Context) (unlock func(), ok bool, err error)
}

// PruneRequest is one pruning batch of a partition (Retention.PruneBatch).
type PruneRequest struct {
	// LogEpoch is the partition's log epoch as read with the retention
	// inputs the target was planned from (RetentionPlan.Partition.LogEpoch:
	// ReadRetentionInputs reads it in the same consistent read as the
	// cursors, so it is captured no later than them). Required.
	LogEpoch string
	// ThroughSeq is the planned target horizon.
	ThroughSeq int64
	// MaxCommits bounds the commits the batch deletes.
	MaxCommits int
}

// ErrLogEpochChanged reports a PruneBatch whose LogEpoch is not the
// partition's: its log was rotated or restored since the retention inputs
// were read, so the plan no longer describes it. Nothing was deleted.
var ErrLogEpochChanged = errors.New("storage: the partition's log epoch changed since the retention inputs were read; plan again")

// ErrNoSnapshot reports RestorePartition without an earlier
// CapturePartition of the partition.
var ErrNoSnapshot = errors.New("storage: no captured snapshot of the partition")

// Snapshots is the Snapshots role of a backend: the online partition
// backup offered to test harnesses (the process-level backups are
// synclane backup, VACUUM INTO, and pg_dump; see docs/retention.md). Every
// backend has it; without it the engine answers CapturePartition and
// RestorePartition with an error.
type Snapshots interface {
	// CapturePartition copies the partition's committed state (registry
	// entry, rows of every synced table, commits, changes, scope index and
	// idempotency records) aside in one consistent read under the
	// partition write lock, replacing an earlier capture of it. The
	// capture lives as long as the store (on SQLite, the writer
	// connection; in memory, the database; on PostgreSQL, tables of the
	// store's schema).
	CapturePartition(ctx context.Context, partition string) error

	// RestorePartition brings the partition back to its last capture and
	// rotates its log epoch (as RotateLogEpoch: a new epoch, marked
	// required, client records deleted), all in one transaction under the
	// partition write lock, so no request ever sees the restored log under
	// the old epoch. It returns the new epoch, or ErrNoSnapshot. The
	// synced schema must be the one of the capture.
	RestorePartition(ctx context.Context, partition string, nowMs int64) (string, error)
}

// RetentionReader is the part of the Retention role PlanRetention reads.
type RetentionReader interface {
	// ReadRetentionInputs reads the partition's registry entry, its client
	// records updated after activeAfterMs with a cursor >= 0 (count and
	// lowest cursor) and the lowest watermark of its checkpoints that are
	// not activated. A never-created partition has Exists false.
	ReadRetentionInputs(ctx context.Context, partition string, activeAfterMs int64) (RetentionInputs, error)

	// FirstCommitAfter returns the lowest seq in (afterSeq, upToSeq] of a
	// commit of the partition created after createdAfterMs, or 0 when
	// there is none. It reads commits in seq order from afterSeq, so its
	// cost grows with the number of older commits it passes.
	FirstCommitAfter(ctx context.Context, partition string, afterSeq, upToSeq, createdAfterMs int64) (int64, error)
}

// PlanRetention computes how far the partition's horizon may move at
// nowMs under policy. The target is
//
//	min(max - MinRetainedCommits, max(floor, aged))
//
// where floor is the lowest cursor of the clients active within
// ActiveWindowMs and the lowest watermark of the partition's pending
// checkpoints (no floor when there is neither), and aged is the end of
// the run of commits, starting above the floor, created at or before
// nowMs - AgeForceMs. The target is never below the current horizon.
func PlanRetention(ctx context.Context, r RetentionReader, partition string, policy RetentionPolicy, nowMs int64) (RetentionPlan, error) {
	if err := policy.Validate(); err != nil {
		return RetentionPlan{}, err
	}
	in, err := r.ReadRetentionInputs(ctx, partition, nowMs-policy.ActiveWindowMs)
	if err != nil {
		return RetentionPlan{}, err
	}
	plan := RetentionPlan{RetentionInputs: in, Target: in.Partition.HorizonSeq, Binding: BindingNothing}
	horizon := in.Partition.HorizonSeq
	limit := in.Partition.MaxCommitSeq - policy.MinRetainedCommits
	if !in.Partition.Exists || limit <= horizon {
		if in.Partition.Exists && in.Partition.MaxCommitSeq > horizon {
			plan.Binding = BindingMinRetained
		}
		return plan, nil
	}
	floor, binding := limit, BindingMinRetained
	if in.ActiveClients > 0 && in.MinActiveCursor < floor {
		floor, binding = in.MinActiveCursor, BindingActiveClient
	}
	if in.CheckpointFloor >= 0 && in.CheckpointFloor < floor {
		floor, binding = in.CheckpointFloor, BindingCheckpoint
	}
	if floor < limit {
		// Commits old enough may be forced out past the floor: find the
		// first young one above it.
		from := max(floor, horizon)
		young, err := r.FirstCommitAfter(ctx, partition, from, limit, nowMs-policy.AgeForceMs)
		if err != nil {
			return plan, err
		}
		aged := limit
		if young > 0 {
			aged = young - 1
		}
		if aged > floor {
			floor, binding = aged, BindingAgeForce
			if aged == limit {
				binding = BindingMinRetained
			}
		}
	}
	if floor <= horizon {
		plan.Binding = binding
		return plan, nil
	}
	plan.Target, plan.Binding = floor, binding
	return plan, nil
}

// MaintenanceHolder describes the holder of the maintenance lock, as much
// of it as the backend records (a backend that can tell offers a
// MaintenanceHolder(ctx) (MaintenanceHolder, bool, error) method; the
// SQLite store does).
type MaintenanceHolder struct {
	// Holder is the opaque name of the holding store handle.
	Holder string
	// PID and Host name the holding process (0 and "" when unknown).
	PID  int
	Host string
	// Since is when the holder took the lock and Expires when it lapses
	// unless renewed (zero when unknown or never).
	Since, Expires time.Time
}
