package actors

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// Turns run on workers that wait for the next turn: sequential turns
// share one worker, concurrent ones get their own, at most maxIdle stay
// parked, and every worker exits once quit is closed.
func TestWarmDispatcherReusesWorkers(t *testing.T) {
	cases := []struct {
		name                string
		concurrent, maxIdle int
	}{
		{"sequential turns share a worker", 1, 4},
		{"concurrent turns get their own", 6, 8},
		{"parked workers are bounded", 6, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			quit := make(chan struct{})
			d := newWarmDispatcher(quit, time.Hour, c.maxIdle)
			parked := min(c.concurrent, c.maxIdle)
			for round := range 3 {
				var ran, release sync.WaitGroup
				ran.Add(c.concurrent)
				release.Add(1)
				for range c.concurrent {
					d.Schedule(func() { ran.Done(); release.Wait() })
				}
				ran.Wait() // every turn of the round runs at once
				release.Done()
				for d.idle() != parked {
					runtime.Gosched() // until the round's workers parked (or left)
				}
				// Round 0 starts one worker per turn; later rounds reuse
				// the parked ones and start only the rest.
				want := int64(c.concurrent + round*(c.concurrent-parked))
				if got := d.started.Load(); got != want {
					t.Fatalf("round %d: %d workers started, want %d", round, got, want)
				}
			}
			close(quit)
			d.running.Wait() // returns only once every worker exited
			if n := d.idle(); n != 0 {
				t.Fatalf("%d workers still parked after quit", n)
			}
		})
	}
}

// A worker that waited idleFor without a turn exits.
func TestWarmDispatcherIdleWorkerExits(t *testing.T) {
	d := newWarmDispatcher(make(chan struct{}), time.Millisecond, 4)
	done := make(chan struct{})
	d.Schedule(func() { close(done) })
	<-done
	d.running.Wait()
	if d.idle() != 0 || d.started.Load() != 1 {
		t.Fatalf("parked %d, started %d after the idle timeout", d.idle(), d.started.Load())
	}
}
