// Package reactions delivers durable reactions (SPEC §6.9). A row
// validator or the commit validator schedules them with RowWrite.React /
// CommitView.React; they are stored in the push transaction with their
// commit, and the Service's worker delivers each at least once to the
// handler registered under its name:
//
//   - the worker claims due reactions in batches for Lease (a visibility
//     timeout, stored, so any process sharing the store honours it); the
//     handlers' context ends at 90% of the lease, so a handler that
//     honours its context is never running when another claim (in this
//     process or another on the same PostgreSQL database) takes the
//     reaction; a batch's deliveries are recorded in one write;
//   - a handler returning nil deletes the reaction; an error or a panic is
//     a failed attempt: the reaction is retried after
//     min(BaseBackoff·2^(attempt-1), MaxBackoff), and after MaxAttempts
//     failed attempts it is dead-lettered (kept, state dead, with its last
//     error, visible through Service.List; never retried);
//   - a process that dies mid-delivery loses nothing: the reaction becomes
//     claimable again when its lease ends, and is delivered again (at
//     least once, so handlers must be idempotent — the reaction ID is
//     stable across attempts and makes a good idempotency key);
//   - Close stops claiming and cancels running handlers; their reactions
//     are retried after the lease, by this store's next worker.
package reactions

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/storage"
)

// Handler delivers one reaction. It must honour ctx (which ends
// before the claim's lease does) and be idempotent.
type Handler func(ctx context.Context, r Stored) error

// Stored is a stored reaction as the queue holds it.
type Stored = storage.Reaction

// Options configure durable reactions (engine.Config.Reactions). With no
// Handlers, hooks cannot schedule reactions and no worker runs.
type Options struct {
	// Handlers maps reaction names to their handlers.
	Handlers map[string]Handler
	// DefaultMaxAttempts is the attempts of a reaction scheduled without
	// MaxAttempts: 1-100 (0: 10).
	DefaultMaxAttempts int
	// Lease is how long a claimed reaction is hidden from other claims
	// (default 30s, at least 1s); handlers get 90% of it.
	Lease time.Duration
	// PollInterval is how often the worker looks for due reactions when
	// idle (default 1s); this process's own commits wake it at once.
	PollInterval time.Duration
	// BaseBackoff and MaxBackoff bound the retry delay (defaults 1s, 5m).
	BaseBackoff, MaxBackoff time.Duration
	// Concurrency is how many handlers run at once (default 4, at most 64).
	Concurrency int
	// BatchSize is how many reactions one claim takes (default 32, at most
	// 1000). Handlers of a batch share its lease: keep Lease comfortably
	// above BatchSize/Concurrency handler run times.
	BatchSize int
	// ClaimInterval is the pause after a wake-up before claiming, so a
	// burst of commits is claimed together (default 50ms).
	ClaimInterval time.Duration
	// Now is the queue's clock (default time.Now; the queue always runs on
	// wall time, not on the engine's Now, so leases stay meaningful across
	// processes).
	Now func() time.Time
}

func (c *Options) withDefaults() error {
	switch {
	case c.DefaultMaxAttempts == 0:
		c.DefaultMaxAttempts = partition.DefaultReactionMaxAttempts
	case c.DefaultMaxAttempts < 1 || c.DefaultMaxAttempts > storage.MaxReactionAttempts:
		return fmt.Errorf("engine: Reactions.DefaultMaxAttempts %d outside 1-100", c.DefaultMaxAttempts)
	}
	if c.Lease <= 0 {
		c.Lease = 30 * time.Second
	}
	c.Lease = max(c.Lease, time.Second)
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.BaseBackoff <= 0 {
		c.BaseBackoff = time.Second
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 5 * time.Minute
	}
	c.MaxBackoff = max(c.MaxBackoff, c.BaseBackoff)
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	c.Concurrency = min(c.Concurrency, 64)
	if c.BatchSize <= 0 {
		c.BatchSize = 32
	}
	c.BatchSize = min(c.BatchSize, 1000)
	if c.ClaimInterval <= 0 {
		c.ClaimInterval = 50 * time.Millisecond
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	for name, h := range c.Handlers {
		if h == nil || name == "" || len(name) > storage.MaxReactionNameBytes || !storage.Storable(name) {
			return fmt.Errorf("engine: Reactions.Handlers[%q]: names are 1-128 storable bytes and handlers non-nil", name)
		}
	}
	return nil
}

// worker delivers reactions; owned by the Service (started by Start,
// stopped by Close).
type worker struct {
	cfg   Options
	queue storage.Reactions
	log   *zap.Logger
	wake  chan struct{}

	delivered, retried, deadLettered, failedOps atomic.Uint64

	// tracer and origins trace deliveries (trace.go); nil: off.
	tracer  trace.Tracer
	origins *origins

	stop context.CancelFunc
	done chan struct{}
}

// Stats are the reaction counters of this process and the queue's
// current sizes (read from the store, so shared by every process on it).
type Stats struct {
	// Delivered, Retried and DeadLettered count this process's attempts:
	// successful, failed and rescheduled, failed for the last time.
	Delivered    uint64 `json:"delivered"`
	Retried      uint64 `json:"retried"`
	DeadLettered uint64 `json:"deadLettered"`
	// Pending and Dead are the stored reactions by state.
	Pending int64 `json:"pending"`
	Dead    int64 `json:"dead"`
}

// start runs the worker until stop.
func (w *worker) start() {
	ctx, cancel := context.WithCancel(context.Background())
	w.stop, w.done = cancel, make(chan struct{})
	go func() {
		defer close(w.done)
		w.run(ctx)
	}()
}

// poke wakes the worker (after a local commit); it never blocks.
func (w *worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *worker) run(ctx context.Context) {
	t := time.NewTicker(w.cfg.PollInterval)
	defer t.Stop()
	for {
		n := w.round(ctx)
		if ctx.Err() != nil {
			return
		}
		if n == w.cfg.BatchSize {
			continue // more may be due
		}
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-t.C:
		}
		// Let a burst of commits gather, so one claim takes them all.
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.cfg.ClaimInterval):
		}
	}
}

