package actors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type testJob struct {
	batch   bool
	ordered bool // AfterQueued
	panic   bool
	block   chan struct{} // when set, Handle waits for it to close
	done    chan error
}

func newJob(batch bool) *testJob { return &testJob{batch: batch, done: make(chan error, 1)} }

func (j *testJob) Batchable() bool   { return j.batch }
func (j *testJob) Fail(err error)    { j.done <- err }
func (j *testJob) AfterQueued() bool { return j.ordered }

type testWorker struct {
	partition string
	starts    *atomic.Int64
	stops     *atomic.Int64
	mu        *sync.Mutex
	active    *int
	maxActive *int
	batches   *[]int
}

func (w *testWorker) Start(context.Context) error { w.starts.Add(1); return nil }
func (w *testWorker) Stop(context.Context)        { w.stops.Add(1) }
func (w *testWorker) Handle(_ context.Context, jobs []*testJob) {
	w.mu.Lock()
	*w.active++
	*w.maxActive = max(*w.maxActive, *w.active)
	*w.batches = append(*w.batches, len(jobs))
	w.mu.Unlock()
	for _, tj := range jobs {
		if tj.block != nil {
			<-tj.block
		}
		if tj.panic {
			panic("boom")
		}
	}
	w.mu.Lock()
	*w.active--
	w.mu.Unlock()
	for _, j := range jobs {
		j.done <- nil
	}
}

type harness struct {
	m                 *Runtime[*testJob]
	starts, stops     atomic.Int64
	mu                sync.Mutex
	active, maxActive int
	batches           []int
}

func newHarness(t *testing.T, opts Options) *harness {
	h := &harness{}
	h.m = New(func(p string) Worker[*testJob] {
		return &testWorker{partition: p, starts: &h.starts, stops: &h.stops, mu: &h.mu, active: &h.active, maxActive: &h.maxActive, batches: &h.batches}
	}, opts)
	t.Cleanup(h.m.Stop)
	return h
}

func wait(t *testing.T, j *testJob) error {
	t.Helper()
	select {
	case err := <-j.done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("job was never answered")
		return nil
	}
}

