package partition

import (
	"context"

	"github.com/synclane/synclane/storage"
)

// PruneJob is one pruning batch of a partition, run by its actor like any
// other job: it holds the partition for one bounded storage transaction
// (storage.Store.PruneBatch), and pushes queued meanwhile are served before
// the next batch, which the caller submits only after this one answered.
//
// The first batch (Through 0) writes the actor's buffered client records
// back, so the plan sees every cursor this process knows, and plans the
// target horizon (storage.PlanRetention) at the partition's clock; later
// batches prune toward the Through they are given.
type PruneJob struct {
	ctx context.Context
	// Policy is the retention policy the first batch plans with.
	Policy storage.RetentionPolicy
	// Through is the planned target horizon; 0 makes this batch plan it.
	Through int64
	// MaxCommits bounds the commits this batch deletes.
	MaxCommits int
	// DryRun plans (and writes client records back) without pruning.
	DryRun bool
	done   chan PruneOutcome
}

// PruneOutcome is a PruneJob's answer.
type PruneOutcome struct {
	// Plan is the plan made by a first batch (zero on later batches).
	Plan storage.RetentionPlan
	// Result is what the batch deleted (zero for a dry run or when the
	// plan allows nothing).
	Result storage.PruneResult
	Err    error
}

// NewPruneJob returns a batch job; set its exported fields before
// submitting it.
func NewPruneJob(ctx context.Context) *PruneJob {
	return &PruneJob{ctx: ctx, done: make(chan PruneOutcome, 1)}
}

// Wait returns the batch's outcome, or ctx's error when ctx ends first.
func (j *PruneJob) Wait(ctx context.Context) PruneOutcome {
	select {
	case o := <-j.done:
		return o
	case <-ctx.Done():
		return PruneOutcome{Err: ctx.Err()}
	}
}

// Batchable is false: a batch is its own transaction.
func (*PruneJob) Batchable() bool { return false }

// Fail answers the batch with err.
func (j *PruneJob) Fail(err error) { j.answer(PruneOutcome{Err: err}) }

func (*PruneJob) push() *SyncJob { return nil }

func (j *PruneJob) answer(o PruneOutcome) {
	select {
	case j.done <- o:
	default:
	}
}

func (j *PruneJob) run(ctx context.Context, p *Partition) {
	if err := j.ctx.Err(); err != nil {
		j.answer(PruneOutcome{Err: err})
		return
	}
	j.answer(p.prune(ctx, j))
}

// prune plans (first batch) and runs one batch, then drops the pruned
// range from the log tail.
func (p *Partition) prune(ctx context.Context, j *PruneJob) PruneOutcome {
	var out PruneOutcome
	through := j.Through
	if through == 0 {
		p.flushClients(ctx)
		plan, err := storage.PlanRetention(ctx, p.cfg.Store, p.name, j.Policy, p.cfg.Now().UnixMilli())
		if err != nil {
			return PruneOutcome{Err: err}
		}
		out.Plan, through = plan, plan.Target
		out.Result.HorizonSeq = plan.Partition.HorizonSeq
		if j.DryRun || !plan.Prunable() {
			return out
		}
	}
	res, err := p.cfg.Store.PruneBatch(ctx, p.name, through, j.MaxCommits)
	if err != nil {
		out.Err = err
		return out
	}
	out.Result = res
	p.tail.dropThrough(res.HorizonSeq)
	return out
}
