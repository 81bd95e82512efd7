package actors

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// warmDispatcher runs the turns of partition mailboxes on worker
// goroutines that outlive a turn. protoactor's default dispatcher starts a
// fresh goroutine for every turn of an idle mailbox; a turn that reaches
// SQLite (the transpiled C library runs on the goroutine's stack) then
// grows that stack from its initial few KiB by repeated copying, and with
// a thousand partitions, each getting a job now and then, nearly every
// job paid that growth (8 % of the CPU of the partitions benchmark). A
// worker that finishes a turn waits up to idleFor for the next one (the
// most recently parked worker gets it); at most maxIdle wait at a time,
// the others exit, and all exit once quit is closed (the Runtime owns
// them).
type warmDispatcher struct {
	quit    chan struct{}
	idleFor time.Duration
	maxIdle int

	mu     sync.Mutex
	parked []*warmWorker // waiting for a turn, most recent last
	// started counts workers started; running tracks live ones.
	started atomic.Int64
	running sync.WaitGroup
}

// warmWorker is one worker; turn (buffered) hands it its next turn.
type warmWorker struct{ turn chan func() }

const (
	// workerIdle is how long a worker waits for another turn before it
	// exits.
	workerIdle = time.Second
	// maxIdleWorkers bounds the workers waiting for a turn.
	maxIdleWorkers = 256
	// dispatchThroughput is protoactor's default: messages per turn
	// before the mailbox yields the processor.
	dispatchThroughput = 300
)

var _ actor.Dispatcher = (*warmDispatcher)(nil)

func newWarmDispatcher(quit chan struct{}, idleFor time.Duration, maxIdle int) *warmDispatcher {
	return &warmDispatcher{quit: quit, idleFor: idleFor, maxIdle: maxIdle}
}

// Schedule runs fn on a parked worker, or on a new one when none is.
func (d *warmDispatcher) Schedule(fn func()) {
	d.mu.Lock()
	if n := len(d.parked); n > 0 {
		w := d.parked[n-1]
		d.parked[n-1] = nil
		d.parked = d.parked[:n-1]
		d.mu.Unlock()
		w.turn <- fn // buffered: the worker takes it when it wakes
		return
	}
	d.mu.Unlock()
	d.started.Add(1)
	d.running.Add(1)
	go d.work(&warmWorker{turn: make(chan func(), 1)}, fn)
}

// Throughput answers actor.Dispatcher.
func (d *warmDispatcher) Throughput() int { return dispatchThroughput }

// idle returns how many workers are parked.
func (d *warmDispatcher) idle() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.parked)
}

// work runs fn and then every turn handed to w, until w waited idleFor
// for none, maxIdle workers were parked already, or quit is closed.
func (d *warmDispatcher) work(w *warmWorker, fn func()) {
	defer d.running.Done()
	t := time.NewTimer(d.idleFor)
	defer t.Stop()
	for {
		fn()
		if !d.park(w) {
			return
		}
		t.Reset(d.idleFor)
		select {
		case fn = <-w.turn:
			continue
		case <-t.C:
		case <-d.quit:
		}
		if d.unpark(w) {
			return
		}
		fn = <-w.turn // Schedule took w before it could leave: run that turn
	}
}

// park adds w to the parked workers unless quit is closed or maxIdle are
// parked already.
func (d *warmDispatcher) park(w *warmWorker) bool {
	select {
	case <-d.quit:
		return false
	default:
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.parked) >= d.maxIdle {
		return false
	}
	d.parked = append(d.parked, w)
	return true
}

// unpark removes w from the parked workers; false when Schedule took it
// (and handed it a turn) first.
func (d *warmDispatcher) unpark(w *warmWorker) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, p := range d.parked {
		if p == w {
			d.parked = append(d.parked[:i], d.parked[i+1:]...)
			return true
		}
	}
	return false
}
