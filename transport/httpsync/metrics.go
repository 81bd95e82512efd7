package httpsync

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/metrics"
	"sort"
	"strconv"
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

// write renders the HTTP metrics in the Prometheus text format.
func (m *httpMetrics) write(w io.Writer) {
	m.mu.Lock()
	keys := make([]requestKey, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	reqs := make(map[requestKey]uint64, len(keys))
	for _, k := range keys {
		reqs[k] = m.requests[k]
	}
	hists := make(map[string]histogram, len(m.hist))
	for k, h := range m.hist {
		hists[k] = histogram{counts: append([]uint64(nil), h.counts...), sum: h.sum, count: h.count}
	}
	m.mu.Unlock()

	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.route != b.route {
			return a.route < b.route
		}
		if a.status != b.status {
			return a.status < b.status
		}
		return a.code < b.code
	})
	_, _ = fmt.Fprintf(w, "# HELP synclane_http_requests_total HTTP requests answered, by route (sync, realtime, healthz, readyz, metrics, other), status and protocol error code (none when the answer carries none).\n# TYPE synclane_http_requests_total counter\n")
	for _, k := range keys {
		_, _ = fmt.Fprintf(w, "synclane_http_requests_total{route=%q,status=\"%d\",code=%q} %d\n", k.route, k.status, k.code, reqs[k])
	}
	_, _ = fmt.Fprintf(w, "# HELP synclane_http_requests_in_flight HTTP requests being served.\n# TYPE synclane_http_requests_in_flight gauge\nsynclane_http_requests_in_flight %d\n", m.inFlight.Load())
	_, _ = fmt.Fprintf(w, "# HELP synclane_sync_request_duration_seconds Time from a sync request reaching the server's handler to the end of its answer, by kind (push, bootstrap, pull, other, forwarded).\n# TYPE synclane_sync_request_duration_seconds histogram\n")
	for _, kind := range requestKinds {
		h := hists[kind]
		var cum uint64
		for i, le := range durationBuckets {
			cum += h.counts[i]
			_, _ = fmt.Fprintf(w, "synclane_sync_request_duration_seconds_bucket{kind=%q,le=%q} %d\n", kind, strconv.FormatFloat(le, 'g', -1, 64), cum)
		}
		cum += h.counts[len(durationBuckets)]
		_, _ = fmt.Fprintf(w, "synclane_sync_request_duration_seconds_bucket{kind=%q,le=\"+Inf\"} %d\n", kind, cum)
		_, _ = fmt.Fprintf(w, "synclane_sync_request_duration_seconds_sum{kind=%q} %s\n", kind, strconv.FormatFloat(h.sum, 'g', -1, 64))
		_, _ = fmt.Fprintf(w, "synclane_sync_request_duration_seconds_count{kind=%q} %d\n", kind, h.count)
	}
}

// runtimeSamples are read on every scrape (runtime/metrics does not stop
// the world).
var runtimeSampleNames = []string{
	"/sched/goroutines:goroutines",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/gc/cycles/total:gc-cycles",
}

// writeRuntimeMetrics renders the Go runtime's goroutines, heap and GC
// count under the names Prometheus' Go collector uses.
func writeRuntimeMetrics(w io.Writer) {
	s := make([]metrics.Sample, len(runtimeSampleNames))
	for i, n := range runtimeSampleNames {
		s[i].Name = n
	}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	g := func(name, help string, val uint64) {
		_, _ = fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %d\n", name, help, name, name, val)
	}
	g("go_goroutines", "Number of goroutines that currently exist.", v(0))
	g("go_memstats_heap_alloc_bytes", "Heap bytes allocated and still in use (live and not yet swept objects).", v(1))
	g("go_memstats_heap_inuse_bytes", "Heap bytes in in-use spans.", v(1)+v(2))
	_, _ = fmt.Fprintf(w, "# HELP go_gc_cycles_total Completed GC cycles.\n# TYPE go_gc_cycles_total counter\ngo_gc_cycles_total %d\n", v(3))
	_, _ = fmt.Fprintf(w, "# HELP go_info Information about the Go environment.\n# TYPE go_info gauge\ngo_info{version=%q} 1\n", runtime.Version())
}

// recorder captures what a request was answered: status, protocol error
// code (noted through httperr.NoteCode) and the sync request kind (noted
// by Handler).
type recorder struct {
	http.ResponseWriter
	status int
	code   string
	kind   string
}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 && (status >= 200 || status == http.StatusSwitchingProtocols) {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (r *recorder) Flush() {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	_ = http.NewResponseController(r.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection (deadlines).
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

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
