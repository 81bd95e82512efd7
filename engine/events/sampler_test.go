package events

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestSamplerOneSourceOnePerInterval(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	s := NewSampler(SamplerOptions{Interval: 10 * time.Second, Sources: 4, Now: clk.now})
	emits := 0
	for range 3000 {
		if emit, _, _ := s.Sample("10.0.0.1"); emit {
			emits++
		}
	}
	if emits != 1 {
		t.Fatalf("3000 occurrences within one interval emitted %d events, want 1", emits)
	}
	clk.add(10 * time.Second)
	emit, suppressed, bucket := s.Sample("10.0.0.1")
	if !emit || suppressed != 2999 || bucket != "10.0.0.1" {
		t.Fatalf("after the interval: emit=%v suppressed=%d bucket=%q, want true 2999 10.0.0.1", emit, suppressed, bucket)
	}
}

func TestSamplerManySourcesBounded(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	const sources = 8
	s := NewSampler(SamplerOptions{Interval: 10 * time.Second, Sources: sources, Now: clk.now})
	emits, others := 0, 0
	for i := range 3000 {
		emit, _, bucket := s.Sample(fmt.Sprintf("10.0.%d.%d", i/256, i%256))
		if emit {
			emits++
		}
		if bucket == OtherSource {
			others++
		}
	}
	if emits != sources+1 {
		t.Fatalf("3000 distinct sources emitted %d events, want %d (table + other)", emits, sources+1)
	}
	if others != 3000-sources {
		t.Fatalf("%d occurrences went to the other bucket, want %d", others, 3000-sources)
	}
	if n := s.Tracked(); n != sources {
		t.Fatalf("tracked %d sources, want %d", n, sources)
	}
	// Quiet for an interval: new sources replace the old ones, whose
	// held-back counts land in the other bucket (none here: each was seen once).
	clk.add(10 * time.Second)
	emit, _, bucket := s.Sample("192.168.0.1")
	if !emit || bucket != "192.168.0.1" {
		t.Fatalf("a new source after the quiet interval: emit=%v bucket=%q", emit, bucket)
	}
	emit, suppressed, bucket := s.Sample("192.168.0.2")
	if !emit || bucket != "192.168.0.2" || suppressed != 0 {
		t.Fatalf("second new source: emit=%v bucket=%q suppressed=%d", emit, bucket, suppressed)
	}
	if n := s.Tracked(); n != sources {
		t.Fatalf("tracked %d sources, want %d", n, sources)
	}
	// The other bucket reports what it held back.
	emit, suppressed, bucket = s.Sample(OtherSource)
	if !emit || bucket != OtherSource || suppressed != 3000-sources-1 {
		t.Fatalf("other bucket: emit=%v bucket=%q suppressed=%d, want true other %d", emit, bucket, suppressed, 3000-sources-1)
	}
}

func TestSamplerEvictedCountsMoveToOther(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	s := NewSampler(SamplerOptions{Interval: time.Second, Sources: 1, Now: clk.now})
	for range 5 {
		s.Sample("a")
	}
	clk.add(time.Second)
	if emit, _, bucket := s.Sample("b"); !emit || bucket != "b" {
		t.Fatalf("b after a went quiet: emit=%v bucket=%q", emit, bucket)
	}
	if _, suppressed, _ := s.Sample(OtherSource); suppressed != 4 {
		t.Fatalf("other bucket holds %d of a's held-back occurrences, want 4", suppressed)
	}
}
