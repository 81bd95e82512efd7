package events

import (
	"container/list"
	"sync"
	"time"
)

// Sampler defaults.
const (
	// DefaultSampleInterval is the default SamplerOptions.Interval: a
	// source emits at most one sampled event per interval.
	DefaultSampleInterval = 10 * time.Second
	// DefaultSampleSources is the default SamplerOptions.Sources: the
	// distinct sources tracked at once.
	DefaultSampleSources = 64
	// MaxSampleSources caps SamplerOptions.Sources.
	MaxSampleSources = 65536
)

// OtherSource is the key under which a Sampler aggregates sources it
// cannot track (its table is full of sources active within the interval).
const OtherSource = "other"

// SamplerOptions configure a Sampler.
type SamplerOptions struct {
	// Interval is the shortest time between two events of one source
	// (<= 0: DefaultSampleInterval).
	Interval time.Duration
	// Sources bounds the distinct sources tracked (<= 0:
	// DefaultSampleSources; capped at MaxSampleSources).
	Sources int
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Sampler thins a stream of repeated events (a storm of refused
// authentications) to at most one event per source per interval, counting
// the ones it holds back. Its memory is bounded: it tracks at most Sources
// sources, least recently seen first out; a source is only forgotten once
// it has been quiet for an interval (its held-back count then moves to the
// "other" bucket), and a new source meeting a table of sources all active
// within the interval is counted under OtherSource, which is sampled like
// any source. So whatever the number of distinct sources, a Sampler lets
// through at most Sources+1 events per interval. Safe for concurrent use.
type Sampler struct {
	interval time.Duration
	max      int
	now      func() time.Time

	mu    sync.Mutex
	lru   *list.List // of *sampleEntry, most recently seen first
	byKey map[string]*list.Element
	other sampleEntry
}

type sampleEntry struct {
	key        string
	lastEmit   time.Time
	lastSeen   time.Time
	suppressed uint64
	emitted    bool
}

// NewSampler returns a sampler with opts (zero values take the defaults).
func NewSampler(opts SamplerOptions) *Sampler {
	if opts.Interval <= 0 {
		opts.Interval = DefaultSampleInterval
	}
	if opts.Sources <= 0 {
		opts.Sources = DefaultSampleSources
	}
	opts.Sources = min(opts.Sources, MaxSampleSources)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Sampler{interval: opts.Interval, max: opts.Sources, now: opts.Now,
		lru: list.New(), byKey: map[string]*list.Element{}, other: sampleEntry{key: OtherSource}}
}

// Sample records one occurrence from source. When emit is true the caller
// should publish an event for it, saying that suppressed earlier
// occurrences of the same bucket were held back since the bucket's last
// event; bucket is source, or OtherSource when the source could not be
// tracked. When emit is false the occurrence was counted and held back.
func (s *Sampler) Sample(source string) (emit bool, suppressed uint64, bucket string) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entry(source, now)
	e.lastSeen = now
	if e.emitted && now.Sub(e.lastEmit) < s.interval {
		e.suppressed++
		return false, 0, e.key
	}
	suppressed, e.suppressed = e.suppressed, 0
	e.emitted, e.lastEmit = true, now
	return true, suppressed, e.key
}

// entry finds or makes source's entry (the other bucket when the table is
// full of sources seen within the interval). Called with s.mu held.
func (s *Sampler) entry(source string, now time.Time) *sampleEntry {
	if el, ok := s.byKey[source]; ok {
		s.lru.MoveToFront(el)
		return el.Value.(*sampleEntry)
	}
	if source == OtherSource {
		return &s.other
	}
	if s.lru.Len() >= s.max {
		tail := s.lru.Back()
		old := tail.Value.(*sampleEntry)
		if now.Sub(old.lastSeen) < s.interval {
			return &s.other
		}
		s.other.suppressed += old.suppressed
		s.lru.Remove(tail)
		delete(s.byKey, old.key)
	}
	e := &sampleEntry{key: source}
	s.byKey[source] = s.lru.PushFront(e)
	return e
}

// Tracked returns the number of sources in the table (OtherSource not
// counted); it never exceeds SamplerOptions.Sources.
func (s *Sampler) Tracked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lru.Len()
}
