package actors

import (
	"hash/maphash"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
)

// shardCount is the number of routing-map shards; a power of two.
const shardCount = 64

type counters struct {
	spawned, passivated, evicted, restarts, batches, batchedJobs atomic.Uint64
}

// Runtime owns one protoactor actor system and the partition actors in it:
// it routes jobs to them, spawning an actor on a partition's first job and
// passivating it when idle. It is safe for concurrent use.
type Runtime[J Job] struct {
	system *actor.ActorSystem
	props  func(partition string, slot uint32) *actor.Props
	names  nameSlots
	opts   Options
	stats  *counters
	seed   maphash.Seed
	shards [shardCount]shard

	stopOnce sync.Once
	quit     chan struct{}
	swept    sync.WaitGroup
}

// shard is one slice of the routing map. Its lock is held by Submit while
// it sends and by the sweep while it poisons, which is what orders every
// job before the PoisonPill of its actor.
type shard struct {
	mu       sync.Mutex
	stopped  bool
	children map[string]*child
	peak     int // high-water len(children) since the map was last rebuilt
}

type child struct {
	pid      *actor.PID
	lastSeen time.Time
}

// New starts a runtime whose partition actors run Workers made by factory.
// protoactor's logs go to opts.Logger (named "protoactor").
func New[J Job](factory Factory[J], opts Options) *Runtime[J] {
	opts.defaults()
	h := zapslog.NewHandler(opts.Logger.Core(), zapslog.WithName("protoactor"))
	r := &Runtime[J]{
		system: actor.NewActorSystem(actor.WithLoggerFactory(func(s *actor.ActorSystem) *slog.Logger {
			return slog.New(h).With("lib", "protoactor", "system", s.ID)
		})),
		stats: &counters{},
		seed:  maphash.MakeSeed(),
		quit:  make(chan struct{}),
		opts:  opts,
	}
	o, stats, names := &r.opts, r.stats, &r.names
	d := newWarmDispatcher(r.quit, workerIdle, maxIdleWorkers) // dispatch.go
	// A partition actor that panics is restarted however often it fails:
	// protoactor's default for root actors stops one after 10 failures in
	// 10 s, which would leave its partition routed to a dead PID (and, once
	// its recycled name went to another partition, to that partition's
	// actor). One strategy value: protoactor keeps one guardian per value.
	guardian := actor.NewRestartingStrategy()
	r.props = func(partition string, slot uint32) *actor.Props {
		return actor.PropsFromProducer(func() actor.Actor {
			return &partitionActor[J]{partition: partition, worker: factory(partition), opts: o, stats: stats,
				stopped: func(self *actor.PID) {
					r.forget(partition, self) // before the name can go to another actor
					names.put(slot)
				}}
		}, actor.WithMailbox(actor.UnboundedLockfree()), // no preallocated ring per idle actor
			actor.WithDispatcher(d), actor.WithGuardian(guardian))
	}
	if o.IdleTimeout > 0 || o.TickInterval > 0 {
		r.swept.Add(1)
		go r.sweepLoop(o.IdleTimeout, o.TickInterval)
	}
	return r
}

func (r *Runtime[J]) shard(partition string) *shard {
	return &r.shards[maphash.String(r.seed, partition)&(shardCount-1)]
}

// Submit routes job to its partition's actor, spawning the actor if the
// partition has none. After Stop, the job fails with ErrStopped.
func (r *Runtime[J]) Submit(partition string, job J) {
	s := r.shard(partition)
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		job.Fail(ErrStopped)
		return
	}
	c, ok := s.children[partition]
	if !ok {
		// Spawned from the root, not as children of a router actor:
		// protoactor's child PIDSet keeps stale PIDs (and through them
		// whole stopped actors) after removal, a per-partition leak at high
		// churn. Root-level actors get the default supervision (restart on
		// panic); the runtime tracks them itself and stops them on Stop.
		c = &child{pid: r.spawn(partition)}
		if s.children == nil {
			s.children = map[string]*child{}
		}
		s.children[partition] = c
		s.peak = max(s.peak, len(s.children))
		r.stats.spawned.Add(1)
	}
	if r.opts.IdleTimeout > 0 {
		c.lastSeen = time.Now()
	}
	r.system.Root.Send(c.pid, job)
	s.mu.Unlock()
}

// forget removes partition's route if it still leads to self, a stopped
// actor: a later Submit then starts a new actor instead of sending to a PID
// whose registry name may be recycled. (Passivation and Stop remove the
// route themselves before stopping the actor.)
func (r *Runtime[J]) forget(partition string, self *actor.PID) {
	s := r.shard(partition)
	s.mu.Lock()
	if c, ok := s.children[partition]; ok && c.pid.Equal(self) {
		delete(s.children, partition)
		r.opts.Logger.Warn("partition actor stopped on its own; its route is removed", zap.String("partition", partition))
	}
	s.mu.Unlock()
}

