// Package retention prunes the log (SPEC §4.6) and runs maintenance:
// Prune plans a partition's horizon on its actor and deletes toward it in
// paced batches, MaintenancePass prunes every partition under the policy
// with the store's maintenance lock and sweeps expired segments and
// orphan blobs, and the maintenance loop runs a pass every
// Options.Interval until Close. It also serves partition snapshots
// (Capture, Restore: backup and restore of one partition). The engine
// builds one Service; operators reach it through Engine.Retention.
package retention

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/storage"
)

// Actors runs a job on a partition's actor (the engine's actor runtime).
type Actors interface {
	Submit(partition string, job partition.Job)
}

// Sweeper sweeps what a maintenance pass expires besides the log: the
// segment store's expired segments, orphan blobs. It returns how many it
// removed.
type Sweeper interface {
	Sweep(ctx context.Context) (int, error)
}

// Deps are what the engine gives the service.
type Deps struct {
	// Actors runs prune and restore jobs on the partition's actor.
	Actors Actors
	// Segments and Blobs are swept by every maintenance pass that is not
	// a dry run (required).
	Segments, Blobs Sweeper
	// Owns, when set (cluster mode), says which partitions this member
	// owns: a maintenance pass prunes only those, and does so without the
	// store's maintenance lock (each member prunes its own partitions,
	// through their actors, whose writes are fenced), which it still takes
	// for the store-wide sweeps (segments, blobs). nil: every partition,
	// all under the lock.
	Owns func(partition string) bool
	// Now is the engine's clock (the stats' LastPassMs; pruning reads its
	// ages on the actor, from the same clock) and Logger the log (both
	// required).
	Now    func() time.Time
	Logger *zap.Logger
}

// Service prunes and maintains. It is safe for concurrent use.
type Service struct {
	rt      storage.Retention // nil: Prune and MaintenancePass answer ErrNoRetention
	snaps   storage.Snapshots // nil: Capture answers ErrNoSnapshots
	opts    Options
	deps    Deps
	metrics retentionMetrics

	// stopMaint and maintDone own the maintenance loop (nil without one).
	stopMaint context.CancelFunc
	maintDone chan struct{}
}

// New builds the service over the storage Retention role rt (needed by
// the maintenance loop; engine.New checks it) and Snapshots role snaps,
// either of which may be nil. Start runs the loop.
func New(rt storage.Retention, snaps storage.Snapshots, opts Options, deps Deps) *Service {
	return &Service{rt: rt, snaps: snaps, opts: opts, deps: deps}
}

// Start runs the maintenance loop when Options.Interval > 0, until Close.
func (s *Service) Start() {
	if s.opts.Interval <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopMaint, s.maintDone = cancel, make(chan struct{})
	go s.runMaintenance(ctx, s.opts.Interval)
}

// Close stops the maintenance loop and waits for it: a pass in progress
// ends after its current batch.
func (s *Service) Close() {
	if s.stopMaint != nil {
		s.stopMaint()
		<-s.maintDone
	}
}

// Stats returns this process's pruning counters.
func (s *Service) Stats() Stats { return s.metrics.snapshot() }
