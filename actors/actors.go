// Package actors runs synclane's partition actors on protoactor-go; it is
// the only package that imports protoactor.
//
// Each partition is one actor, spawned on first use and passivated when
// idle. Every job for a partition (a push, a pull, a backfill batch) is a
// message to that actor, so jobs of one partition are serialized and run
// on the actor's goroutine; different partitions run in parallel.
//
// The actor owns a Worker (the partition's state and behaviour, package
// partition). Batchable jobs that queue up while the actor is busy are
// handed to the Worker together, which lets it apply them in one storage
// transaction (group commit). Replies travel on channels carried inside
// jobs, never through protoactor futures.
//
// Routing is direct: Submit looks the partition's actor up in a sharded
// map and sends the job to its mailbox from the caller's goroutine (no
// router actor in between). Passivation is owned by the Runtime: a
// periodic sweep removes an idle actor from the map and sends it a
// PoisonPill under the same shard lock that every Submit holds while it
// sends, so the pill queues behind every job already routed to the actor
// and no job is ever dropped on a stopping actor. (protoactor's
// ReceiveTimeout is not used: its timer races with message processing
// under the race detector.)
package actors

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"
)

// Job is one unit of work for a partition. The runtime guarantees that
// every submitted job is either handed to its Worker's Handle (which must
// answer it) or failed with Fail.
type Job interface {
	// Batchable reports whether the job may be grouped with other batchable
	// jobs into one Handle call.
	Batchable() bool
	// Fail answers the job with err; it must not block.
	Fail(err error)
}

// Ordered is implemented by non-batchable jobs that must not overtake the
// batchable jobs queued before them (AfterQueued reports true): the actor
// serves those first.
type Ordered interface {
	AfterQueued() bool
}

// Worker is a partition's state and logic, used only on its actor's
// goroutine.
type Worker[J Job] interface {
	// Start prepares the partition's state; it runs when the actor starts
	// and again after every restart, bounded by JobTimeout. An error is
	// logged and the actor keeps serving. (The partition Worker reads no
	// storage here: its first job loads it, within that job's deadline.)
	Start(ctx context.Context) error
	// Handle processes jobs (one non-batchable job, or one or more batchable
	// jobs in arrival order) and answers every one of them.
	Handle(ctx context.Context, jobs []J)
	// Stop flushes anything the Worker buffers; it runs when the actor stops.
	Stop(ctx context.Context)
}

// Factory creates the Worker of a partition.
type Factory[J Job] func(partition string) Worker[J]

// Options configure a Runtime.
type Options struct {
	// IdleTimeout after which an idle partition actor is passivated
	// (default 2 minutes; negative disables passivation).
	IdleTimeout time.Duration
	// JobTimeout bounds the storage work of one Handle call (default 30s).
	JobTimeout time.Duration
	// MaxBatch caps how many batchable jobs one Handle call receives
	// (default 256; 1 disables group commit).
	MaxBatch int
	// Logger receives lifecycle logs and protoactor's own logs
	// (default: no-op).
	Logger *zap.Logger
	// TickInterval, when positive, makes every live actor whose Worker
	// implements Ticker run Tick that often (a tick never keeps an idle
	// actor from being passivated).
	TickInterval time.Duration

	// OnLifecycle, when set, is told about partition actor restarts (after
	// a panic) and passivations. It runs on the actor's goroutine or under
	// a routing-map shard lock, so it must not block and must not call the
	// Runtime.
	OnLifecycle func(partition string, ev Lifecycle)
}

// Lifecycle is a partition actor lifecycle event reported to
// Options.OnLifecycle.
type Lifecycle int

// Lifecycle events.
const (
	// Restarted: the actor restarts from storage after its Worker panicked.
	Restarted Lifecycle = iota + 1
	// Passivated: the actor was idle for IdleTimeout and is stopping.
	Passivated
	// Evicted: the actor was stopped by Evict or EvictIf (its partition
	// moved to another cluster member).
	Evicted
)

// lifecycle reports ev to the hook, if any.
func (o *Options) lifecycle(partition string, ev Lifecycle) {
	if o.OnLifecycle != nil {
		o.OnLifecycle(partition, ev)
	}
}

// Ticker is implemented by Workers that do periodic work (for example
// writing back buffered state of a partition that has gone quiet).
type Ticker interface {
	Tick(ctx context.Context)
}