// spawn starts partition's actor under a recycled registry name: names of
// terminated actors are reused (an actor gives its name back only once
// protoactor has removed it from the process registry), so the registry's
// map stays as large as the most actors ever live at once instead of
// growing with every partition ever passivated.
func (r *Runtime[J]) spawn(partition string) *actor.PID {
	for {
		slot, name := r.names.get()
		pid, err := r.system.Root.SpawnNamed(r.props(partition, slot), name)
		if err == nil {
			return pid
		}
		// Only ErrNameExists is possible for a recycled name, which the
		// release order rules out; never reuse a name that failed.
		r.opts.Logger.Warn("partition actor name taken; using a fresh one", zap.String("name", name), zap.Error(err))
	}
}

// nameSlots hands out registry names "p<slot>", reusing released slots.
type nameSlots struct {
	mu   sync.Mutex
	free []uint32
	next uint32
}

func (n *nameSlots) get() (uint32, string) {
	n.mu.Lock()
	var slot uint32
	if k := len(n.free); k > 0 {
		slot, n.free = n.free[k-1], n.free[:k-1]
	} else {
		slot = n.next
		n.next++
	}
	n.mu.Unlock()
	return slot, "p" + strconv.FormatUint(uint64(slot), 36)
}

func (n *nameSlots) put(slot uint32) {
	n.mu.Lock()
	n.free = append(n.free, slot)
	n.mu.Unlock()
}

// sweepLoop passivates idle partitions a few times per idle timeout and
// ticks the live ones every tick interval, until Stop.
func (r *Runtime[J]) sweepLoop(idle, every time.Duration) {
	defer r.swept.Done()
	var sweepC, tickC <-chan time.Time
	if idle > 0 {
		t := time.NewTicker(max(idle/4, time.Millisecond))
		defer t.Stop()
		sweepC = t.C
	}
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tickC = t.C
	}
	for {
		select {
		case <-r.quit:
			return
		case now := <-sweepC:
			r.sweep(now.Add(-idle))
		case <-tickC:
			r.tickAll()
		}
	}
}

// tickAll sends a tick to every live actor (without touching lastSeen).
func (r *Runtime[J]) tickAll() {
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		for _, c := range s.children {
			r.system.Root.Send(c.pid, tick{})
		}
		s.mu.Unlock()
	}
}

// sweep passivates the actors idle since before cutoff: each leaves the
// routing map and gets a PoisonPill behind the jobs already sent to it.
func (r *Runtime[J]) sweep(cutoff time.Time) {
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		for p, c := range s.children {
			if c.lastSeen.Before(cutoff) {
				delete(s.children, p)
				r.stats.passivated.Add(1)
				r.opts.lifecycle(p, Passivated)
				r.system.Root.Poison(c.pid)
				r.opts.Logger.Debug("partition passivated", zap.String("partition", p))
			}
		}
		// Go maps never shrink: after a large wave of passivations, copy the
		// survivors into a fresh map so idle partitions cost nothing here.
		if s.peak > 64 && len(s.children) < s.peak/4 {
			s.children = maps.Clone(s.children)
			s.peak = len(s.children)
		}
		s.mu.Unlock()
	}
}

// Live reports whether the partition has a live actor and, when the
// runtime passivates (IdleTimeout > 0), when a job was last routed to it.
func (r *Runtime[J]) Live(partition string) (live bool, lastJob time.Time) {
	s := r.shard(partition)
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.children[partition]; ok {
		return true, c.lastSeen
	}
	return false, time.Time{}
}

// Stats returns the runtime's counters.
func (r *Runtime[J]) Stats() Stats {
	st := Stats{
		Spawned: r.stats.spawned.Load(), Passivated: r.stats.passivated.Load(), Evicted: r.stats.evicted.Load(), Restarts: r.stats.restarts.Load(),
		Batches: r.stats.batches.Load(), BatchedJobs: r.stats.batchedJobs.Load(),
	}
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		st.LiveActors += len(s.children)
		s.mu.Unlock()
	}
	return st
}

// Stop stops every partition actor after the jobs already routed to it
// (each Worker's Stop runs), then the actor system. Jobs submitted
// afterwards fail with ErrStopped.
func (r *Runtime[J]) Stop() {
	r.stopOnce.Do(func() {
		close(r.quit)
		r.swept.Wait()
		var live []*actor.PID
		for i := range r.shards {
			s := &r.shards[i]
			s.mu.Lock()
			s.stopped = true
			for _, c := range s.children {
				live = append(live, c.pid)
			}
			s.children = nil
			s.mu.Unlock()
		}
		// PoisonPill queues behind every job already sent, so each actor
		// finishes its queue (and runs Worker.Stop) before it terminates.
		futures := make([]*actor.Future, len(live))
		for i, pid := range live {
			futures[i] = r.system.Root.PoisonFuture(pid)
		}
		for _, f := range futures {
			f.Wait() //nolint:errcheck // a timeout still leaves the actor stopping
		}
		r.system.Shutdown()
	})
}
