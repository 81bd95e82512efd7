package partition

import (
	"context"
	"errors"
	"time"

	"github.com/synclane/synclane/storage"
)

// PruneJob is one pruning batch of a partition, run by its actor like any
// other job: it holds the partition for one bounded storage transaction
// (storage.Retention.PruneBatch), and pushes queued meanwhile are served before
// the next batch, which the caller submits only after this one answered.
//
// The first batch (Through 0) writes the actor's buffered client records
// back, so the plan sees every cursor this process knows, and plans the
// target horizon (storage.PlanRetention) at the partition's clock,
// capturing the partition's log epoch in the same read as the retention
// inputs (SPEC §4.6); later batches prune toward the Through they are
// given, at the LogEpoch they are given. Every batch verifies that epoch in
// its own transaction (storage.PruneRequest): a batch after a rotation or
// restore — on this actor (a RestoreJob between two batches) or in another
// process — fails with storage.ErrLogEpochChanged and deletes nothing.
type PruneJob struct {
	ctx context.Context
	// Policy is the retention policy the first batch plans with.
	Policy storage.RetentionPolicy
	// Through is the planned target horizon; 0 makes this batch plan it.
	Through int64
	// LogEpoch is the epoch the plan was made at (PruneOutcome.Plan's
	// Partition.LogEpoch); a first batch takes its own plan's.
	LogEpoch string
	// MaxCommits bounds the commits this batch deletes.
	MaxCommits int
	// DryRun plans (and writes client records back) without pruning; its
	// Result counts what the run would delete (storage
	// Retention.CountPrune) and its HorizonSeq is the target.
	DryRun bool
	completion[PruneOutcome]
}

// PruneOutcome is a PruneJob's answer.
type PruneOutcome struct {
	// Plan is the plan made by a first batch (zero on later batches).
	Plan storage.RetentionPlan
	// Result is what the batch deleted (for a dry run: what the whole run
	// would delete; zero when the plan allows nothing).
	Result storage.PruneResult
	// Took is how long the batch's storage transaction ran.
	Took time.Duration
	Err  error
}

// NewPruneJob returns a batch job; set its exported fields before
// submitting it.
func NewPruneJob(ctx context.Context) *PruneJob {
	j := &PruneJob{ctx: ctx}
	j.init()
	return j
}

// Wait returns the batch's outcome, or ctx's error when ctx ends first.
func (j *PruneJob) Wait(ctx context.Context) PruneOutcome {
	o, err := j.wait(ctx, "")
	if err != nil { // failed (Fail) or abandoned
		return PruneOutcome{Err: err}
	}
	return o
}

// Batchable is false: a batch is its own transaction.
func (*PruneJob) Batchable() bool { return false }

// AfterQueued reports true: a pruning batch runs after the pushes queued
// before it (their commits are in the log it plans from).
func (*PruneJob) AfterQueued() bool { return true }

func (*PruneJob) push() *SyncJob { return nil }

func (j *PruneJob) run(ctx context.Context, p *Partition) {
	if err := j.ctx.Err(); err != nil {
		j.Fail(err)
		return
	}
	j.answer(p.prune(ctx, j), nil)
}

func (j *PruneJob) requestContext() context.Context { return j.ctx }

// prune plans (first batch) and runs one batch, then drops the pruned
// range from the log tail.
func (p *Partition) prune(ctx context.Context, j *PruneJob) PruneOutcome {
	if p.cfg.Backend.Retention == nil {
		return PruneOutcome{Err: errNoRetention}
	}
	var out PruneOutcome
	through, epoch := j.Through, j.LogEpoch
	if through == 0 {
		p.flushClients(ctx)
		plan, err := storage.PlanRetention(ctx, p.cfg.Backend.Retention, p.name, j.Policy, p.cfg.Now().UnixMilli())
		if err != nil {
			return PruneOutcome{Err: err}
		}
		out.Plan, through, epoch = plan, plan.Target, plan.Partition.LogEpoch
		out.Result.PreviousHorizonSeq, out.Result.HorizonSeq = plan.Partition.HorizonSeq, plan.Partition.HorizonSeq
		if !plan.Prunable() {
			return out
		}
		if j.DryRun {
			// Count exactly what the run would delete through the target.
			res, err := p.cfg.Backend.Retention.CountPrune(ctx, p.name, through)
			if err != nil {
				out.Err = err
				return out
			}
			out.Result = res
			return out
		}
	}
	start := time.Now()
	res, err := p.cfg.Backend.Retention.PruneBatch(ctx, p.name, storage.PruneRequest{LogEpoch: epoch, ThroughSeq: through, MaxCommits: j.MaxCommits})
	out.Took = time.Since(start)
	if err != nil {
		out.Err = err
		return out
	}
	out.Result = res
	p.tail.dropThrough(res.HorizonSeq)
	return out
}

// RestoreJob brings its partition back to the storage snapshot captured
// earlier (storage.Snapshots) and rotates its log epoch, on the actor: the
// client records and log tail the actor holds belong to the log being
// replaced, so they are dropped first and never written back.
type RestoreJob struct {
	ctx context.Context
	// the answer is the new log epoch
	completion[string]
}

// NewRestoreJob returns a restore job for the partition it is submitted to.
func NewRestoreJob(ctx context.Context) *RestoreJob {
	j := &RestoreJob{ctx: ctx}
	j.init()
	return j
}

// Wait returns the new log epoch, or the failure (ctx's error when ctx
// ends first).
func (j *RestoreJob) Wait(ctx context.Context) (string, error) { return j.wait(ctx, "") }

// Batchable is false: the restore is its own transaction.
func (*RestoreJob) Batchable() bool { return false }

func (*RestoreJob) push() *SyncJob { return nil }

func (j *RestoreJob) run(ctx context.Context, p *Partition) {
	if err := j.ctx.Err(); err != nil {
		j.Fail(err)
		return
	}
	st := p.cfg.Backend.Snapshots
	if st == nil {
		j.Fail(errNoSnapshots)
		return
	}
	p.clients.reset(p.cfg.Now())
	p.tail.reset()
	ep, err := st.RestorePartition(ctx, p.name, p.cfg.Now().UnixMilli())
	if err == nil {
		p.adoptEpoch(ep)
	}
	j.answer(ep, err)
}

func (j *RestoreJob) requestContext() context.Context { return j.ctx }

// errNoSnapshots reports a backend without the Snapshots role.
var errNoSnapshots = errors.New("the storage backend has no Snapshots role: it keeps no partition snapshots")

// errNoRetention reports a backend without the Retention role.
var errNoRetention = errors.New("the storage backend has no Retention role: it cannot prune")
