package partition

import (
	"context"
	"errors"
	"time"

	"github.com/synclane/synclane/internal/tracing"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
)

// Job is one unit of work for a partition's actor. Each kind serves itself
// on the partition's state; pushes may instead be served together with
// other pushes in one storage transaction. The actor guarantees that every
// job is either served (and answered) by Handle or failed with Fail.
type Job interface {
	// Batchable reports whether the job may join a group commit.
	Batchable() bool
	// Fail answers the job with err without serving it; it never blocks.
	Fail(err error)
	// run serves the job alone.
	run(ctx context.Context, p *Partition)
	// push returns the job as a push that may be grouped, or nil.
	push() *SyncJob
	// requestContext is the context of the request the job serves: its
	// deadline bounds the job's storage work (Partition.Handle).
	requestContext() context.Context
}

// SyncJob is one Sync request travelling to its partition's actor: a
// decoded request of an authenticated actor with its resolved scopes.
type SyncJob struct {
	ctx      context.Context
	actorID  string
	req      *ssp2.Request
	allowed  Allowed
	resolved bool
	// outage: the resolver signalled an outage (lease.go).
	outage bool
	// bound is the actor j's clientId is bound to ("" when unbound), as
	// bind read it.
	bound string
	// leaseChecked reports that leaseAuthorize ran for j; leaseErr is
	// its answer (lease.go).
	leaseChecked bool
	leaseErr     error
	// queued is when the job was made (Unix ns), set only when ctx
	// carries a recording span (trace.go: the job's steps are traced
	// then); 0 otherwise.
	queued int64
	completion[*Reply]
}

// NewSyncJob returns the job for req from actorID. allowed holds the scope
// grants the resolver returned; resolved is false when the resolver failed
// or was not asked (every subscription is then revoked and every write
// forbidden).
func NewSyncJob(ctx context.Context, actorID string, req *ssp2.Request, allowed Allowed, resolved bool) *SyncJob {
	j := &SyncJob{ctx: ctx, actorID: actorID, req: req, allowed: allowed, resolved: resolved}
	if tracing.Recording(ctx) {
		j.queued = time.Now().UnixNano()
	}
	j.init()
	return j
}

// Wait returns the job's reply or its request-level error, or an
// internal error when ctx ends first (the actor still serves the job).
func (j *SyncJob) Wait(ctx context.Context) (*Reply, error) { return j.wait(ctx, abandonedUnanswered) }

// abandonedUnanswered is the message of the error a request's Wait returns
// when its caller gives up first.
const abandonedUnanswered = "request abandoned before the partition answered"

// Batchable reports whether the request pushes commits, or is one of a
// fresh client's first requests: one acquiring the log epoch (wire v2+,
// no logEpoch), or a pull whose every subscription is at cursor -1
// without a bootstrap token. Pushes are served as one group commit;
// first requests that arrive together have their clients bound in one
// durable write and are served with one partition read and one gate
// verify (Partition.pullGroup). Other pulls run as they arrive.
func (j *SyncJob) Batchable() bool { return len(j.req.Commits) > 0 || j.bootstrapStart() }

// bootstrapStart reports whether j is a pull starting a bootstrap, or a
// request acquiring the log epoch (a fresh client's request before its
// first pull), see Batchable.
func (j *SyncJob) bootstrapStart() bool {
	r := j.req
	if len(r.Commits) > 0 {
		return false
	}
	if r.WireVersion >= ssp2.WireV2 && r.Header.LogEpoch == nil {
		return true
	}
	if r.Pull == nil || len(r.Subscriptions) == 0 {
		return false
	}
	for _, s := range r.Subscriptions {
		if s.Cursor != -1 || s.BootstrapState != nil {
			return false
		}
	}
	return true
}

// Fail answers the job with err. A coded error passes through; the
// runtime's own failures (shutting down: an error with a ShuttingDown()
// bool method reporting true; a panic while serving; anything else) become
// retryable sync.internal_error, whose message never carries the cause.
func (j *SyncJob) Fail(err error) { j.answer(nil, jobFailure(err, "request")) }

// jobFailure maps the error a job is failed with (see SyncJob.Fail) to
// what its caller gets; what names the job in the message.
func jobFailure(err error, what string) error {
	var coded *syncerr.Error
	var sd interface{ ShuttingDown() bool }
	switch {
	case errors.As(err, &coded):
		return err
	case errors.As(err, &sd) && sd.ShuttingDown():
		return syncerr.Wrap(syncerr.InternalError, err, "the server is shutting down; retry")
	default:
		return syncerr.Wrap(syncerr.InternalError, err, "the partition failed while serving this %s; retry", what)
	}
}

func (j *SyncJob) push() *SyncJob {
	if len(j.req.Commits) > 0 {
		return j
	}
	return nil
}

func (j *SyncJob) requestContext() context.Context { return j.ctx }

func (j *SyncJob) run(ctx context.Context, p *Partition) {
	if len(j.req.Commits) > 0 {
		p.push(ctx, []*SyncJob{j})
		return
	}
	p.pull(ctx, j)
}

// abandoned answers the job when its caller has gone; true when it did.
func (j *SyncJob) abandoned() bool {
	if err := j.ctx.Err(); err != nil {
		j.answer(nil, syncerr.Wrap(syncerr.InternalError, err, "request abandoned"))
		return true
	}
	return false
}
