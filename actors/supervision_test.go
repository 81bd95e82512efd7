package actors

import (
	"context"
	"errors"
	"testing"
	"time"
)

// recJob records which partition's worker answered it; panicking jobs make
// the worker panic.
type recJob struct {
	panic bool
	done  chan string
	fail  chan error
}

func (j *recJob) Batchable() bool { return false }
func (j *recJob) Fail(err error)  { j.fail <- err }

type recWorker struct{ partition string }

func (w *recWorker) Start(context.Context) error { return nil }
func (w *recWorker) Stop(context.Context)        {}
func (w *recWorker) Handle(_ context.Context, jobs []*recJob) {
	for _, j := range jobs {
		if j.panic {
			panic("host callback bug")
		}
		j.done <- w.partition
	}
}

func newRecJob(p bool) *recJob {
	return &recJob{panic: p, done: make(chan string, 1), fail: make(chan error, 1)}
}

// TestActorSurvivesRepeatedPanics: a partition whose worker panics on
// every job, far more often than protoactor's default supervision allows
// (10 in 10 s), keeps its actor: every job is answered (a PanicError), the
// next normal job is served by its own worker, and a partition started
// afterwards gets its own actor, not the failing one's route or name.
func TestActorSurvivesRepeatedPanics(t *testing.T) {
	r := New(func(p string) Worker[*recJob] { return &recWorker{partition: p} }, Options{IdleTimeout: -1})
	t.Cleanup(r.Stop)
	answered := func(what string, j *recJob) (string, error) {
		t.Helper()
		select {
		case p := <-j.done:
			return p, nil
		case err := <-j.fail:
			return "", err
		case <-time.After(5 * time.Second):
			t.Fatalf("%s was never answered", what)
			return "", nil
		}
	}
	for i := range 30 {
		j := newRecJob(true)
		r.Submit("tenant-a", j)
		if _, err := answered("a panicking job", j); !errors.As(err, new(*PanicError)) {
			t.Fatalf("panicking job %d answered %v, want a PanicError", i, err)
		}
	}
	b := newRecJob(false)
	r.Submit("tenant-b", b)
	if p, err := answered("tenant-b's job", b); p != "tenant-b" {
		t.Fatalf("tenant-b's job answered by %q (%v)", p, err)
	}
	a := newRecJob(false)
	r.Submit("tenant-a", a)
	if p, err := answered("tenant-a's job", a); p != "tenant-a" {
		t.Fatalf("tenant-a's job answered by %q (%v)", p, err)
	}
	if st := r.Stats(); st.Restarts < 30 {
		t.Errorf("%d restarts counted, want at least 30", st.Restarts)
	}
}