func TestJobsOfOnePartitionAreSerializedAndBatched(t *testing.T) {
	h := newHarness(t, Options{})
	gate := make(chan struct{})
	first := newJob(false)
	first.block = gate
	h.m.Submit("p", first)
	var jobs []*testJob
	for range 50 {
		j := newJob(true)
		jobs = append(jobs, j)
		h.m.Submit("p", j)
	}
	close(gate) // the 50 batchable jobs queued behind the blocked one
	if err := wait(t, first); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if err := wait(t, j); err != nil {
			t.Fatal(err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.maxActive != 1 {
		t.Fatalf("max concurrent Handle calls on one partition = %d, want 1", h.maxActive)
	}
	if len(h.batches) >= 51 {
		t.Fatalf("no batching happened: %d Handle calls for 51 jobs (%v)", len(h.batches), h.batches)
	}
}

func TestMaxBatchOneDisablesGrouping(t *testing.T) {
	h := newHarness(t, Options{MaxBatch: 1})
	gate := make(chan struct{})
	first := newJob(false)
	first.block = gate
	h.m.Submit("p", first)
	var jobs []*testJob
	for range 10 {
		j := newJob(true)
		jobs = append(jobs, j)
		h.m.Submit("p", j)
	}
	close(gate)
	for _, j := range append(jobs, first) {
		if err := wait(t, j); err != nil {
			t.Fatal(err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.batches {
		if n != 1 {
			t.Fatalf("batch of %d with MaxBatch 1", n)
		}
	}
}

func TestPartitionsRunInParallel(t *testing.T) {
	h := newHarness(t, Options{})
	gate := make(chan struct{})
	a := newJob(false)
	a.block = gate
	h.m.Submit("a", a)
	b := newJob(false)
	h.m.Submit("b", b) // must complete while "a" is blocked
	if err := wait(t, b); err != nil {
		t.Fatal(err)
	}
	close(gate)
	if err := wait(t, a); err != nil {
		t.Fatal(err)
	}
}

func TestPanicFailsJobAndRestartsFromStart(t *testing.T) {
	h := newHarness(t, Options{})
	ok := newJob(false)
	h.m.Submit("p", ok)
	if err := wait(t, ok); err != nil {
		t.Fatal(err)
	}
	bad := newJob(false)
	bad.panic = true
	h.m.Submit("p", bad)
	var perr *PanicError
	if err := wait(t, bad); !errors.As(err, &perr) {
		t.Fatalf("panicking job answered %v, want *PanicError", err)
	}
	after := newJob(false)
	h.m.Submit("p", after)
	if err := wait(t, after); err != nil {
		t.Fatalf("job after restart: %v", err)
	}
	if got := h.starts.Load(); got < 2 {
		t.Fatalf("worker Start ran %d times, want a restart (>= 2)", got)
	}
}

func TestPassivationLosesNoJobs(t *testing.T) {
	h := newHarness(t, Options{IdleTimeout: time.Millisecond})
	// Keep submitting while actors passivate underneath: every job must be
	// answered exactly once.
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				j := newJob(i%2 == 0)
				h.m.Submit(fmt.Sprintf("p%d", g%3), j)
				if err := wait(t, j); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// Every partition goes idle: all of them are passivated, and each
	// passivated actor runs its Worker's Stop (asynchronously, after the
	// PoisonPill reaches it).
	deadline := time.Now().Add(10 * time.Second)
	for h.m.Stats().LiveActors > 0 || h.stops.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("idle actors were not passivated and stopped: %+v, worker stops %d", h.m.Stats(), h.stops.Load())
		}
		time.Sleep(time.Millisecond)
	}
	before := h.m.Stats()
	if before.Passivated < 3 || h.stops.Load() < 3 {
		t.Fatalf("passivated=%d worker stops=%d, want >= 3", before.Passivated, h.stops.Load())
	}
	// A passivated partition respawns on its next job.
	j := newJob(false)
	h.m.Submit("p0", j)
	if err := wait(t, j); err != nil {
		t.Fatal(err)
	}
	if after := h.m.Stats(); after.Spawned != before.Spawned+1 {
		t.Fatalf("spawned %d -> %d, want a respawn", before.Spawned, after.Spawned)
	}
}

func TestStopRunsWorkerStopAndRefusesLaterJobs(t *testing.T) {
	h := newHarness(t, Options{})
	for _, p := range []string{"a", "b"} {
		j := newJob(false)
		h.m.Submit(p, j)
		if err := wait(t, j); err != nil {
			t.Fatal(err)
		}
	}
	h.m.Stop()
	if got := h.stops.Load(); got != 2 {
		t.Fatalf("worker Stop ran %d times, want 2", got)
	}
	j := newJob(false)
	h.m.Submit("a", j)
	if err := wait(t, j); !errors.Is(err, ErrStopped) {
		t.Fatalf("job after Stop answered %v, want ErrStopped", err)
	}
}

type tickWorker struct {
	testWorker
	ticks *atomic.Int64
}

func (w *tickWorker) Tick(context.Context) { w.ticks.Add(1) }

// Live actors whose Worker implements Ticker are ticked periodically, and
// ticks do not keep an idle actor from being passivated.
func TestTicksReachLiveWorkersAndDoNotPreventPassivation(t *testing.T) {
	var ticks, starts, stops atomic.Int64
	var mu sync.Mutex
	var active, maxActive int
	var batches []int
	r := New(func(p string) Worker[*testJob] {
		return &tickWorker{testWorker: testWorker{partition: p, starts: &starts, stops: &stops, mu: &mu, active: &active, maxActive: &maxActive, batches: &batches}, ticks: &ticks}
	}, Options{TickInterval: 2 * time.Millisecond, IdleTimeout: 100 * time.Millisecond})
	t.Cleanup(r.Stop)
	j := newJob(false)
	r.Submit("p", j)
	if err := wait(t, j); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for ticks.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("worker ticked %d times", ticks.Load())
		}
		time.Sleep(time.Millisecond)
	}
	for r.Stats().LiveActors > 0 || stops.Load() < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("a ticked idle actor was not passivated: %+v", r.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	// Once passivated, it is ticked no more.
	n := ticks.Load()
	later := time.Now().Add(20 * time.Millisecond)
	for time.Now().Before(later) {
		time.Sleep(2 * time.Millisecond)
	}
	if got := ticks.Load(); got != n {
		t.Fatalf("a passivated actor was ticked: %d → %d", n, got)
	}
}

// A non-batchable job runs as soon as it is reached, ahead of pushes queued
// for the next group (they keep growing the group); a job that says
// AfterQueued runs after them.
func TestOrderedJobsRunAfterQueuedBatches(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		h := newHarness(t, Options{})
		gate := make(chan struct{})
		blocker := newJob(false)
		blocker.block = gate
		h.m.Submit("p", blocker)
		var batch []*testJob
		for range 5 {
			j := newJob(true)
			batch = append(batch, j)
			h.m.Submit("p", j)
		}
		last := newJob(false)
		last.ordered = ordered
		h.m.Submit("p", last)
		close(gate)
		for _, j := range append(append([]*testJob{blocker}, batch...), last) {
			if err := wait(t, j); err != nil {
				t.Fatal(err)
			}
		}
		h.mu.Lock()
		got := fmt.Sprint(h.batches)
		h.mu.Unlock()
		want := "[1 1 5]"
		if ordered {
			want = "[1 5 1]"
		}
		if got != want {
			t.Fatalf("ordered=%v: Handle calls of sizes %s, want %s", ordered, got, want)
		}
	}
}
