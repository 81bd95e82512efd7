package bodybudget

import "github.com/prometheus/client_golang/prometheus"

var (
	descLimit    = prometheus.NewDesc("synclane_inflight_body_limit_bytes", "The in-flight request-body budget (--max-inflight-body-bytes).", nil, nil)
	descInUse    = prometheus.NewDesc("synclane_inflight_body_bytes", "Request-body bytes charged to the budget now (POST /sync and socket rounds).", nil, nil)
	descWaiting  = prometheus.NewDesc("synclane_inflight_body_waiting", "Requests waiting for room in the budget now.", nil, nil)
	descWaits    = prometheus.NewDesc("synclane_inflight_body_waits_total", "Requests that waited for room in the budget.", nil, nil)
	descRefusals = prometheus.NewDesc("synclane_inflight_body_refusals_total", "Requests refused (503 / in-band sync.rate_limited) because no room came within the wait.", nil, nil)
)

// Describe implements prometheus.Collector.
func (b *Budget) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLimit, descInUse, descWaiting, descWaits, descRefusals} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: b's figures (Stats) as of the
// scrape; a nil Budget reports zeros.
func (b *Budget) Collect(ch chan<- prometheus.Metric) {
	st := b.Stats()
	ch <- prometheus.MustNewConstMetric(descLimit, prometheus.GaugeValue, float64(st.Limit))
	ch <- prometheus.MustNewConstMetric(descInUse, prometheus.GaugeValue, float64(st.InUse))
	ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, float64(st.Waiting))
	ch <- prometheus.MustNewConstMetric(descWaits, prometheus.CounterValue, float64(st.Waits))
	ch <- prometheus.MustNewConstMetric(descRefusals, prometheus.CounterValue, float64(st.Refusals))
}
