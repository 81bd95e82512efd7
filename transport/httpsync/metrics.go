package httpsync

import (
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/synclane/synclane/protocol/ssp2"
)

// Route labels of synclane_http_requests_total.
const (
	RouteSync     = "sync"
	RouteHealthz  = "healthz"
	RouteReadyz   = "readyz"
	RouteMetrics  = "metrics"
	RouteSegments = "segments"
	// RouteBlobs is <mount>/blobs/{id} and its upload-grant (blobs.go).
	RouteBlobs = "blobs"
	// RouteRealtime is GET <mount>/realtime (counted when the upgrade is
	// answered: 101 once the socket is open).
	RouteRealtime = "realtime"
	RouteOther    = "other"
)

// Kind labels of synclane_sync_request_duration_seconds (see RequestKind).
const (
	KindPush      = "push"
	KindBootstrap = "bootstrap"
	KindPull      = "pull"
	KindOther     = "other"
	// KindForwarded: a request this cluster member forwarded to its
	// partition's owner undecoded (the owner counts it by its kind).
	KindForwarded = "forwarded"
)

// codeNone is the code label of answers that carry no protocol error code
// (successes, and refusals of routes other than sync).
const codeNone = "none"

// durationBuckets are the upper bounds (seconds) of the request-duration
// histogram: fine below 100 ms where pulls live, coarse up to a minute for
// large bootstraps and slow clients.
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

var requestKinds = []string{KindPush, KindBootstrap, KindPull, KindOther, KindForwarded}

// RequestKind classifies a decoded sync request for the duration
// histogram: push when it carries commits, bootstrap when a subscription
// starts or continues a bootstrap (cursor < 0 or a bootstrapState), pull
// when it has other subscriptions, other otherwise (for example the epoch
// handshake).
func RequestKind(m *ssp2.Message) string {
	subs, boot := false, false
	for _, f := range m.Frames {
		switch f := f.(type) {
		case *ssp2.PushCommit:
			return KindPush
		case *ssp2.Subscription:
			subs = true
			if f.Cursor < 0 || f.BootstrapState != nil {
				boot = true
			}
		}
	}
	switch {
	case boot:
		return KindBootstrap
	case subs:
		return KindPull
	}
	return KindOther
}

type requestKey struct {
	route  string
	status int
	code   string
}

type histogram struct {
	counts []uint64 // per bucket, not cumulative; the last is +Inf
	sum    float64
	count  uint64
}

// httpMetrics counts every HTTP request the Mux answers.
type httpMetrics struct {
	inFlight atomic.Int64
	mu       sync.Mutex
	requests map[requestKey]uint64
	hist     map[string]*histogram
}

func newHTTPMetrics() *httpMetrics {
	m := &httpMetrics{requests: map[requestKey]uint64{}, hist: map[string]*histogram{}}
	for _, k := range requestKinds {
		m.hist[k] = &histogram{counts: make([]uint64, len(durationBuckets)+1)}
	}
	return m
}

// observe records one finished request; kind is "" for routes other than
// sync.
func (m *httpMetrics) observe(route string, status int, code, kind string, d time.Duration) {
	if code == "" {
		code = codeNone
	}
	s := d.Seconds()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[requestKey{route, status, code}]++
	if kind == "" {
		return
	}
	h := m.hist[kind]
	if h == nil {
		h = m.hist[KindOther]
	}
	i := sort.SearchFloat64s(durationBuckets, s) // first bound >= s: le is inclusive
	h.counts[i]++
	h.sum += s
	h.count++
}

// recorder captures what a request was answered: status (statusWriter,
// observe.go), protocol error code (noted through httperr.NoteCode) and
// the sync request kind (noted by Handler).
type recorder struct {
	statusWriter
	code string
	kind string
}

// NoteCode implements httperr.CodeNoter: the answer's protocol error code.
func (r *recorder) NoteCode(code string) { r.code = code }

// findRecorder returns the Mux's recorder under w, or nil when the handler
// is not served by a Mux.
func findRecorder(w http.ResponseWriter) *recorder {
	for range 16 {
		switch v := w.(type) {
		case *recorder:
			return v
		case interface{ Unwrap() http.ResponseWriter }:
			w = v.Unwrap()
		default:
			return nil
		}
	}
	return nil
}

// noteKind records the kind of a sync request for the metrics.
func noteKind(w http.ResponseWriter, kind string) {
	if r := findRecorder(w); r != nil {
		r.kind = kind
	}
}
