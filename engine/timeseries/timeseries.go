// Package timeseries keeps the request rate, error rate and latency of the
// last hour in memory, for the admin console's chart.
//
// A Series is a ring of per-second buckets (MaxSeconds of them at most,
// allocated once at New: memory does not grow with traffic). Each bucket
// counts its requests and errors and holds a fixed-size latency histogram
// of Buckets log-spaced bins: bin 0 holds latencies below MinLatency, bin
// i (1 ≤ i < Buckets-1) holds [MinLatency·Ratio^(i-1), MinLatency·Ratio^i),
// and the last bin everything from MaxLatency up. Ratio is 2^(1/4), so a
// percentile read from the histogram (the geometric middle of the bin the
// rank falls in) is within a factor 2^(1/8) (about ±9%) of the true value
// between MinLatency (100 µs) and MaxLatency (about 105 s); below, it
// reports MinLatency, above, MaxLatency.
//
// A Series is safe for concurrent use; a nil *Series records nothing.
package timeseries

import (
	"math"
	"sync"
	"time"
)

// Histogram geometry (see the package comment).
const (
	// Buckets is the number of latency bins of one second.
	Buckets = 82
	// MinLatency is the lower bound of the first log-spaced bin.
	MinLatency = 100 * time.Microsecond
	// MaxSeconds is the most seconds a Series keeps (one hour), and its
	// default.
	MaxSeconds = 3600
)

// Ratio is the width of a log-spaced bin: its upper bound over its lower.
var Ratio = math.Pow(2, 0.25)

// MaxLatency is the lower bound of the overflow bin.
var MaxLatency = time.Duration(float64(MinLatency) * math.Pow(Ratio, Buckets-2))

