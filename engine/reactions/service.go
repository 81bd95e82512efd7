package reactions

import (
	"context"

	"go.uber.org/zap"

	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/storage"
)

// Service is the engine's reaction feature: the delivery worker (none
// without handlers), the queue's listing and counters, and the
// dead-letter actions. It is safe for concurrent use.
type Service struct {
	w *worker // nil without handlers
}

// New checks opts (also without handlers) and builds the service over the
// storage Reactions role q (needed only with handlers; engine.New checks
// it), logging to log. Start runs the worker.
func New(q storage.Reactions, opts Options, log *zap.Logger) (*Service, error) {
	if err := opts.withDefaults(); err != nil {
		return nil, err
	}
	if len(opts.Handlers) == 0 {
		return &Service{}, nil
	}
	return &Service{w: &worker{cfg: opts, queue: q, log: log, wake: make(chan struct{}, 1)}}, nil
}

// Configure lets the hooks of pc schedule reactions for the registered
// handlers (with the default attempts) and has this process's commits
// wake the worker at once (others' are found by polling). Without
// handlers it does nothing: hooks cannot schedule reactions.
func (s *Service) Configure(pc *partition.Config) {
	w := s.w
	if w == nil {
		return
	}
	pc.Hooks.KnownReaction = func(name string) bool { return w.cfg.Handlers[name] != nil }
	pc.Hooks.DefaultMaxAttempts = w.cfg.DefaultMaxAttempts
	w.configureTrace(pc)
	onCommit := pc.OnCommit
	pc.OnCommit = func(part string, maxSeq int64) {
		if onCommit != nil {
			onCommit(part, maxSeq)
		}
		w.poke()
	}
}

// Start runs the worker (if any) until Close.
func (s *Service) Start() {
	if s.w != nil {
		s.w.start()
	}
}

// Close stops claiming, cancels running handlers and waits for the
// worker to end; their reactions are retried after the lease.
func (s *Service) Close() {
	if s.w != nil && s.w.stop != nil {
		s.w.stop()
		<-s.w.done
	}
}

// List lists stored reactions (pending, including those being
// delivered, and dead-lettered) by ascending ID; see
// storage.ReactionFilter for the filter and page size (at most 1000).
func (s *Service) List(ctx context.Context, f storage.ReactionFilter) ([]Stored, error) {
	if s.w == nil {
		return nil, ErrNoReactions
	}
	return s.w.queue.ListReactions(ctx, f)
}

// Stats returns this process's reaction counters and the queue's
// sizes.
func (s *Service) Stats(ctx context.Context) (Stats, error) {
	w := s.w
	if w == nil {
		return Stats{}, ErrNoReactions
	}
	st := Stats{Delivered: w.delivered.Load(), Retried: w.retried.Load(), DeadLettered: w.deadLettered.Load()}
	c, err := w.queue.CountReactions(ctx)
	st.Pending, st.Dead = c.Pending, c.Dead
	return st, err
}
