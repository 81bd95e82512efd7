package actors

import (
	"context"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"
)

// Evict stops partition's actor, if it has one, as passivation does: the
// route is removed and the actor gets a PoisonPill behind every job
// already routed to it, so those jobs are still served (or failed) and
// the Worker's Stop runs. A later Submit starts a new actor. It reports
// whether there was an actor.
func (r *Runtime[J]) Evict(partition string) bool {
	s := r.shard(partition)
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.children[partition]
	if !ok {
		return false
	}
	delete(s.children, partition)
	r.evicted(partition, c)
	return true
}

// EvictIf evicts (as Evict) every live actor whose partition leave
// selects, and returns how many it evicted. leave runs under a
// routing-map shard lock: it must not block or call the Runtime.
func (r *Runtime[J]) EvictIf(leave func(partition string) bool) int {
	n := 0
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		for p, c := range s.children {
			if leave(p) {
				delete(s.children, p)
				r.evicted(p, c)
				n++
			}
		}
		s.mu.Unlock()
	}
	return n
}

// evicted poisons an actor whose route was just removed (shard lock held).
func (r *Runtime[J]) evicted(partition string, c *child) {
	r.stats.evicted.Add(1)
	r.opts.lifecycle(partition, Evicted)
	r.system.Root.Poison(c.pid)
	r.opts.Logger.Debug("partition actor evicted", zap.String("partition", partition))
}

// EvictAll evicts every live actor (as Evict) and waits until each has
// served the jobs routed to it and run its Worker's Stop (each wait ends
// at protoactor's future timeout at the latest), or until ctx ends. It
// returns how many it evicted. Jobs submitted meanwhile start new actors.
func (r *Runtime[J]) EvictAll(ctx context.Context) int {
	var pids []*actor.PID
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		for p, c := range s.children {
			delete(s.children, p)
			r.stats.evicted.Add(1)
			r.opts.lifecycle(p, Evicted)
			pids = append(pids, c.pid)
		}
		s.mu.Unlock()
	}
	futures := make([]*actor.Future, len(pids))
	for i, pid := range pids {
		futures[i] = r.system.Root.PoisonFuture(pid)
	}
	for _, f := range futures {
		if ctx.Err() != nil {
			break // the rest go on stopping in the background
		}
		f.Wait() //nolint:errcheck // a timeout still leaves the actor stopping
	}
	return len(pids)
}

// EvictWait evicts partition's actor (as Evict) and waits until it has
// served the jobs routed to it and run its Worker's Stop, or ctx ends. It
// reports whether there was an actor.
func (r *Runtime[J]) EvictWait(ctx context.Context, partition string) bool {
	s := r.shard(partition)
	s.mu.Lock()
	c, ok := s.children[partition]
	if ok {
		delete(s.children, partition)
		r.stats.evicted.Add(1)
		r.opts.lifecycle(partition, Evicted)
	}
	s.mu.Unlock()
	if !ok {
		return false
	}
	f := r.system.Root.PoisonFuture(c.pid)
	done := make(chan struct{})
	go func() { // ends at the future's own timeout at the latest
		_ = f.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return true
}
