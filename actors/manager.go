package actors

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"
)

type managerCounters struct {
	spawned, passivated, restarts, batches, batchedJobs atomic.Uint64
}

// Manager routes jobs to partition actors, spawning them on first use and
// passivating them when idle. It is safe for concurrent use.
type Manager struct {
	system  *actor.ActorSystem
	pid     *actor.PID
	opts    Options
	stats   *managerCounters
	mu      sync.RWMutex
	stopped bool
	quit    chan struct{}
	swept   sync.WaitGroup
}

type child struct {
	pid      *actor.PID
	lastSeen time.Time
}

type managerActor struct {
	factory  Factory
	opts     *Options
	stats    *managerCounters
	children map[string]*child
	peak     int // high-water len(children) since the map was last rebuilt
	props    func(partition string) *actor.Props
}

// NewManager starts a manager actor in system. Workers are created by
// factory, one per live partition actor.
func NewManager(system *actor.ActorSystem, factory Factory, opts Options) *Manager {
	opts.defaults()
	m := &Manager{system: system, opts: opts, stats: &managerCounters{}, quit: make(chan struct{})}
	o := &m.opts
	stats := m.stats
	props := func(partition string) *actor.Props {
		return actor.PropsFromProducer(func() actor.Actor {
			return &partitionActor{partition: partition, worker: factory(partition), opts: o, stats: stats}
		}, actor.WithMailbox(actor.UnboundedLockfree())) // no preallocated ring per idle actor
	}
	m.pid = system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &managerActor{factory: factory, opts: o, stats: stats, children: map[string]*child{}, props: props}
	}))
	if o.IdleTimeout > 0 {
		m.swept.Add(1)
		go m.sweepLoop(o.IdleTimeout)
	}
	return m
}

// sweepLoop asks the manager actor to passivate idle partitions, a few times
// per idle timeout, until Stop.
func (m *Manager) sweepLoop(idle time.Duration) {
	defer m.swept.Done()
	t := time.NewTicker(max(idle/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-m.quit:
			return
		case now := <-t.C:
			m.system.Root.Send(m.pid, sweep{cutoff: now.Add(-idle)})
		}
	}
}

// Submit routes job to its partition's actor. After Stop, the job fails
// with ErrStopped.
func (m *Manager) Submit(partition string, job Job) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.stopped {
		job.Fail(ErrStopped)
		return
	}
	m.system.Root.Send(m.pid, &route{partition: partition, job: job})
}

// SubmitIfLive routes job to its partition's actor only if that actor is
// live (it never spawns one); otherwise the job is dropped without being
// answered. It suits notifications that only matter to a running actor.
func (m *Manager) SubmitIfLive(partition string, job Job) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.stopped {
		m.system.Root.Send(m.pid, &route{partition: partition, job: job, ifLive: true})
	}
}

// Stats returns the manager's counters.
func (m *Manager) Stats() Stats {
	q := statsQuery{reply: make(chan Stats, 1)}
	m.mu.RLock()
	stopped := m.stopped
	if !stopped {
		m.system.Root.Send(m.pid, q)
	}
	m.mu.RUnlock()
	s := Stats{}
	if !stopped {
		s = <-q.reply
	}
	s.Spawned = m.stats.spawned.Load()
	s.Passivated = m.stats.passivated.Load()
	s.Restarts = m.stats.restarts.Load()
	s.Batches = m.stats.batches.Load()
	s.BatchedJobs = m.stats.batchedJobs.Load()
	return s
}

// Stop stops every partition actor after the jobs already routed to it
// (each Worker's Stop runs), then the manager. Jobs submitted afterwards
// fail with ErrStopped.
func (m *Manager) Stop() {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return
	}
	m.stopped = true
	m.mu.Unlock()
	close(m.quit)
	m.swept.Wait()
	// PoisonPill queues behind every route already sent; the manager then
	// poisons its children (so they finish their queued jobs) and waits for
	// them before it stops.
	m.system.Root.PoisonFuture(m.pid).Wait()
}

func (a *managerActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *route:
		c, ok := a.children[msg.partition]
		if !ok && msg.ifLive {
			return
		}
		if !ok {
			// Spawned from the root, not as children of the manager:
			// protoactor's child PIDSet keeps stale PIDs (and through them
			// whole stopped actors) in its backing array after removal, a
			// per-partition leak at high churn. Root-level actors get the
			// same default supervision (restart on panic); the manager
			// tracks them itself and stops them on Stop.
			c = &child{pid: ctx.ActorSystem().Root.Spawn(a.props(msg.partition))}
			a.children[msg.partition] = c
			a.peak = max(a.peak, len(a.children))
			a.stats.spawned.Add(1)
		}
		if a.opts.IdleTimeout > 0 {
			c.lastSeen = time.Now()
		}
		ctx.Send(c.pid, msg.job)
	case sweep:
		for p, c := range a.children {
			if c.lastSeen.Before(msg.cutoff) {
				delete(a.children, p)
				a.stats.passivated.Add(1)
				ctx.Poison(c.pid)
				a.opts.Logger.Debug("partition passivated", zap.String("partition", p))
			}
		}
		// Go maps never shrink: after a large wave of passivations, copy the
		// survivors into a fresh map so idle partitions cost nothing here.
		if a.peak > 1024 && len(a.children) < a.peak/4 {
			fresh := make(map[string]*child, len(a.children))
			maps.Copy(fresh, a.children)
			a.children, a.peak = fresh, len(fresh)
		}
	case statsQuery:
		msg.reply <- Stats{LiveActors: len(a.children)}
	case *actor.Stopping:
		// Children are poisoned (not stopped) so their queued jobs run first;
		// the manager's own stop waits for their termination.
		for _, c := range a.children {
			ctx.PoisonFuture(c.pid).Wait()
		}
		a.children = nil
	}
}
