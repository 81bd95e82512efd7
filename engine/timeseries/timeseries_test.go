package timeseries

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// clock is a settable test clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

var t0 = time.Unix(1_800_000_000, 0)

func TestBucketRollover(t *testing.T) {
	c := &clock{t: t0}
	s := New(Options{Seconds: 10, Now: c.now})
	s.ObserveRequest(t0, time.Millisecond, false)
	s.ObserveRequest(t0.Add(500*time.Millisecond), time.Millisecond, true)
	s.ObserveRequest(t0.Add(time.Second), time.Millisecond, false)
	c.t = t0.Add(time.Second)
	w := s.Window(3, 1)
	if len(w.Points) != 3 || w.Seconds != 3 || w.EndMs != t0.Add(2*time.Second).UnixMilli() {
		t.Fatalf("window %+v", w)
	}
	got := []uint64{w.Points[0].Requests, w.Points[1].Requests, w.Points[2].Requests, w.Points[1].Errors, w.Points[2].Errors}
	if want := []uint64{0, 2, 1, 1, 0}; !slices.Equal(got, want) {
		t.Fatalf("requests/errors %v, want %v", got, want)
	}
	if w.Points[1].AtMs != t0.UnixMilli() || w.Total.Requests != 3 || w.Total.Errors != 1 {
		t.Fatalf("window %+v", w)
	}

	// Ten seconds later the ring has wrapped: the slot of t0 now holds
	// t0+10s, and t0's requests are gone, not added to the new second's;
	// t0+1s is the oldest second kept.
	c.t = t0.Add(10 * time.Second)
	s.ObserveRequest(c.t, time.Millisecond, false)
	w = s.Window(0, 1)
	if len(w.Points) != 10 || w.Total.Requests != 2 || w.Points[9].Requests != 1 || w.Points[0].Requests != 1 ||
		w.Points[0].AtMs != t0.Add(time.Second).UnixMilli() {
		t.Fatalf("after the wrap: total %d, points %+v", w.Total.Requests, w.Points)
	}
	// A request of a second that left the window is dropped.
	s.ObserveRequest(t0, time.Millisecond, false)
	if w := s.Window(0, 1); w.Total.Requests != 2 {
		t.Fatalf("a request older than the window counted: %d", w.Total.Requests)
	}
}

func TestWindowSteps(t *testing.T) {
	c := &clock{t: t0.Add(59 * time.Second)}
	s := New(Options{Seconds: 60, Now: c.now})
	for i := range 60 {
		for range i {
			s.ObserveRequest(t0.Add(time.Duration(i)*time.Second), time.Millisecond, false)
		}
	}
	w := s.Window(60, 10)
	if len(w.Points) != 6 || w.StepSeconds != 10 || w.Seconds != 60 {
		t.Fatalf("window %+v", w)
	}
	for i, p := range w.Points {
		// step i holds seconds 10i..10i+9, each second j having j requests.
		want := uint64(100*i + 45)
		if p.Requests != want || p.AtMs != t0.Add(time.Duration(10*i)*time.Second).UnixMilli() {
			t.Fatalf("step %d: %+v, want %d requests", i, p, want)
		}
	}
	// A window longer than the series is cut to it; steps never run past it.
	if w := s.Window(5000, 7); w.Seconds != 56 || len(w.Points) != 8 {
		t.Fatalf("cut window: %d seconds, %d points", w.Seconds, len(w.Points))
	}
	if w := s.Window(0, 0); len(w.Points) != 60 || w.StepSeconds != 1 || w.Total.Requests != 59*60/2 {
		t.Fatalf("default window: %d points, step %d, %d requests", len(w.Points), w.StepSeconds, w.Total.Requests)
	}
}

// The ring is allocated once: a day of traffic keeps MaxSeconds slots and
// recording allocates nothing.
func TestBoundedMemory(t *testing.T) {
	c := &clock{t: t0}
	s := New(Options{Now: c.now})
	if s.Seconds() != MaxSeconds || New(Options{Seconds: 1 << 20}).Seconds() != MaxSeconds {
		t.Fatalf("seconds %d", s.Seconds())
	}
	for sec := range 24 * 3600 {
		s.ObserveRequest(t0.Add(time.Duration(sec)*time.Second), time.Duration(sec)*time.Microsecond, sec%7 == 0)
	}
	if len(s.slots) != MaxSeconds || cap(s.slots) != MaxSeconds {
		t.Fatalf("ring grew to %d slots", len(s.slots))
	}
	end := t0.Add(24 * time.Hour)
	if allocs := testing.AllocsPerRun(1000, func() { s.ObserveRequest(end, time.Millisecond, false) }); allocs != 0 {
		t.Fatalf("ObserveRequest allocates %.1f times", allocs)
	}
	c.t = end
	if w := s.Window(0, 1); w.Total.Requests != 3600+1000 || len(w.Points) != MaxSeconds {
		t.Fatalf("an hour after a day: %d requests over %d points", w.Total.Requests, len(w.Points))
	}
}

