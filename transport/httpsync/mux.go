package httpsync

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/bodybudget"
	"github.com/synclane/synclane/transport/cors"
	"github.com/synclane/synclane/transport/httperr"
)

// MuxOptions configure NewMux: the handlers' Options (Auth required), the
// mount, the optional realtime and operation-watch hubs, the metrics
// registry and the CORS policy. ExampleNewMux wires one on a host's mux.
type MuxOptions struct {
	Options
	// Mount is the path prefix of the protocol routes ("" or "/" for the
	// root): sync, operations and their watches, realtime, segments,
	// blobs. GET /healthz, /readyz and /metrics stay at the root whatever
	// the Mount: they are the process's, not the API's, so probes and
	// scrapes aimed at the server's address keep working when the Mount
	// changes (with Mount "/api": /api/sync, but /healthz, not
	// /api/healthz). A proxy that exposes only the mount prefix reaches
	// them at the server's own address.
	Mount string
	// Ready reports readiness for GET /readyz (default: always ready).
	Ready func(ctx context.Context) error
	// Realtime, when set, serves GET <mount>/realtime (a realtime.Hub).
	Realtime http.Handler
	// Registerer receives synclane's collectors (the Mux's, the engine's,
	// the body budget's and Collectors). Nil: a private registry, served
	// by GET /metrics with the Go runtime and process collectors. A host's
	// Registerer: synclane's metrics join the host's; GET /metrics serves
	// that registry when it is also a prometheus.Gatherer (a
	// *prometheus.Registry is), and is not routed otherwise. NewMux panics
	// when a collector cannot be registered (a metric name already there:
	// a second Mux on one registry needs prometheus.WrapRegistererWith).
	Registerer prometheus.Registerer
	// Collectors are registered next to synclane's own (the realtime
	// hub's, the connection limiter's, the cluster's).
	Collectors []prometheus.Collector
	// OperationWatches, when set, serves GET <mount>/operations/realtime
	// (live query watches: an opwatch.Hub).
	OperationWatches http.Handler
	// CORS, when set, puts the protocol routes (sync, operations and their
	// watches, realtime, segments, blobs) behind the policy: preflights are
	// answered for them (an OPTIONS route is added where the route is
	// method-bound), allowed origins' answers carry the CORS headers, and
	// WebSocket upgrades from other origins are refused (see cors.Policy).
	// /healthz, /readyz and /metrics never carry CORS headers. Nil: none.
	CORS *cors.Policy
}

// Mux is the standalone server's router: POST <mount>/sync, POST
// <mount>/operations (remote operations), GET
// <mount>/realtime (when MuxOptions.Realtime is set), GET /healthz,
// GET /readyz and GET /metrics. Every request it answers, including those
// refused before the engine and those of routes added with Handle, is
// counted in synclane_http_requests_total.
type Mux struct {
	*http.ServeMux
	draining atomic.Bool
	metrics  *httpMetrics
	routes   map[string]string // ServeMux pattern → route label
}

// NewMux returns the router for eng. Its /metrics include the request-body
// budget of opts.BodyBudget (created here when nil).
func NewMux(eng *engine.Engine, opts MuxOptions) *Mux {
	if opts.BodyBudget == nil {
		opts.BodyBudget = bodybudget.New(bodybudget.Options{})
	}
	mount := strings.TrimRight(opts.Mount, "/")
	m := &Mux{ServeMux: http.NewServeMux(), metrics: newHTTPMetrics(), routes: map[string]string{
		mount + "/sync":                   RouteSync,
		"GET /healthz":                    RouteHealthz,
		"GET /readyz":                     RouteReadyz,
		"GET /metrics":                    RouteMetrics,
		"GET " + mount + "/segments/{id}": RouteSegments,
	}}
	// protocol registers a protocol route behind opts.CORS; a route bound
	// to methods gets an OPTIONS route of its own for the preflights.
	protocol := func(pattern string, h http.Handler) {
		if opts.CORS == nil {
			m.Handle(pattern, h)
			return
		}
		m.Handle(pattern, opts.CORS.Wrap(h))
		if method, path, ok := strings.Cut(pattern, " "); ok {
			m.routes["OPTIONS "+path] = m.routes[pattern]
			m.Handle("OPTIONS "+path, opts.CORS.Wrap(notAllowed(method)))
		}
	}
	protocol(mount+"/sync", NewHandler(eng, opts.Options))
	m.routes["POST "+mount+"/operations"] = RouteOperations
	protocol("POST "+mount+"/operations", NewOperationsHandler(eng, opts.Options))
	if opts.OperationWatches != nil {
		m.routes["GET "+mount+"/operations/realtime"] = RouteOperationWatches
		protocol("GET "+mount+"/operations/realtime", opts.OperationWatches)
	}
	if opts.Realtime != nil {
		m.routes["GET "+mount+"/realtime"] = RouteRealtime
		protocol("GET "+mount+"/realtime", opts.Realtime)
	}
	protocol("GET "+mount+"/segments/{id}", NewSegmentHandler(eng, opts.Options))
	if eng.Blobs().Enabled() { // blobs.go
		bh := NewBlobHandler(eng, opts.Options, mount)
		for _, p := range []string{mount + "/blobs/{id}", "POST " + mount + "/blobs/{id}/upload-grant"} {
			m.routes[p] = RouteBlobs
			protocol(p, bh)
		}
	}
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	m.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if m.draining.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("draining\n"))
			return
		}
		if opts.Ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			if err := opts.Ready(ctx); err != nil {
				// The probe is unauthenticated: it answers the error code,
				// never the cause (a driver's message names hosts, users
				// and databases); the log has the whole error.
				log.Warn("readiness check failed", zap.Error(err))
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = fmt.Fprintf(w, "not ready: %s\n", syncerr.As(err).Code)
				return
			}
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	m.serveMetrics(eng, opts)
	return m
}

// notAllowed answers a request that is not a CORS preflight on the OPTIONS
// route of a route bound to method: 405 with Allow.
func notAllowed(method string) http.Handler {
	allow := method
	if method == http.MethodGet {
		allow = "GET, HEAD"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		httperr.WriteStatus(w, http.StatusMethodNotAllowed, syncerr.New(syncerr.InvalidRequest, "use %s for %s", method, r.URL.Path))
	})
}

// ServeHTTP routes the request and records it in the HTTP metrics.
func (m *Mux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &recorder{statusWriter: statusWriter{ResponseWriter: w}}
	m.metrics.inFlight.Add(1)
	done := false
	defer func() {
		m.metrics.inFlight.Add(-1)
		status := rec.status
		switch {
		case status != 0:
		case done:
			status = http.StatusOK // the handler wrote nothing
		default:
			status = http.StatusInternalServerError // the handler panicked
		}
		route := m.routes[r.Pattern]
		if route == "" {
			route = RouteOther
		}
		kind := ""
		if route == RouteSync {
			kind = rec.kind
			if kind == "" {
				kind = KindOther // refused before the request was decoded
			}
		}
		m.metrics.observe(route, status, rec.code, kind, time.Since(start))
	}()
	m.ServeMux.ServeHTTP(rec, r)
	done = true
}

// Drain makes /readyz answer 503 "draining" so load balancers stop sending
// traffic while in-flight requests finish; every other route keeps serving.
func (m *Mux) Drain() { m.draining.Store(true) }

// Draining reports whether Drain was called.
func (m *Mux) Draining() bool { return m.draining.Load() }
