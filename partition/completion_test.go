package partition

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
)

// completionCase is one job kind seen through its exported surface: the
// job (as the actor runtime sees it) and its typed Wait reduced to its
// error.
type completionCase struct {
	name string
	job  func(ctx context.Context) (Job, func(context.Context) error)
	// coded: a caller that gives up gets a retryable sync.internal_error
	// (request-facing jobs); otherwise ctx's own error.
	coded bool
}

func completionCases() []completionCase {
	req := &ssp2.Request{WireVersion: ssp2.WireV2, Header: &ssp2.ReqHeader{ClientID: "c"}}
	return []completionCase{
		{"sync", func(ctx context.Context) (Job, func(context.Context) error) {
			j := NewSyncJob(ctx, "a", req, nil, false)
			return j, func(ctx context.Context) error { _, err := j.Wait(ctx); return err }
		}, true},
		{"command", func(ctx context.Context) (Job, func(context.Context) error) {
			j := NewCommandJob(ctx, "a", "c", "rc", "cc", nil, false, nil)
			return j, func(ctx context.Context) error { _, err := j.Wait(ctx); return err }
		}, true},
		{"page", func(ctx context.Context) (Job, func(context.Context) error) {
			j := &PageJob{ctx: ctx}
			j.init()
			return j, func(ctx context.Context) error {
				_, err := j.wait(ctx, "request abandoned while streaming")
				return err
			}
		}, true},
		{"prune", func(ctx context.Context) (Job, func(context.Context) error) {
			j := NewPruneJob(ctx)
			return j, func(ctx context.Context) error { return j.Wait(ctx).Err }
		}, false},
		{"restore", func(ctx context.Context) (Job, func(context.Context) error) {
			j := NewRestoreJob(ctx)
			return j, func(ctx context.Context) error { _, err := j.Wait(ctx); return err }
		}, false},
		{"rotate", func(ctx context.Context) (Job, func(context.Context) error) {
			j := NewRotateJob(ctx)
			return j, func(ctx context.Context) error { _, err := j.Wait(ctx); return err }
		}, false},
		{"backfill", func(ctx context.Context) (Job, func(context.Context) error) {
			j := NewBackfillJob(ctx)
			return j, j.Wait
		}, false},
		{"client", func(ctx context.Context) (Job, func(context.Context) error) {
			j := NewClientJob(ctx, "c")
			return j, func(ctx context.Context) error { _, err := j.Wait(ctx); return err }
		}, false},
		{"delta", func(ctx context.Context) (Job, func(context.Context) error) {
			j := NewDeltaJob(ctx, DeltaRequest{})
			return j, func(ctx context.Context) error { _, err := j.Wait(ctx); return err }
		}, false},
		{"ack", func(ctx context.Context) (Job, func(context.Context) error) {
			j := NewAckJob(ctx, nil)
			return j, j.Wait
		}, false},
	}
}

// TestJobFailAnswersOnce: the first Fail is the answer; a later one is
// dropped without blocking, and the answer stays readable.
func TestJobFailAnswersOnce(t *testing.T) {
	first, second := errors.New("first failure"), errors.New("second failure")
	for _, c := range completionCases() {
		t.Run(c.name, func(t *testing.T) {
			job, wait := c.job(context.Background())
			job.Fail(first)
			job.Fail(second) // must not block
			for i := range 2 {
				err := wait(context.Background())
				if !errors.Is(err, first) || errors.Is(err, second) {
					t.Fatalf("wait %d: %v, want the first failure", i, err)
				}
			}
		})
	}
}

// TestJobWaitAbandoned: a Wait whose ctx ends before the answer returns
// the abandonment error (coded for request-facing jobs, ctx's own error
// otherwise); an answer that comes later is not lost to a new Wait.
func TestJobWaitAbandoned(t *testing.T) {
	failure := errors.New("late failure")
	for _, c := range completionCases() {
		t.Run(c.name, func(t *testing.T) {
			job, wait := c.job(context.Background())
			gone, cancel := context.WithCancel(context.Background())
			cancel()
			err := wait(gone)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("abandoned wait: %v, want context.Canceled", err)
			}
			var coded *syncerr.Error
			if isCoded := errors.As(err, &coded); isCoded != c.coded {
				t.Fatalf("abandoned wait: %v coded=%v, want coded=%v", err, isCoded, c.coded)
			}
			if c.coded && coded.Code != syncerr.InternalError {
				t.Fatalf("abandoned wait: code %s, want %s", coded.Code, syncerr.InternalError)
			}
			job.Fail(failure)
			if err := wait(context.Background()); !errors.Is(err, failure) {
				t.Fatalf("wait after the late answer: %v, want it", err)
			}
		})
	}
}

// TestCompletionAnswerRace: answers racing from several goroutines (the
// actor's error path and the runtime failing the job) leave exactly one
// answer, which every reader sees.
func TestCompletionAnswerRace(t *testing.T) {
	var c completion[int]
	c.init()
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { c.answer(i, nil) })
	}
	got, err := c.wait(context.Background(), "")
	wg.Wait()
	if err != nil || got < 0 || got >= n {
		t.Fatalf("wait: %d, %v; want one of the answers", got, err)
	}
	if again, _ := c.result(); again != got {
		t.Fatalf("result %d after wait %d: the answer changed", again, got)
	}
}

// TestSyncJobAnswer: a served job's reply and error reach its waiter as
// given (answer is how push and pull reply).
func TestSyncJobAnswer(t *testing.T) {
	j := NewSyncJob(context.Background(), "a", &ssp2.Request{}, nil, false)
	rep := &Reply{}
	j.answer(rep, nil)
	j.answer(nil, errors.New("dropped"))
	got, err := j.Wait(context.Background())
	if got != rep || err != nil {
		t.Fatalf("Wait = %p, %v; want %p, nil", got, err, rep)
	}
}

// BenchmarkJobCompletion: a job's construction, answer and Wait, the
// per-request completion cost (allocations: the job and its signal).
//
//	go test -run='^$' -bench=JobCompletion -benchmem ./partition/
func BenchmarkJobCompletion(b *testing.B) {
	ctx := context.Background()
	req := &ssp2.Request{}
	rep := &Reply{}
	b.ReportAllocs()
	for b.Loop() {
		j := NewSyncJob(ctx, "a", req, nil, false)
		j.answer(rep, nil)
		if got, err := j.Wait(ctx); got != rep || err != nil {
			b.Fatal(got, err)
		}
	}
}
