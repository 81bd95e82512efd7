package httpsync

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
)

// NewCollector returns a prometheus.Collector of eng's counters (requests,
// commits, segments, blobs, actors, retention, auth failures, reactions,
// remote operations, checkpoints), read at scrape time from the engine's
// own counters: serving requests costs nothing more. A host that mounts
// the handlers itself (without a Mux) registers it on its registry. No
// metric carries a partition label.
func NewCollector(eng *engine.Engine) prometheus.Collector { return engineCollector{eng: eng} }

// serveMetrics registers the Mux's collectors on opts.Registerer (a
// private registry with the Go and process collectors when nil) and routes
// GET /metrics to it when it can be gathered.
func (m *Mux) serveMetrics(eng *engine.Engine, opts MuxOptions) {
	reg := opts.Registerer
	var gather prometheus.Gatherer
	if reg == nil {
		r := prometheus.NewRegistry()
		r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg, gather = r, r
	} else if g, ok := reg.(prometheus.Gatherer); ok {
		gather = g
	}
	reg.MustRegister(m.metrics, drainCollector{m}, NewCollector(eng), opts.BodyBudget)
	for _, c := range opts.Collectors {
		reg.MustRegister(c)
	}
	if gather == nil {
		return
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	// A collector that fails leaves its metrics out of the answer (and the
	// log says why) rather than failing the whole scrape.
	m.Handle("GET /metrics", promhttp.HandlerFor(gather, promhttp.HandlerOpts{
		ErrorLog:      zap.NewStdLog(log.Named("metrics")),
		ErrorHandling: promhttp.ContinueOnError,
	}))
}
