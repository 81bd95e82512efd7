package httpsync

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// The HTTP metrics are counted on the request path into plain maps under
// one mutex (metrics.go) and turned into constant metrics when scraped, so
// a request pays nothing for Prometheus.
var (
	descHTTPRequests = prometheus.NewDesc("synclane_http_requests_total",
		"HTTP requests answered, by route (sync, realtime, healthz, readyz, metrics, other), status and protocol error code (none when the answer carries none).",
		[]string{"route", "status", "code"}, nil)
	descHTTPInFlight = prometheus.NewDesc("synclane_http_requests_in_flight",
		"HTTP requests being served.", nil, nil)
	descSyncDuration = prometheus.NewDesc("synclane_sync_request_duration_seconds",
		"Time from a sync request reaching the server's handler to the end of its answer, by kind (push, bootstrap, pull, other, forwarded).",
		[]string{"kind"}, nil)
	descDraining = prometheus.NewDesc("synclane_draining",
		"Whether the server is draining (1: /readyz answers 503, shutdown under way).", nil, nil)
)

// Describe implements prometheus.Collector.
func (m *httpMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- descHTTPRequests
	ch <- descHTTPInFlight
	ch <- descSyncDuration
}

// Collect implements prometheus.Collector: a snapshot of the counters,
// every duration histogram (one per kind, empty ones included).
func (m *httpMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	reqs := make(map[requestKey]uint64, len(m.requests))
	for k, v := range m.requests {
		reqs[k] = v
	}
	hists := make(map[string]histogram, len(m.hist))
	for k, h := range m.hist {
		hists[k] = histogram{counts: append([]uint64(nil), h.counts...), sum: h.sum, count: h.count}
	}
	m.mu.Unlock()

	for k, v := range reqs {
		ch <- prometheus.MustNewConstMetric(descHTTPRequests, prometheus.CounterValue, float64(v), k.route, strconv.Itoa(k.status), k.code)
	}
	ch <- prometheus.MustNewConstMetric(descHTTPInFlight, prometheus.GaugeValue, float64(m.inFlight.Load()))
	for _, kind := range requestKinds {
		h := hists[kind]
		buckets := make(map[float64]uint64, len(durationBuckets))
		var cum uint64
		for i, le := range durationBuckets {
			cum += h.counts[i]
			buckets[le] = cum
		}
		ch <- prometheus.MustNewConstHistogram(descSyncDuration, h.count, h.sum, buckets, kind)
	}
}

// drainCollector reports synclane_draining of a Mux.
type drainCollector struct{ m *Mux }

// Describe implements prometheus.Collector.
func (d drainCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descDraining }

// Collect implements prometheus.Collector.
func (d drainCollector) Collect(ch chan<- prometheus.Metric) {
	v := 0.0
	if d.m.draining.Load() {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(descDraining, prometheus.GaugeValue, v)
}
