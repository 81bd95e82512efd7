package connlimit

import "github.com/prometheus/client_golang/prometheus"

var (
	descOpen    = prometheus.NewDesc("synclane_http_connections_open", "Open connections of the public listener, upgraded sockets included.", nil, nil)
	descIdle    = prometheus.NewDesc("synclane_http_connections_idle", "Open connections of the public listener that are idle (between requests, or before the first).", nil, nil)
	descMax     = prometheus.NewDesc("synclane_http_connections_max", "The cap on open connections of the public listener (--max-connections; 0: none).", nil, nil)
	descRefused = prometheus.NewDesc("synclane_http_connections_refused_total", "Connections refused at the cap (answered 503 sync.rate_limited, or closed).", nil, nil)
	descEvicted = prometheus.NewDesc("synclane_http_connections_evicted_total", "Idle connections closed to admit a new one at the cap.", nil, nil)
)

// Descriptors sends the descriptors of the metrics Collect reports, for a
// collector that reports a Listener created later (Describe).
func Descriptors(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descOpen, descIdle, descMax, descRefused, descEvicted} {
		ch <- d
	}
}

// Describe implements prometheus.Collector.
func (l *Listener) Describe(ch chan<- *prometheus.Desc) { Descriptors(ch) }

// Collect implements prometheus.Collector: the listener's Stats as of the
// scrape.
func (l *Listener) Collect(ch chan<- prometheus.Metric) {
	st := l.Stats()
	ch <- prometheus.MustNewConstMetric(descOpen, prometheus.GaugeValue, float64(st.Open))
	ch <- prometheus.MustNewConstMetric(descIdle, prometheus.GaugeValue, float64(st.Idle))
	ch <- prometheus.MustNewConstMetric(descMax, prometheus.GaugeValue, float64(st.Max))
	ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(st.Refused))
	ch <- prometheus.MustNewConstMetric(descEvicted, prometheus.CounterValue, float64(st.Evicted))
}
