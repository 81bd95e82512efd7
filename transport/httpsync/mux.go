package httpsync

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/retention"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/transport/bodybudget"
	"github.com/synclane/synclane/transport/cors"
	"github.com/synclane/synclane/transport/httperr"
)

// MuxOptions configure NewMux.
type MuxOptions struct {
	Options
	// Mount is the path prefix of the sync routes ("" or "/" for the root).
	Mount string
	// Ready reports readiness for GET /readyz (default: always ready).
	Ready func(ctx context.Context) error
	// Realtime, when set, serves GET <mount>/realtime (a realtime.Hub).
	Realtime http.Handler
	// Metrics, when set, add their lines to GET /metrics.
	Metrics []func(io.Writer)
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
	m.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		m.metrics.write(w)
		d := 0
		if m.draining.Load() {
			d = 1
		}
		_, _ = fmt.Fprintf(w, "# HELP synclane_draining Whether the server is draining (1: /readyz answers 503, shutdown under way).\n# TYPE synclane_draining gauge\nsynclane_draining %d\n", d)
		writeRuntimeMetrics(w)
		opts.BodyBudget.WriteMetrics(w)
		writeMetrics(r.Context(), w, eng)
		for _, f := range opts.Metrics {
			f(w)
		}
	})
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
	rec := &recorder{ResponseWriter: w}
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

