package engine

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/synclane/synclane/engine/retention"
	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/syncerr"
)

// Metrics are the engine's counters since start. All methods are safe for
// concurrent use.
type Metrics struct {
	requests                  atomic.Uint64
	applied, cached, rejected atomic.Uint64
	resets                    atomic.Uint64
	remoteCommits             atomic.Uint64
	latencyNanos              atomic.Uint64
	partitions                partition.Counters
	mu                        sync.Mutex
	errors                    map[syncerr.Code]uint64
}

func newMetrics() *Metrics { return &Metrics{errors: map[syncerr.Code]uint64{}} }

func (m *Metrics) observe(r *Reply, err error, d time.Duration) {
	m.requests.Add(1)
	m.latencyNanos.Add(uint64(d))
	if err != nil {
		m.mu.Lock()
		m.errors[syncerr.CodeOf(err)]++
		m.mu.Unlock()
		return
	}
	m.applied.Add(uint64(r.Applied))
	m.cached.Add(uint64(r.Cached))
	m.rejected.Add(uint64(r.Rejected))
	if r.Reset {
		m.resets.Add(1)
	}
}

// MetricsSnapshot is a point-in-time copy of the engine's counters.
// Its JSON keys (the admin API's "requests") are lowerCamelCase.
type MetricsSnapshot struct {
	// Requests counts Sync calls, answered or failed.
	Requests uint64 `json:"requests"`
	// CommitsApplied, CommitsCached and CommitsRejected count pushed
	// commits by outcome (cached: an idempotent retry answered from the
	// stored outcome).
	CommitsApplied  uint64 `json:"commitsApplied"`
	CommitsCached   uint64 `json:"commitsCached"`
	CommitsRejected uint64 `json:"commitsRejected"`
	// HeaderOnlyResets counts replies that were only a reset header (an
	// epoch reset or the schema floor).
	HeaderOnlyResets uint64 `json:"headerOnlyResets"`
	// RequestSeconds is the total time Sync calls took.
	RequestSeconds float64 `json:"requestSeconds"`
	// RemoteCommits counts commit notifications from other processes.
	RemoteCommits uint64 `json:"remoteCommits"`
	// Errors counts error answers by protocol code.
	Errors map[string]uint64 `json:"errors"`
	// Retention holds the pruning counters.
	Retention retention.Stats `json:"retention"`
	// ClientBindingWrites counts the durable writes of new clientId →
	// actor bindings; ClientBindings the bindings they wrote (fresh
	// clients bound in one batch share a write: Bindings ÷ Writes).
	ClientBindingWrites uint64 `json:"clientBindingWrites"`
	ClientBindings      uint64 `json:"clientBindings"`
	// PullGroups counts groups of bootstrap pulls that arrived together
	// and were served under one gate verify; GroupedPulls the pulls in
	// them.
	PullGroups   uint64 `json:"pullGroups"`
	GroupedPulls uint64 `json:"groupedPulls"`
}

// Metrics returns a snapshot of the engine's counters.
func (e *Engine) Metrics() MetricsSnapshot {
	m := e.metrics
	s := MetricsSnapshot{
		Requests: m.requests.Load(), CommitsApplied: m.applied.Load(), CommitsCached: m.cached.Load(),
		CommitsRejected: m.rejected.Load(), HeaderOnlyResets: m.resets.Load(),
		RequestSeconds: float64(m.latencyNanos.Load()) / 1e9, Errors: map[string]uint64{},
		RemoteCommits: m.remoteCommits.Load(), Retention: e.retention.Stats(),
		ClientBindingWrites: m.partitions.BindingWrites.Load(), ClientBindings: m.partitions.Bindings.Load(),
		PullGroups: m.partitions.PullGroups.Load(), GroupedPulls: m.partitions.GroupedPulls.Load(),
	}
	m.mu.Lock()
	for k, v := range m.errors {
		s.Errors[string(k)] = v
	}
	m.mu.Unlock()
	return s
}
