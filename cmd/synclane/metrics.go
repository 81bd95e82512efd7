package main

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/storage/postgres/homes"
	"github.com/synclane/synclane/transport/connlimit"
	"github.com/synclane/synclane/transport/peer"
	"github.com/synclane/synclane/transport/realtime"
)

// serveRegistry is the registry GET /metrics of serve answers: the
// process and Go runtime collectors, synclane_build_info, and (registered
// by the mux) synclane's own collectors.
func serveRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector(), buildInfo())
	return reg
}

// buildInfo is synclane_build_info{version,revision,goversion} 1, from
// the same build information `synclane version` prints (version.go).
func buildInfo() prometheus.Collector {
	bi, ok := debug.ReadBuildInfo()
	v := readBuildVersion(bi, ok, version)
	if v.Go == "unknown" {
		v.Go = runtime.Version()
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "synclane_build_info",
		Help:        "Always 1: the version, VCS revision and Go version the running binary was built from.",
		ConstLabels: prometheus.Labels{"version": v.Module, "revision": v.Revision, "goversion": v.Go}})
	g.Set(1)
	return g
}

// metricCollectors are the collectors serve adds to the mux's own: the
// hub's, the public listener's and, in cluster mode, the cluster counters
// and the relay's, and with several PostgreSQL databases their homes'.
func metricCollectors(hub *realtime.Hub, eng *engine.Engine, relay *peer.Relay, conn *connLimitConfig, h *homes.Homes) []prometheus.Collector {
	cs := []prometheus.Collector{hub, connCollector{conn}}
	if h != nil {
		cs = append(cs, &homesCollector{h: h}) // homes.go
	}
	if relay != nil {
		cs = append(cs, peer.NewCollector(eng), relay)
	}
	return cs
}

// peerCollectors are the member transport's collectors (none outside
// cluster mode).
func peerCollectors(mem *member, h *peer.Handler) []prometheus.Collector {
	if mem == nil || h == nil {
		return nil
	}
	return []prometheus.Collector{peer.NewTransportCollector(mem.peers, h)}
}

// connCollector reports the public listener's connection counters once
// wrap has created it (nothing before).
type connCollector struct{ c *connLimitConfig }

// Describe implements prometheus.Collector.
func (c connCollector) Describe(ch chan<- *prometheus.Desc) { connlimit.Descriptors(ch) }

// Collect implements prometheus.Collector.
func (c connCollector) Collect(ch chan<- prometheus.Metric) {
	if l := c.c.listener; l != nil {
		l.Collect(ch)
	}
}