// Percentiles estimated from the histogram land within the documented
// precision of the exact ones, for several latency distributions.
func TestPercentileEstimation(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	dists := []struct {
		name string
		draw func() time.Duration
	}{
		{"constant 3ms", func() time.Duration { return 3 * time.Millisecond }},
		{"uniform 1-50ms", func() time.Duration { return time.Millisecond + time.Duration(rng.Int64N(int64(49*time.Millisecond))) }},
		{"log-normal around 2ms", func() time.Duration {
			return time.Duration(float64(2*time.Millisecond) * math.Exp(rng.NormFloat64()))
		}},
		{"bimodal 0.5ms / 800ms", func() time.Duration {
			if rng.IntN(100) < 97 {
				return 500*time.Microsecond + time.Duration(rng.Int64N(int64(100*time.Microsecond)))
			}
			return 800 * time.Millisecond
		}},
	}
	bound := math.Sqrt(Ratio) - 1 // the geometric middle is within this of any value of its bin
	for _, d := range dists {
		t.Run(d.name, func(t *testing.T) {
			c := &clock{t: t0}
			s := New(Options{Seconds: 60, Now: c.now})
			var all []time.Duration
			for range 20000 {
				v := d.draw()
				all = append(all, v)
				s.ObserveRequest(t0, v, false)
			}
			slices.Sort(all)
			exact := func(q float64) float64 { return ms(all[int(math.Ceil(q*float64(len(all))))-1]) }
			w := s.Window(1, 1)
			for _, c := range []struct {
				q   float64
				est float64
			}{{0.50, w.Total.P50Ms}, {0.99, w.Total.P99Ms}} {
				want := exact(c.q)
				if rel := math.Abs(c.est-want) / want; rel > bound+1e-9 {
					t.Errorf("p%v: estimated %.4f ms, exact %.4f ms: off by %.1f%% (bound %.1f%%)", c.q*100, c.est, want, rel*100, bound*100)
				}
			}
			if w.Precision < bound || w.Precision > bound+0.001 {
				t.Errorf("documented precision %v, bound %v", w.Precision, bound)
			}
		})
	}
	// Out of range: below MinLatency and above MaxLatency are clamped.
	s := New(Options{Seconds: 1, Now: func() time.Time { return t0 }})
	s.ObserveRequest(t0, time.Microsecond, false)
	if w := s.Window(1, 1); w.Total.P50Ms != ms(MinLatency) {
		t.Fatalf("p50 of 1µs: %v ms", w.Total.P50Ms)
	}
	s = New(Options{Seconds: 1, Now: func() time.Time { return t0 }})
	s.ObserveRequest(t0, time.Hour, false)
	if w := s.Window(1, 1); w.Total.P99Ms != ms(MaxLatency) {
		t.Fatalf("p99 of 1h: %v ms", w.Total.P99Ms)
	}
}

func TestBins(t *testing.T) {
	for i := 1; i < Buckets-1; i++ {
		lo := time.Duration(float64(MinLatency) * math.Pow(Ratio, float64(i-1)))
		hi := time.Duration(float64(MinLatency) * math.Pow(Ratio, float64(i)))
		mid := binValue(i)
		if bin(lo+1) != i || bin(hi-1) != i || mid < lo || mid >= hi {
			t.Fatalf("bin %d [%v, %v): bin(lo+1)=%d bin(hi-1)=%d middle %v", i, lo, hi, bin(lo+1), bin(hi-1), mid)
		}
	}
	if bin(0) != 0 || bin(MinLatency-1) != 0 || bin(MaxLatency+time.Second) != Buckets-1 || bin(24*time.Hour) != Buckets-1 {
		t.Fatal("under- or overflow bin")
	}
}

func TestNilSeries(t *testing.T) {
	var s *Series
	s.ObserveRequest(t0, time.Millisecond, true)
	if w := s.Window(60, 1); len(w.Points) != 0 || s.Seconds() != 0 {
		t.Fatalf("nil series window %+v", w)
	}
}

// BenchmarkObserveRequest is the cost the sync handler pays per request,
// from every core at once.
func BenchmarkObserveRequest(b *testing.B) {
	s := New(Options{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.ObserveRequest(time.Now(), 3*time.Millisecond, false)
		}
	})
}

// BenchmarkWindowHour is one GET /api/timeseries of the whole hour.
func BenchmarkWindowHour(b *testing.B) {
	s := New(Options{})
	now := time.Now()
	for i := range MaxSeconds {
		s.ObserveRequest(now.Add(-time.Duration(i)*time.Second), time.Duration(i)*time.Microsecond, false)
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Window(MaxSeconds, 10)
	}
}