func (o *Options) defaults() {
	if o.IdleTimeout == 0 {
		o.IdleTimeout = 2 * time.Minute
	}
	if o.JobTimeout <= 0 {
		o.JobTimeout = 30 * time.Second
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 256
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
}

// PanicError is the error jobs fail with when their Worker panicked.
type PanicError struct{ Value any }

// Error implements error.
func (e *PanicError) Error() string { return fmt.Sprintf("partition worker panicked: %v", e.Value) }

// stoppedError is ErrStopped's type.
type stoppedError struct{}

func (stoppedError) Error() string { return "actors: runtime stopped" }

// ShuttingDown reports true: jobs failed with it may be retried elsewhere
// or later.
func (stoppedError) ShuttingDown() bool { return true }

// ErrStopped is the error jobs fail with when they reach a stopped
// runtime. It has a ShuttingDown() bool method returning true, so callers
// can recognise it without importing this package.
var ErrStopped error = stoppedError{}

// Stats is a snapshot of the runtime's counters.
type Stats struct {
	LiveActors int    `json:"liveActors"`
	Spawned    uint64 `json:"spawned"`
	Passivated uint64 `json:"passivated"`
	// Evicted counts actors stopped by Evict or EvictIf.
	Evicted     uint64 `json:"evicted"`
	Restarts    uint64 `json:"restarts"`
	BatchedJobs uint64 `json:"batchedJobs"`
	Batches     uint64 `json:"batches"`
}

// flush tells a partition actor to serve its pending batch.
type flush struct{}

// tick asks a partition actor to run its Worker's Tick.
type tick struct{}

// partitionActor ----------------------------------------------------------

type partitionActor[J Job] struct {
	partition string
	worker    Worker[J]
	opts      *Options
	pending   []J
	scheduled bool
	stats     *counters
	// stopped runs once the actor has terminated (its registry name is
	// free again).
	stopped func(self *actor.PID)
}

func (a *partitionActor[J]) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.start()
	case *actor.Restarting:
		a.stats.restarts.Add(1)
		a.opts.lifecycle(a.partition, Restarted)
	case J:
		if m.Batchable() && a.opts.MaxBatch > 1 {
			a.pending = append(a.pending, m)
			if !a.scheduled {
				a.scheduled = true
				ctx.Send(ctx.Self(), flush{})
			}
			return
		}
		// A job that must see every push queued before it (a pruning or
		// backfill batch: it says so with AfterQueued) is served after them.
		// Other jobs (pulls) run at once and the queued pushes keep growing
		// their group until the flush, which is what makes group commit
		// pay off under mixed load.
		if o, ok := any(m).(Ordered); ok && o.AfterQueued() {
			for len(a.pending) > 0 {
				a.drainOnce()
			}
		}
		a.run([]J{m})
	case flush:
		a.scheduled = false
		if len(a.pending) > 0 {
			a.drainOnce()
		}
		if len(a.pending) > 0 && !a.scheduled {
			a.scheduled = true
			ctx.Send(ctx.Self(), flush{})
		}
	case *actor.Stopped:
		if a.stopped != nil {
			a.stopped(ctx.Self())
		}
	case tick:
		if t, ok := a.worker.(Ticker); ok {
			a.tick(t)
		}
	case *actor.Stopping:
		// Jobs queued for a flush that will never be delivered are served now.
		for len(a.pending) > 0 {
			a.drainOnce()
		}
		jctx, cancel := context.WithTimeout(context.Background(), a.opts.JobTimeout)
		a.worker.Stop(jctx)
		cancel()
	}
}

func (a *partitionActor[J]) start() {
	jctx, cancel := context.WithTimeout(context.Background(), a.opts.JobTimeout)
	defer cancel()
	if err := a.worker.Start(jctx); err != nil {
		// The worker reloads lazily on its next job; log and keep going.
		a.opts.Logger.Warn("partition worker start failed", zap.String("partition", a.partition), zap.Error(err))
	}
}

// tick runs the worker's Tick; a panic there is logged and re-raised to
// the supervisor like a panic while serving jobs.
func (a *partitionActor[J]) tick(t Ticker) {
	defer func() {
		if r := recover(); r != nil {
			a.opts.Logger.Error("partition worker tick panicked; restarting actor",
				zap.String("partition", a.partition), zap.Any("panic", r), zap.Stack("stack"))
			panic(r)
		}
	}()
	jctx, cancel := context.WithTimeout(context.Background(), a.opts.JobTimeout)
	defer cancel()
	t.Tick(jctx)
}

func (a *partitionActor[J]) drainOnce() {
	n := min(len(a.pending), a.opts.MaxBatch)
	batch := a.pending[:n:n]
	a.pending = a.pending[n:]
	if len(a.pending) == 0 {
		a.pending = nil
	}
	a.stats.batches.Add(1)
	a.stats.batchedJobs.Add(uint64(n))
	a.run(batch)
}

// run hands jobs to the worker; a panic fails every job of the call (and
// every pending job, which the restart would otherwise lose) before it is
// re-raised to the supervisor, which restarts the actor from storage.
func (a *partitionActor[J]) run(jobs []J) {
	defer func() {
		if r := recover(); r != nil {
			perr := &PanicError{Value: r}
			for _, j := range jobs {
				j.Fail(perr)
			}
			for _, j := range a.pending {
				j.Fail(perr)
			}
			a.pending = nil
			a.scheduled = false
			a.opts.Logger.Error("partition worker panicked; restarting actor",
				zap.String("partition", a.partition), zap.Any("panic", r), zap.Stack("stack"))
			panic(r)
		}
	}()
	jctx, cancel := context.WithTimeout(context.Background(), a.opts.JobTimeout)
	defer cancel()
	a.worker.Handle(jctx, jobs)
}
