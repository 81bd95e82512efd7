// Package events is synclane's ring of recent server events (pushes
// rejected, auth failures, gate refusals, actor restarts and passivations,
// slow requests, operator actions) with live subscribers.
//
// Any package may publish: Emit on a *Ring is safe for concurrent use,
// never blocks on a subscriber and is a no-op on a nil *Ring, so callers
// need no "is it enabled" check. The ring keeps the last Size events
// (default DefaultSize, at most MaxSize); older ones are overwritten.
//
// Subscribers each get a buffered channel (default DefaultSubscriberBuffer
// events, at most MaxSubscriberBuffer). Emit never waits for one: a
// subscriber whose buffer is full is dropped (its channel closed, Dropped
// reports true, Stats counts it) and must subscribe again, reading the
// events it missed with Recent(afterSeq).
//
// A Sampler thins a storm of like events (the engine samples auth.failed
// with one) to one per source per interval over a bounded table of
// sources, so the storm cannot flush the ring.
package events

import (
	"sync"
	"time"
	"unicode/utf8"
)

// Kind names what happened. New features add their own kinds; consumers
// must accept kinds they do not know.
type Kind string

// Kinds emitted by synclane itself.
const (
	// PushRejected is a commit the server rejected (Code and Message say why).
	PushRejected Kind = "push.rejected"
	// AuthFailed is a request refused by its transport's authenticator
	// (or the admin token check). Sampled: at most one per remote address
	// per interval, Suppressed counting the ones held back (see Sampler and
	// engine.Config.AuthFailureSampling).
	AuthFailed Kind = "auth.failed"
	// GateRefused is a request refused by the serve gate
	// (sync.schema_not_ready).
	GateRefused Kind = "gate.refused"
	// RequestFailed is any other request that failed before its reply.
	RequestFailed Kind = "request.failed"
	// SlowRequest is a request that took longer than the slow threshold.
	SlowRequest Kind = "request.slow"
	// ActorRestarted is a partition actor restarted after a panic.
	ActorRestarted Kind = "actor.restarted"
	// ActorPassivated is an idle partition actor stopped.
	ActorPassivated Kind = "actor.passivated"
	// EpochRotated is a partition's log epoch rotated by an operator.
	EpochRotated Kind = "partition.epoch_rotated"
	// MaintenanceRun is one maintenance pass run by an operator.
	MaintenanceRun Kind = "maintenance.run"
	// BlobMissing is a blob whose metadata said present while the byte
	// store had no bytes for it (found on a download, an upload or by the
	// sweep): it was marked missing until an upload stores the bytes
	// again. Message names the blob and where it was found.
	BlobMissing Kind = "blob.missing"
)

// Event is one server event. Seq is assigned by Emit: it grows by one per
// event of the ring, so a gap in what a reader saw means missed events.
type Event struct {
	Seq       uint64    `json:"seq"`
	At        time.Time `json:"at"`
	Kind      Kind      `json:"kind"`
	Partition string    `json:"partition,omitempty"`
	Actor     string    `json:"actor,omitempty"`
	Client    string    `json:"client,omitempty"`
	// Code is the protocol error code when one applies.
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	// DurationMs is set for timed events (slow requests).
	DurationMs float64 `json:"durationMs,omitempty"`
	// Source names the emitter ("engine", "httpsync", "realtime", "actors",
	// "admin", ...).
	Source string `json:"source,omitempty"`
	// Suppressed is set on a sampled event (auth.failed, see Sampler): how
	// many like it from the same source were held back since the source's
	// previous event.
	Suppressed uint64 `json:"suppressed,omitempty"`
}

// Limits of a Ring.
const (
	DefaultSize             = 1024
	MaxSize                 = 65536
	DefaultSubscriberBuffer = 256
	MaxSubscriberBuffer     = 4096
	// MaxSubscribers bounds the live subscribers of a ring; Subscribe
	// beyond it returns nil.
	MaxSubscribers = 64
	// MaxMessageBytes bounds an event's Message (longer ones are cut).
	MaxMessageBytes = 512
)

// Ring is a bounded ring of recent events with live subscribers. The zero
// value is not usable; call NewRing. A nil *Ring accepts Emit and answers
// empty reads.
type Ring struct {
	now func() time.Time

	mu      sync.Mutex
	buf     []Event
	next    uint64 // seq of the next event (first is 1)
	subs    map[*Subscription]struct{}
	emitted uint64
	dropped uint64 // subscribers dropped for being slow
}