// round claims up to BatchSize due reactions, runs their handlers
// (Concurrency at a time) and records the outcomes: the delivered ones in
// one write. It returns how many it claimed.
func (w *worker) round(ctx context.Context) int {
	now, started := w.cfg.Now(), time.Now()
	rs, err := w.queue.ClaimReactions(ctx, now.UnixMilli(), w.cfg.Lease.Milliseconds(), w.cfg.BatchSize)
	if err != nil {
		if ctx.Err() == nil {
			w.failedOps.Add(1)
			w.log.Warn("claiming reactions failed", zap.Error(err))
		}
		return 0
	}
	if len(rs) == 0 {
		return 0
	}
	if waited := time.Since(started); waited > w.cfg.Lease*4/10 {
		// The claim waited (for SQLite's writer, held by a push with slow
		// hooks) through much of its lease: the handlers would start with
		// little or none of it left. Give the claims back uncounted; the
		// next round claims them with a fresh lease.
		claims := make([]storage.ReactionClaim, len(rs))
		for i, r := range rs {
			claims[i] = storage.ReactionClaim{ID: r.ID, Attempt: r.Attempts}
		}
		if _, err := w.queue.ReleaseReactions(context.WithoutCancel(ctx), claims, w.cfg.Now().UnixMilli()); err != nil {
			w.failedOps.Add(1)
			w.log.Warn("giving back late reaction claims failed; they retry after their lease", zap.Error(err))
		}
		w.log.Info("reaction claim came late; claims given back", zap.Duration("waited", waited), zap.Int("reactions", len(rs)))
		return 0 // the next round after the claim interval
	}
	// Every handler of the batch ends before the claim's lease does.
	hctx, cancel := context.WithDeadline(ctx, now.Add(w.cfg.Lease*9/10))
	defer cancel()
	errs := make([]error, len(rs))
	sem := make(chan struct{}, w.cfg.Concurrency)
	var wg sync.WaitGroup
	for i := range rs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = w.deliver(hctx, rs[i])
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return len(rs) // closing: the leases run out and another worker retries
	}
	w.record(ctx, rs, errs)
	return len(rs)
}

// record stores the outcomes of a batch.
func (w *worker) record(ctx context.Context, rs []storage.Reaction, errs []error) {
	// Outcomes are recorded even if ctx ends meanwhile (they are short).
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var done []storage.ReactionClaim
	for i, r := range rs {
		if errs[i] == nil {
			done = append(done, storage.ReactionClaim{ID: r.ID, Attempt: r.Attempts})
		}
	}
	if len(done) > 0 {
		n, err := w.queue.CompleteReactions(octx, done)
		if err != nil {
			w.failedOps.Add(1)
			w.log.Warn("recording delivered reactions failed; they will be delivered again", zap.Error(err), zap.Int("reactions", len(done)))
		} else {
			w.delivered.Add(uint64(len(done)))
			if n < len(done) {
				w.log.Warn("some deliveries outlived their lease; those reactions may be delivered again", zap.Int("late", len(done)-n))
			}
		}
	}
	now := w.cfg.Now()
	for i, r := range rs {
		if errs[i] != nil {
			w.fail(octx, r, errs[i], now)
		}
	}
}

// fail records one failed attempt: a retry after backoff, or the dead letter.
func (w *worker) fail(ctx context.Context, r storage.Reaction, attemptErr error, now time.Time) {
	log := w.log.With(zap.Int64("reaction_id", r.ID), zap.String("reaction", r.Name), zap.String("partition", r.Partition), zap.Int("attempt", r.Attempts))
	dead := r.Attempts >= r.MaxAttempts
	retryAt := now.Add(w.backoff(r.Attempts)).UnixMilli()
	ok, err := w.queue.FailReaction(ctx, r.ID, r.Attempts, attemptErr.Error(), retryAt, dead, now.UnixMilli())
	switch {
	case err != nil:
		w.failedOps.Add(1)
		log.Warn("recording a failed reaction attempt failed; it is retried after its lease", zap.Error(err), zap.NamedError("attempt_error", attemptErr))
	case !ok:
		log.Warn("a reaction attempt outlived its lease; its outcome was dropped", zap.NamedError("attempt_error", attemptErr))
	case dead:
		w.deadLettered.Add(1)
		log.Error("reaction dead-lettered after its last attempt", zap.Int("max_attempts", r.MaxAttempts), zap.NamedError("attempt_error", attemptErr))
	default:
		w.retried.Add(1)
		log.Info("reaction attempt failed; retrying later", zap.Time("retry_at", time.UnixMilli(retryAt)), zap.NamedError("attempt_error", attemptErr))
	}
}

// call runs the handler, turning a panic or a missing handler into an
// error.
func (w *worker) call(ctx context.Context, r storage.Reaction) (err error) {
	h := w.cfg.Handlers[r.Name]
	if h == nil {
		return fmt.Errorf("no handler is registered for reaction %q", r.Name)
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("reaction handler panicked: %v", p)
		}
	}()
	return h(ctx, r)
}

// backoff is the delay after failed attempt n (1-based).
func (w *worker) backoff(n int) time.Duration {
	d := w.cfg.BaseBackoff
	for i := 1; i < n && d < w.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, w.cfg.MaxBackoff)
}

// ErrNoReactions is returned by List, Stats and the dead-letter actions
// when the engine has no reaction handlers.
var ErrNoReactions = errors.New("engine: reactions are not configured")
