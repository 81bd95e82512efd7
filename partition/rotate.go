package partition

import (
	"context"
)

// RotateJob gives its partition a new log epoch on the actor (an operator
// action): pushes queued before it are applied first (AfterQueued), then
// the client records and log tail the actor holds are dropped (they belong
// to the old epoch and are never written back) and the store rotates the
// epoch under the partition's write lock, deleting the stored client
// records. Every client then gets resetRequired on its next pull.
type RotateJob struct {
	ctx context.Context
	// the answer is the new log epoch
	completion[string]
}

// NewRotateJob returns a rotate job for the partition it is submitted to.
func NewRotateJob(ctx context.Context) *RotateJob {
	j := &RotateJob{ctx: ctx}
	j.init()
	return j
}

// Wait returns the new log epoch, or the failure (ctx's error when ctx
// ends first).
func (j *RotateJob) Wait(ctx context.Context) (string, error) { return j.wait(ctx, "") }

// Batchable is false: the rotation is its own transaction.
func (*RotateJob) Batchable() bool { return false }

// AfterQueued is true: pushes queued before the rotation land in the old
// epoch first.
func (*RotateJob) AfterQueued() bool { return true }

func (*RotateJob) push() *SyncJob { return nil }

func (j *RotateJob) run(ctx context.Context, p *Partition) {
	if err := j.ctx.Err(); err != nil {
		j.Fail(err)
		return
	}
	p.clients.reset(p.cfg.Now())
	p.tail.reset()
	ep, err := p.cfg.Backend.Log.RotateLogEpoch(ctx, p.name, p.cfg.Now().UnixMilli())
	if err == nil {
		p.adoptEpoch(ep)
	}
	j.answer(ep, err)
}

func (j *RotateJob) requestContext() context.Context { return j.ctx }
