package httpsync_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/internal/promtext"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
)

func newPromEngine(t *testing.T) *engine.Engine {
	t.Helper()
	s := schema.MustDemo()
	eng, err := engine.New(context.Background(), engine.Config{Schema: s, Backend: memory.New().Backend(), Resolver: engine.AllowAll(s)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return eng
}

func getBody(t *testing.T, url string) (int, []byte) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

func lint(t *testing.T, body []byte) {
	t.Helper()
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// A host registry passed as MuxOptions.Registerer gets synclane's metrics
// next to the host's own, served by the host's promhttp handler; the
// Mux's own GET /metrics serves that same registry.
func TestMetricsJoinHostRegistry(t *testing.T) {
	eng := newPromEngine(t)
	reg := prometheus.NewRegistry()
	hostCounter := prometheus.NewCounter(prometheus.CounterOpts{Name: "host_jobs_total", Help: "Jobs the host ran."})
	reg.MustRegister(hostCounter)
	hostCounter.Add(3)

	mux := httpsync.NewMux(eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{}}, Registerer: reg})
	host := http.NewServeMux()
	host.Handle("/api/", http.StripPrefix("/api", mux))
	host.Handle("GET /host-metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := httptest.NewServer(host)
	t.Cleanup(srv.Close)

	c := &httpsync.Client{URL: srv.URL + "/api/sync", ClientID: "embed", Header: http.Header{"X-Actor": {"ada"}}}
	if err := c.Handshake(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Push(context.Background(), &ssp2.PushCommit{ClientCommitID: "c1", Operations: []ssp2.Operation{{Table: "todos", RowID: "r1", Op: ssp2.OpDelete}}}); err != nil {
		t.Fatal(err)
	}
	code, body := getBody(t, srv.URL+"/host-metrics")
	if code != http.StatusOK {
		t.Fatalf("host /metrics: %d", code)
	}
	for _, want := range []string{
		"host_jobs_total 3",
		"synclane_requests_total 2",
		`synclane_http_requests_total{route="sync",status="200",code="none"} 2`,
		`synclane_sync_request_duration_seconds_count{kind="push"} 1`,
		"synclane_draining 0",
		"synclane_inflight_body_bytes 0",
	} {
		if !promtext.Has(body, want) {
			t.Errorf("host exposition lacks %q", want)
		}
	}
	// A host registry gets no Go or process collector from synclane (the
	// host registers its own).
	if s, _ := promtext.Samples(body); s["go_goroutines"] != 0 {
		t.Errorf("synclane registered the Go collector on the host's registry")
	}
	lint(t, body)
	if code, own := getBody(t, srv.URL+"/api/metrics"); code != http.StatusOK || !promtext.Has(own, "host_jobs_total 3") {
		t.Errorf("the Mux's /metrics (HTTP %d) does not serve the host's registry:\n%s", code, own)
	}
	if t.Failed() {
		t.Logf("exposition:\n%s", body)
	}
}

// A Registerer that cannot be gathered (here two Muxes told apart by a
// constant label) gets the metrics; the Mux routes no /metrics of its own.
func TestMetricsWrappedRegisterer(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, name := range []string{"a", "b"} {
		mux := httpsync.NewMux(newPromEngine(t), httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{}},
			Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"server": name}, reg)})
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusNotFound {
			t.Errorf("%s: GET /metrics = %d, want 404 (the host serves its registry)", name, rec.Code)
		}
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	servers := map[string]bool{}
	for _, f := range fams {
		if f.GetName() != "synclane_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "server" {
					servers[l.GetValue()] = true
				}
			}
		}
	}
	if !servers["a"] || !servers["b"] {
		t.Errorf("synclane_requests_total by server: %v, want a and b", servers)
	}
}

// Without a Registerer the Mux serves a private registry: synclane's
// metrics with the Go runtime and process collectors, lint-clean.
func TestMetricsPrivateRegistryLints(t *testing.T) {
	srv := httptest.NewServer(httpsync.NewMux(newPromEngine(t), httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{}}}))
	t.Cleanup(srv.Close)
	c := &httpsync.Client{URL: srv.URL + "/sync", ClientID: "lint", Header: http.Header{"X-Actor": {"ada"}}}
	if err := c.Handshake(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, _ = getBody(t, srv.URL+"/sync") // a refusal: 405 with a code
	code, body := getBody(t, srv.URL+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	s, err := promtext.Samples(body)
	if err != nil {
		t.Fatal(err)
	}
	if s["go_goroutines"] < 1 || s["synclane_requests_total"] != 1 {
		t.Errorf("go_goroutines %v, synclane_requests_total %v", s["go_goroutines"], s["synclane_requests_total"])
	}
	lint(t, body)
}

// The engine's collector reports only metrics it describes (a pedantic
// registry checks every metric against Describe).
func TestEngineCollectorPedantic(t *testing.T) {
	eng := newPromEngine(t)
	mux := httpsync.NewMux(eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{}}})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := &httpsync.Client{URL: srv.URL + "/sync", ClientID: "pedantic", Header: http.Header{"X-Actor": {"ada"}}}
	if err := c.Handshake(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, err := promtext.Collect(httpsync.NewCollector(eng))
	if err != nil {
		t.Fatal(err)
	}
	if !promtext.Has(b, "synclane_requests_total 1") {
		t.Errorf("engine collector:\n%s", b)
	}
}
