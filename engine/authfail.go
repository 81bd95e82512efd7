package engine

import (
	"strconv"
	"sync"
	"time"

	"github.com/synclane/synclane/engine/events"
)

// MaxAuthFailureLabels bounds the distinct (route, reason) pairs
// AuthFailureCounts holds; pairs beyond it are counted under
// ("other", "other").
const MaxAuthFailureLabels = 64

// AuthFailureKey labels one count of refused authentications.
type AuthFailureKey struct {
	// Route is the kind of route refused (a fixed name per transport,
	// e.g. "sync", "admin").
	Route string
	// Reason is the refusal's error code.
	Reason string
}

// authFailures counts refused authentications and samples them into the
// event ring.
type authFailures struct {
	sampler *events.Sampler
	mu      sync.Mutex
	counts  map[AuthFailureKey]uint64
}

func newAuthFailures(opts events.SamplerOptions, now func() time.Time) *authFailures {
	if opts.Now == nil {
		opts.Now = now
	}
	return &authFailures{sampler: events.NewSampler(opts), counts: map[AuthFailureKey]uint64{}}
}

// ReportAuthFailure counts one refused authentication under (route,
// reason) and, sampled per source (the remote address; at most one event
// per source per Config.AuthFailureSampling.Interval), publishes ev as an
// auth.failed event to the ring: its Kind is set, and its Message gains how
// many failures of the source were held back since its last event. So a
// storm of failures cannot flush the ring's other events. route and reason
// must come from small fixed sets (they label a metric); the count table
// is bounded anyway (MaxAuthFailureLabels). Safe on a nil engine (no-op).
func (e *Engine) ReportAuthFailure(route, reason, source string, ev events.Event) {
	if e == nil {
		return
	}
	a := e.authFail
	k := AuthFailureKey{Route: route, Reason: reason}
	a.mu.Lock()
	if _, ok := a.counts[k]; !ok && len(a.counts) >= MaxAuthFailureLabels {
		k = AuthFailureKey{Route: "other", Reason: "other"}
	}
	a.counts[k]++
	a.mu.Unlock()
	ring := e.cfg.Events
	if ring == nil {
		return
	}
	emit, suppressed, bucket := a.sampler.Sample(source)
	if !emit {
		return
	}
	ev.Kind = events.AuthFailed
	if bucket == events.OtherSource {
		ev.Message += "; the server tracks too many failing sources: this event stands for all untracked ones"
	}
	if suppressed > 0 {
		ev.Suppressed = suppressed
		ev.Message = strconv.FormatUint(suppressed, 10) + " more from the same source held back since its last event; this one: " + ev.Message
	}
	ring.Emit(ev)
}

// AuthFailureCounts returns the refused authentications counted since
// start, by route and reason (empty on a nil engine).
func (e *Engine) AuthFailureCounts() map[AuthFailureKey]uint64 {
	if e == nil {
		return map[AuthFailureKey]uint64{}
	}
	a := e.authFail
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[AuthFailureKey]uint64, len(a.counts))
	for k, v := range a.counts {
		out[k] = v
	}
	return out
}
