package actors

import (
	"sync"
	"testing"
	"time"
)

// lifecycleLog records what OnLifecycle reported.
type lifecycleLog struct {
	mu  sync.Mutex
	evs map[Lifecycle][]string
}

func (l *lifecycleLog) record(p string, ev Lifecycle) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.evs == nil {
		l.evs = map[Lifecycle][]string{}
	}
	l.evs[ev] = append(l.evs[ev], p)
}

func (l *lifecycleLog) count(ev Lifecycle, p string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, q := range l.evs[ev] {
		if q == p {
			n++
		}
	}
	return n
}

func TestLifecycleHookReportsRestartsAndPassivations(t *testing.T) {
	cases := []struct {
		name string
		opts Options
		run  func(t *testing.T, h *harness)
		ev   Lifecycle
	}{
		{"restart after panic", Options{IdleTimeout: -1}, func(t *testing.T, h *harness) {
			bad := newJob(false)
			bad.panic = true
			h.m.Submit("p", bad)
			if err := wait(t, bad); err == nil {
				t.Fatal("panicking job answered nil")
			}
		}, Restarted},
		{"passivation when idle", Options{IdleTimeout: time.Millisecond}, func(t *testing.T, h *harness) {
			j := newJob(false)
			h.m.Submit("p", j)
			if err := wait(t, j); err != nil {
				t.Fatal(err)
			}
		}, Passivated},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var log lifecycleLog
			c.opts.OnLifecycle = log.record
			h := newHarness(t, c.opts)
			c.run(t, h)
			deadline := time.Now().Add(10 * time.Second)
			for log.count(c.ev, "p") == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("no %v event for p: %+v", c.ev, log.evs)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}

func TestLiveReportsRoutedActors(t *testing.T) {
	h := newHarness(t, Options{IdleTimeout: time.Hour})
	if live, _ := h.m.Live("p"); live {
		t.Fatal("p live before any job")
	}
	before := time.Now()
	j := newJob(false)
	h.m.Submit("p", j)
	if err := wait(t, j); err != nil {
		t.Fatal(err)
	}
	live, last := h.m.Live("p")
	if !live || last.Before(before) {
		t.Fatalf("Live(p) = %v, %v; want live with a last job at or after %v", live, last, before)
	}
}
