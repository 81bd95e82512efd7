package partition

import (
	"context"
	"sync/atomic"

	"github.com/synclane/synclane/protocol/syncerr"
)

// completion is a job's answer: a value of type T and an error, set once.
// Every job embeds one, which gives it answer (used while serving it), a
// Fail that answers with an error (what the actor runtime calls for a job
// it cannot serve: a panic, a stopped runtime) and wait (behind the job's
// typed Wait).
//
// The first answer wins; later ones are dropped and never block (the
// actor answers a job on its error path and the runtime may fail it
// again). An answer that arrives after its waiter gave up is kept until
// the job is garbage. The answer lives in the job itself: the only
// allocation is the channel that signals it, made by init.
type completion[T any] struct {
	answered atomic.Bool
	done     chan struct{} // closed once val and err are set
	val      T
	err      error
}

// init prepares c; a job's constructor calls it before the job is
// submitted.
func (c *completion[T]) init() { c.done = make(chan struct{}) }

// answer sets the job's answer unless it has one already.
func (c *completion[T]) answer(v T, err error) {
	if !c.answered.CompareAndSwap(false, true) {
		return
	}
	c.val, c.err = v, err
	close(c.done)
}

// Fail answers the job with err (and the zero value), unless it has an
// answer already; it never blocks.
func (c *completion[T]) Fail(err error) {
	var zero T
	c.answer(zero, err)
}

// wait returns the job's answer, or, when ctx ends first, the zero value
// and an error: ctx's own error when abandoned is "", otherwise a
// retryable sync.internal_error with abandoned as its message that wraps
// ctx's error. The job itself may still be served after that.
func (c *completion[T]) wait(ctx context.Context, abandoned string) (T, error) {
	select {
	case <-c.done:
		return c.val, c.err
	case <-ctx.Done():
		var zero T
		if abandoned == "" {
			return zero, ctx.Err()
		}
		return zero, syncerr.Wrap(syncerr.InternalError, ctx.Err(), "%s", abandoned)
	}
}

// result returns the answer of a job that has been answered already (it
// blocks until there is one).
func (c *completion[T]) result() (T, error) {
	<-c.done
	return c.val, c.err
}