// Options configure a Series.
type Options struct {
	// Seconds is how many of the newest seconds are kept (default and at
	// most MaxSeconds).
	Seconds int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// slot is one second's counters.
type slot struct {
	sec      int64 // unix second it holds; a slot holding another second is empty for this one
	requests uint32
	errors   uint32
	hist     [Buckets]uint32
}

// Series is the ring of per-second buckets. Create it with New.
type Series struct {
	now   func() time.Time
	mu    sync.Mutex
	slots []slot
}

// New returns an empty series keeping opts.Seconds seconds.
func New(opts Options) *Series {
	if opts.Seconds <= 0 || opts.Seconds > MaxSeconds {
		opts.Seconds = MaxSeconds
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Series{now: opts.Now, slots: make([]slot, opts.Seconds)}
	for i := range s.slots {
		s.slots[i].sec = math.MinInt64
	}
	return s
}

// Seconds is how many seconds the series keeps.
func (s *Series) Seconds() int {
	if s == nil {
		return 0
	}
	return len(s.slots)
}

// bin is the histogram bin of latency d.
func bin(d time.Duration) int {
	if d < MinLatency {
		return 0
	}
	i := 1 + int(math.Floor(math.Log(float64(d)/float64(MinLatency))/math.Log(Ratio)))
	return min(i, Buckets-1)
}

// binValue is the latency a percentile falling in bin i reports: the
// geometric middle of its bounds (MinLatency for bin 0, MaxLatency for
// the last).
func binValue(i int) time.Duration {
	switch {
	case i <= 0:
		return MinLatency
	case i >= Buckets-1:
		return MaxLatency
	}
	return time.Duration(float64(MinLatency) * math.Pow(Ratio, float64(i)-0.5))
}

// ObserveRequest records one request that ended at end after took; failed
// counts it as an error too. A request older than the kept window is
// dropped. It implements the sync handler's request observer.
func (s *Series) ObserveRequest(end time.Time, took time.Duration, failed bool) {
	if s == nil {
		return
	}
	sec := end.Unix()
	b := bin(took)
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := &s.slots[mod(sec, len(s.slots))]
	if sl.sec != sec {
		if sl.sec > sec {
			return // that second left the window
		}
		*sl = slot{sec: sec}
	}
	sl.requests++
	if failed {
		sl.errors++
	}
	sl.hist[b]++
}

func mod(a int64, n int) int {
	m := a % int64(n)
	if m < 0 {
		m += int64(n)
	}
	return int(m)
}

// Point is the requests of one step of a Window.
type Point struct {
	// AtMs is the start of the step (unix ms).
	AtMs int64 `json:"atMs"`
	// Requests and Errors count the step's requests and those answered
	// with an error (HTTP status 400 or above).
	Requests uint64 `json:"requests"`
	Errors   uint64 `json:"errors"`
	// P50Ms and P99Ms are the step's median and 99th percentile latency
	// estimated from its histogram, in milliseconds (0 without requests).
	P50Ms float64 `json:"p50Ms"`
	P99Ms float64 `json:"p99Ms"`
}

// Window is the newest seconds of a Series, in steps.
type Window struct {
	// EndMs is the end of the window (the start of the second after the
	// newest, unix ms); the window covers Seconds seconds before it.
	EndMs   int64 `json:"endMs"`
	Seconds int   `json:"seconds"`
	// StepSeconds is the width of one point.
	StepSeconds int `json:"stepSeconds"`
	// Points are the steps, oldest first (every step, requests or not).
	Points []Point `json:"points"`
	// Total sums the whole window.
	Total Point `json:"total"`
	// Precision is the relative error bound of the latency estimates
	// (0.09: within ±9%) between MinLatencyMs and MaxLatencyMs.
	Precision    float64 `json:"precision"`
	MinLatencyMs float64 `json:"minLatencyMs"`
	MaxLatencyMs float64 `json:"maxLatencyMs"`
}

// acc merges seconds into a point.
type acc struct {
	requests, errors uint64
	hist             [Buckets]uint64
}

func (a *acc) merge(b *acc) {
	a.requests += b.requests
	a.errors += b.errors
	for i, n := range b.hist {
		a.hist[i] += n
	}
}

func (a *acc) add(sl *slot) {
	a.requests += uint64(sl.requests)
	a.errors += uint64(sl.errors)
	for i, n := range sl.hist {
		a.hist[i] += uint64(n)
	}
}

// quantile is the latency below which q of the requests fall, estimated
// from the histogram (0 without requests).
func (a *acc) quantile(q float64) time.Duration {
	var n uint64
	for _, c := range a.hist {
		n += c
	}
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range a.hist {
		seen += c
		if seen >= rank {
			return binValue(i)
		}
	}
	return binValue(Buckets - 1)
}

func (a *acc) point(atMs int64) Point {
	return Point{AtMs: atMs, Requests: a.requests, Errors: a.errors,
		P50Ms: ms(a.quantile(0.50)), P99Ms: ms(a.quantile(0.99))}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Window returns the newest seconds seconds (at most Seconds; default
// all) ending with the current second, in steps of step seconds (at
// least 1; the window is rounded up to whole steps, at most Seconds).
func (s *Series) Window(seconds, step int) Window {
	w := Window{StepSeconds: max(step, 1), Precision: math.Round((math.Sqrt(Ratio)-1)*1000) / 1000,
		MinLatencyMs: ms(MinLatency), MaxLatencyMs: ms(MaxLatency), Points: []Point{}}
	if s == nil {
		return w
	}
	n := len(s.slots)
	if seconds <= 0 || seconds > n {
		seconds = n
	}
	w.StepSeconds = min(w.StepSeconds, seconds)
	steps := (seconds + w.StepSeconds - 1) / w.StepSeconds
	if steps*w.StepSeconds > n {
		steps = n / w.StepSeconds
	}
	w.Seconds = steps * w.StepSeconds
	end := s.now().Unix() + 1
	w.EndMs = end * 1000
	first := end - int64(w.Seconds)
	var total, a acc
	for i := range steps {
		// The lock is held for one step at a time, so a long window never
		// holds up the requests being recorded.
		a = acc{}
		start := first + int64(i*w.StepSeconds)
		s.mu.Lock()
		for sec := start; sec < start+int64(w.StepSeconds); sec++ {
			if sl := &s.slots[mod(sec, n)]; sl.sec == sec {
				a.add(sl)
			}
		}
		s.mu.Unlock()
		total.merge(&a)
		w.Points = append(w.Points, a.point(start*1000))
	}
	w.Total = total.point(first * 1000)
	return w
}
