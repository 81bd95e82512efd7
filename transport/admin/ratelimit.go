package admin

import (
	"container/list"
	"math"
	"sync"
	"time"
)

// Token-guess limits: the defaults of Options.TokenAttempts.
const (
	// DefaultTokenAttemptRate is the sustained rate of token attempts per
	// source (per second).
	DefaultTokenAttemptRate = 2.0
	// DefaultTokenAttemptBurst is how many attempts a source may make at
	// once before the rate applies.
	DefaultTokenAttemptBurst = 10
	// DefaultTokenAttemptSources bounds the sources the limiter tracks.
	DefaultTokenAttemptSources = 1024
)

// TokenAttempts limits guesses of the admin token per source address (the
// TCP peer's IP, an IPv6 address by its /64): a token bucket of Burst
// attempts refilled at Rate per second. Every request carrying an
// Authorization header takes one attempt; a request with the right token
// gives it back, so only wrong tokens drain the bucket. A source whose
// bucket is empty is answered 429 sync.rate_limited with Retry-After, even
// with the right token, until the bucket refills: the answer never tells a
// guesser whether the guess was right. Requests without the header (a
// console before login) are not limited. The table holds at most Sources
// sources; a source that cannot be tracked (the table is full of sources
// that have not refilled) shares one bucket with every other such source.
type TokenAttempts struct {
	// Rate is attempts per second (0: DefaultTokenAttemptRate; negative:
	// no limit).
	Rate float64
	// Burst is the bucket's size (<= 0: DefaultTokenAttemptBurst).
	Burst int
	// Sources bounds the table (<= 0: DefaultTokenAttemptSources).
	Sources int
}

// limiter is TokenAttempts' table of buckets.
type limiter struct {
	rate  float64
	burst float64
	max   int
	now   func() time.Time

	mu    sync.Mutex
	lru   *list.List // of *bucket, most recently used first
	byKey map[string]*list.Element
	other bucket
}

type bucket struct {
	key    string
	tokens float64
	at     time.Time // when tokens was computed
}

func newLimiter(o TokenAttempts, now func() time.Time) *limiter {
	if o.Rate < 0 {
		return nil
	}
	if o.Rate == 0 {
		o.Rate = DefaultTokenAttemptRate
	}
	if o.Burst <= 0 {
		o.Burst = DefaultTokenAttemptBurst
	}
	if o.Sources <= 0 {
		o.Sources = DefaultTokenAttemptSources
	}
	if now == nil {
		now = time.Now
	}
	return &limiter{rate: o.Rate, burst: float64(o.Burst), max: o.Sources, now: now,
		lru: list.New(), byKey: map[string]*list.Element{}, other: bucket{tokens: float64(o.Burst)}}
}

// refill brings b's tokens to now.
func (l *limiter) refill(b *bucket, now time.Time) {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = math.Min(l.burst, b.tokens+d.Seconds()*l.rate)
	}
	b.at = now
}

// bucketOf finds or makes source's bucket. Called with l.mu held.
func (l *limiter) bucketOf(source string, now time.Time) *bucket {
	if el, ok := l.byKey[source]; ok {
		l.lru.MoveToFront(el)
		return el.Value.(*bucket)
	}
	if l.lru.Len() >= l.max {
		tail := l.lru.Back()
		old := tail.Value.(*bucket)
		l.refill(old, now)
		if old.tokens < l.burst {
			return &l.other // every tracked source is still paying back
		}
		l.lru.Remove(tail)
		delete(l.byKey, old.key)
	}
	b := &bucket{key: source, tokens: l.burst, at: now}
	l.byKey[source] = l.lru.PushFront(b)
	return b
}

// take takes one attempt for source, returning its bucket (for giveBack).
// When the bucket is empty it returns nil and how long until one attempt
// is available again.
func (l *limiter) take(source string) (*bucket, time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucketOf(source, now)
	l.refill(b, now)
	if b.tokens >= 1 {
		b.tokens--
		return b, 0
	}
	return nil, time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

// giveBack returns to b the attempt a request with the right token took
// (no effect on a bucket evicted since: it had refilled).
func (l *limiter) giveBack(b *bucket) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refill(b, now)
	b.tokens = math.Min(l.burst, b.tokens+1)
}

// tracked is the number of sources in the table.
func (l *limiter) tracked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lru.Len()
}