// writeMetrics renders the engine's counters in the Prometheus text format.
func writeMetrics(ctx context.Context, w http.ResponseWriter, eng *engine.Engine) {
	s := eng.Metrics()
	a := eng.ActorStats()
	p := func(name, help string, v any) {
		_, _ = fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s %v\n", name, help, name, name, v)
	}
	p("synclane_requests_total", "Sync requests that reached the engine (synclane_http_requests_total counts every HTTP request).", s.Requests)
	p("synclane_commits_applied_total", "Pushed commits applied.", s.CommitsApplied)
	p("synclane_commits_cached_total", "Pushed commits answered from the idempotency cache.", s.CommitsCached)
	p("synclane_commits_rejected_total", "Pushed commits rejected.", s.CommitsRejected)
	p("synclane_header_only_resets_total", "Epoch-reset and schema-floor answers.", s.HeaderOnlyResets)
	p("synclane_request_seconds_total", "Total time spent serving sync requests.", s.RequestSeconds)
	ss := eng.Segments().Stats()
	p("synclane_segments_built_total", "Segments built and stored.", ss.Built)
	p("synclane_segments_reused_total", "Bootstrap pages answered with a segment already stored (no rebuild).", ss.Reused)
	p("synclane_segments_served_total", "Segment downloads served.", ss.Served)
	p("synclane_segment_bytes_served_total", "Uncompressed bytes of segment downloads served.", ss.ServedBytes)
	p("synclane_segments_expired_total", "Segments whose bytes the expiry sweep dropped.", ss.Expired)
	p("synclane_segment_store_bypassed_total", "Inline pages served without the segment store because it failed (not stored for reuse).", ss.Bypassed)
	p("synclane_bootstrap_pages_encoded_total", "Bootstrap pages and SQLite images encoded from rows (a page answered from a stored segment or a kept inline page adds none).", ss.Encoded)
	p("synclane_inline_pages_reused_total", "Inline bootstrap pages answered from memory instead of being encoded again.", ss.InlineReused)
	qs := eng.Segments().QuotaStats()
	p("synclane_segments_evicted_total", "Segments evicted to keep the segment store within --segment-store-max-bytes/--segment-store-max-files.", qs.Evicted)
	p("synclane_segments_refused_total", "Built segments not kept because the segment store was full of pinned (recently handed out) segments.", qs.Refused)
	_, _ = fmt.Fprintf(w, "# HELP synclane_segment_store_bytes Bytes the segment store holds (each segment once), as of the last build or sweep.\n# TYPE synclane_segment_store_bytes gauge\nsynclane_segment_store_bytes %d\n", qs.StoreBytes)
	_, _ = fmt.Fprintf(w, "# HELP synclane_segment_store_files Segments (files, on the embedded store) the segment store holds, as of the last build or sweep.\n# TYPE synclane_segment_store_files gauge\nsynclane_segment_store_files %d\n", qs.StoreFiles)
	bs := eng.Blobs().Stats()
	p("synclane_blob_uploads_total", "Blob uploads stored (or confirmed already stored).", bs.Uploads)
	p("synclane_blob_uploads_refused_total", "Blob uploads refused (hash mismatch, too large, busy, storage failure).", bs.UploadsRefused)
	p("synclane_blob_bytes_in_total", "Blob upload bytes read.", bs.BytesIn)
	p("synclane_blob_downloads_total", "Blob downloads started.", bs.Downloads)
	p("synclane_blob_bytes_out_total", "Blob bytes sent.", bs.BytesOut)
	p("synclane_blob_sweep_passes_total", "Orphan blob sweeps run.", bs.SweepPasses)
	p("synclane_blobs_swept_total", "Orphan blobs removed.", bs.Swept)
	p("synclane_blobs_missing_total", "Blobs whose metadata said present while their bytes were missing from the byte store, marked missing until re-uploaded.", bs.Missing)
	p("synclane_blob_presence_checks_total", "Present blobs the sweep checked the byte store still holds.", bs.PresenceChecks)
	p("synclane_blob_push_refusals_total", "Pushed commits rejected with blob.not_found (a row referenced a blob not uploaded).", bs.PushesRefused)
	p("synclane_partition_actors_spawned_total", "Partition actors spawned.", a.Spawned)
	p("synclane_partition_actors_passivated_total", "Partition actors passivated when idle.", a.Passivated)
	p("synclane_partition_actor_restarts_total", "Partition actor restarts after a crash.", a.Restarts)
	p("synclane_group_commit_batches_total", "Push batches applied in one storage transaction.", a.Batches)
	p("synclane_group_commit_requests_total", "Push requests applied through group commit.", a.BatchedJobs)
	_, _ = fmt.Fprintf(w, "# HELP synclane_partition_actors_live Live partition actors.\n# TYPE synclane_partition_actors_live gauge\nsynclane_partition_actors_live %d\n", a.LiveActors)
	_, _ = fmt.Fprintf(w, "# HELP synclane_request_errors_total Requests refused, by protocol code.\n# TYPE synclane_request_errors_total counter\n")
	codes := make([]string, 0, len(s.Errors))
	for c := range s.Errors {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	for _, c := range codes {
		_, _ = fmt.Fprintf(w, "synclane_request_errors_total{code=%q} %d\n", c, s.Errors[c])
	}
	writeRetentionMetrics(w, s.Retention)
	writeAuthMetrics(w, eng)
	writeReactionMetrics(ctx, w, eng)
	writeOperationMetrics(w, eng)
	// Backfill progress, read from storage so every process reports every
	// runner's progress.
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cps, err := eng.Backend().Checkpoints.ReadCheckpoints(cctx)
	if err != nil || len(cps) == 0 {
		return
	}
	_, _ = fmt.Fprintf(w, "# HELP synclane_checkpoint_watermark Highest source commit seq a backfill projection reflects.\n# TYPE synclane_checkpoint_watermark gauge\n")
	for _, c := range cps {
		_, _ = fmt.Fprintf(w, "synclane_checkpoint_watermark{partition=%q,name=%q} %d\n", c.Partition, c.Name, c.Watermark)
	}
	_, _ = fmt.Fprintf(w, "# HELP synclane_checkpoint_observed_rows Source rows a backfill has projected.\n# TYPE synclane_checkpoint_observed_rows gauge\n")
	for _, c := range cps {
		_, _ = fmt.Fprintf(w, "synclane_checkpoint_observed_rows{partition=%q,name=%q} %d\n", c.Partition, c.Name, c.ObservedRows)
	}
	_, _ = fmt.Fprintf(w, "# HELP synclane_checkpoint_activated Whether a backfill checkpoint is activated (1) or pending (0).\n# TYPE synclane_checkpoint_activated gauge\n")
	for _, c := range cps {
		v := 0
		if c.State == storage.CheckpointActivated {
			v = 1
		}
		_, _ = fmt.Fprintf(w, "synclane_checkpoint_activated{partition=%q,name=%q,schema_version=\"%d\"} %d\n", c.Partition, c.Name, c.SchemaVersion, v)
	}
}

// writeRetentionMetrics renders the pruning counters, the last maintenance
// pass and the horizon of every partition this process pruned.
func writeRetentionMetrics(w io.Writer, r retention.Stats) {
	_, _ = fmt.Fprintf(w, "# HELP synclane_retention_passes_total Maintenance passes, by result (ran, or skipped: another process held the maintenance lock).\n# TYPE synclane_retention_passes_total counter\n")
	_, _ = fmt.Fprintf(w, "synclane_retention_passes_total{result=\"ran\"} %d\nsynclane_retention_passes_total{result=\"skipped\"} %d\n", r.Passes, r.SkippedPasses)
	_, _ = fmt.Fprintf(w, "# HELP synclane_retention_last_pass_timestamp_seconds When the last maintenance pass ended (engine clock; 0 before any).\n# TYPE synclane_retention_last_pass_timestamp_seconds gauge\nsynclane_retention_last_pass_timestamp_seconds %g\n", float64(r.LastPassMs)/1000)
	for _, c := range []struct {
		name, help string
		v          uint64
	}{
		{"synclane_retention_pruned_commits_total", "Commits pruned by this process.", r.Commits},
		{"synclane_retention_pruned_changes_total", "Changes pruned by this process.", r.Changes},
		{"synclane_retention_pruned_idempotency_records_total", "Idempotency records pruned by this process.", r.IdempotencyRecords},
	} {
		_, _ = fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", c.name, c.help, c.name, c.name, c.v)
	}
	if len(r.Horizons) == 0 {
		return
	}
	_, _ = fmt.Fprintf(w, "# HELP synclane_retention_horizon_seq Horizon of each partition this process pruned, as it last saw it.\n# TYPE synclane_retention_horizon_seq gauge\n")
	parts := make([]string, 0, len(r.Horizons))
	for p := range r.Horizons {
		parts = append(parts, p)
	}
	sort.Strings(parts)
	for _, p := range parts {
		_, _ = fmt.Fprintf(w, "synclane_retention_horizon_seq{partition=%q} %d\n", p, r.Horizons[p])
	}
}