// NewRing returns a ring keeping the last size events (<= 0: DefaultSize;
// capped at MaxSize). now is the clock (nil: time.Now).
func NewRing(size int, now func() time.Time) *Ring {
	if size <= 0 {
		size = DefaultSize
	}
	size = min(size, MaxSize)
	if now == nil {
		now = time.Now
	}
	return &Ring{now: now, buf: make([]Event, 0, size), next: 1, subs: map[*Subscription]struct{}{}}
}

// Emit records ev (stamping Seq, and At when zero) and hands it to every
// subscriber without blocking. It holds the ring's lock for a copy and a
// non-blocking send per subscriber.
func (r *Ring) Emit(ev Event) {
	if r == nil {
		return
	}
	if len(ev.Message) > MaxMessageBytes {
		cut := MaxMessageBytes
		for cut > 0 && !utf8.RuneStart(ev.Message[cut]) {
			cut--
		}
		ev.Message = ev.Message[:cut]
	}
	if ev.At.IsZero() {
		ev.At = r.now()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ev.Seq = r.next
	r.next++
	r.emitted++
	if len(r.buf) < cap(r.buf) {
		r.buf = append(r.buf, ev)
	} else {
		r.buf[int((ev.Seq-1)%uint64(cap(r.buf)))] = ev
	}
	for s := range r.subs {
		select {
		case s.ch <- ev:
		default:
			// Too slow: drop it rather than wait (the push path never
			// blocks on a reader).
			delete(r.subs, s)
			s.dropped = true
			close(s.ch)
			r.dropped++
		}
	}
}

// Recent returns up to limit retained events with Seq > afterSeq, oldest
// first (limit <= 0 or above the ring's size: the ring's size).
func (r *Ring) Recent(afterSeq uint64, limit int) []Event {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.buf)
	if limit <= 0 || limit > n {
		limit = n
	}
	first := r.next - uint64(n) // seq of the oldest retained event
	start := max(first, afterSeq+1)
	var out []Event
	for seq := start; seq < r.next && len(out) < limit; seq++ {
		out = append(out, r.buf[int((seq-1)%uint64(cap(r.buf)))])
	}
	return out
}

// Stats are a ring's counters.
type Stats struct {
	Size        int    `json:"size"`
	Retained    int    `json:"retained"`
	Emitted     uint64 `json:"emitted"`
	Subscribers int    `json:"subscribers"`
	// DroppedSubscribers counts subscribers dropped for being too slow.
	DroppedSubscribers uint64 `json:"droppedSubscribers"`
	LastSeq            uint64 `json:"lastSeq"`
}

// Stats returns the ring's counters (zero for a nil ring).
func (r *Ring) Stats() Stats {
	if r == nil {
		return Stats{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return Stats{Size: cap(r.buf), Retained: len(r.buf), Emitted: r.emitted, Subscribers: len(r.subs),
		DroppedSubscribers: r.dropped, LastSeq: r.next - 1}
}

// Subscription is one live subscriber. Its channel is closed when it is
// dropped for being slow or unsubscribed with Close.
type Subscription struct {
	r       *Ring
	ch      chan Event
	dropped bool // guarded by r.mu
}

// Subscribe registers a live subscriber with a buffer of buffer events
// (<= 0: DefaultSubscriberBuffer; capped at MaxSubscriberBuffer). It
// returns nil on a nil ring or when MaxSubscribers are live.
func (r *Ring) Subscribe(buffer int) *Subscription {
	if r == nil {
		return nil
	}
	if buffer <= 0 {
		buffer = DefaultSubscriberBuffer
	}
	buffer = min(buffer, MaxSubscriberBuffer)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.subs) >= MaxSubscribers {
		return nil
	}
	s := &Subscription{r: r, ch: make(chan Event, buffer)}
	r.subs[s] = struct{}{}
	return s
}

// C returns the events channel; it is closed when the subscription ends.
func (s *Subscription) C() <-chan Event { return s.ch }

// Dropped reports whether the ring dropped the subscriber for being slow.
func (s *Subscription) Dropped() bool {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	return s.dropped
}

// Close ends the subscription (idempotent; a no-op after a drop).
func (s *Subscription) Close() {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if _, ok := s.r.subs[s]; ok {
		delete(s.r.subs, s)
		close(s.ch)
	}
}
