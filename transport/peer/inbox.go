package peer

import (
	"context"
	"sync"
)

// inbox is the relay loop's queue of tasks, run one at a time in push
// order. push never blocks (the hub's and the engine's callbacks push);
// pushWait, for the links' readers, waits while the queue holds max
// tasks, so that a member sending faster than the loop runs is slowed
// down by its own link (its send queue overflows: see link.send) instead
// of growing this one.
type inbox struct {
	max int

	mu      sync.Mutex
	tasks   []func()
	closed  bool
	signal  chan struct{} // cap 1: tasks were pushed
	drained chan struct{} // closed (and replaced) when the loop takes the tasks
}

func newInbox(max int) *inbox {
	return &inbox{max: max, signal: make(chan struct{}, 1), drained: make(chan struct{})}
}

// push queues t; a no-op once the inbox is closed.
func (b *inbox) push(t func()) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.tasks = append(b.tasks, t)
	b.mu.Unlock()
	select {
	case b.signal <- struct{}{}:
	default:
	}
}

// pushWait queues t once the queue holds fewer than max tasks; false when
// ctx ended first or the inbox is closed.
func (b *inbox) pushWait(ctx context.Context, t func()) bool {
	for {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return false
		}
		if len(b.tasks) < b.max {
			b.tasks = append(b.tasks, t)
			b.mu.Unlock()
			select {
			case b.signal <- struct{}{}:
			default:
			}
			return true
		}
		drained := b.drained
		b.mu.Unlock()
		select {
		case <-drained:
		case <-ctx.Done():
			return false
		}
	}
}

// take waits for tasks and returns them (nil when ctx ended).
func (b *inbox) take(ctx context.Context) []func() {
	for {
		b.mu.Lock()
		if len(b.tasks) > 0 {
			t := b.tasks
			b.tasks = nil
			close(b.drained)
			b.drained = make(chan struct{})
			b.mu.Unlock()
			return t
		}
		b.mu.Unlock()
		select {
		case <-b.signal:
		case <-ctx.Done():
			return nil
		}
	}
}

// close drops the queued tasks and refuses new ones.
func (b *inbox) close() {
	b.mu.Lock()
	b.closed = true
	b.tasks = nil
	b.mu.Unlock()
}
