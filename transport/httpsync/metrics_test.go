package httpsync_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/internal/promtext"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
)

// scrape returns the samples of a Prometheus text exposition, keyed by
// promtext.Key (labels sorted by name).
func scrape(t *testing.T, url string) (map[string]float64, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	out, err := promtext.Samples(body)
	if err != nil {
		t.Fatalf("exposition: %v\n%s", err, body)
	}
	return out, string(body)
}

func encodeRequest(t *testing.T, epoch string, frames ...ssp2.Frame) []byte {
	t.Helper()
	h := &ssp2.ReqHeader{ClientID: "metrics", SchemaVersion: 1}
	if epoch != "" {
		h.LogEpoch = &epoch
	}
	b, err := ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: append([]ssp2.Frame{h}, frames...)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Every request is counted by route, status and code, including those
// refused before the engine; sync durations land in a cumulative histogram
// by kind.
func TestMetricsCountEveryRequest(t *testing.T) {
	s := schema.MustDemo()
	eng, err := engine.New(context.Background(), engine.Config{Schema: s, Backend: memory.New().Backend(), Resolver: engine.AllowAll(s)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	srv := httptest.NewServer(httpsync.NewMux(eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{}, MaxBodyBytes: 4 << 10}}))
	t.Cleanup(srv.Close)

	send := func(method, path, contentType, actor string, body []byte) int {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, bytes.NewReader(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if actor != "" {
			req.Header.Set("X-Actor", actor)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	ct := httpsync.ContentType
	// The first request: the epoch handshake (kind other, 200).
	c := &httpsync.Client{URL: srv.URL + "/sync", ClientID: "metrics", Header: http.Header{"X-Actor": {"ada"}}}
	if err := c.Handshake(context.Background()); err != nil {
		t.Fatal(err)
	}
	handshake := encodeRequest(t, "", &ssp2.PullHeader{Accept: 1})
	sub := func(cursor int64) []byte {
		return encodeRequest(t, c.Epoch, &ssp2.PullHeader{Accept: 1},
			&ssp2.Subscription{ID: "s", Table: "todos", Scopes: map[string][]string{"list_id": {"L"}}, Cursor: cursor})
	}
	push := encodeRequest(t, c.Epoch, &ssp2.PushCommit{ClientCommitID: "c1", Operations: []ssp2.Operation{{Table: "todos", RowID: "r1", Op: ssp2.OpDelete}}})

	steps := []struct {
		name, method, path, contentType, actor string
		body                                   []byte
		status                                 int
	}{
		{"wrong method", http.MethodGet, "/sync", "", "ada", nil, 405},
		{"wrong content type", http.MethodPost, "/sync", "application/json", "ada", handshake, 415},
		{"no actor", http.MethodPost, "/sync", ct, "", handshake, 401},
		{"too large", http.MethodPost, "/sync", ct, "ada", make([]byte, 8<<10), 413},
		{"malformed", http.MethodPost, "/sync", ct, "ada", []byte("{\"not\":\"ssp2\"}"), 400},
		{"malformed again", http.MethodPost, "/sync", ct, "ada", []byte("SSP2"), 400},
		{"push", http.MethodPost, "/sync", ct, "ada", push, 200},
		{"bootstrap", http.MethodPost, "/sync", ct, "ada", sub(-1), 200},
		{"pull", http.MethodPost, "/sync", ct, "ada", sub(3), 200},
		{"healthz", http.MethodGet, "/healthz", "", "", nil, 200},
		{"readyz", http.MethodGet, "/readyz", "", "", nil, 200},
		{"unknown path", http.MethodGet, "/nope", "", "", nil, 404},
		{"wrong method on healthz", http.MethodPost, "/healthz", "", "", nil, 405},
	}
	for _, st := range steps {
		if got := send(st.method, st.path, st.contentType, st.actor, st.body); got != st.status {
			t.Fatalf("%s: HTTP %d, want %d", st.name, got, st.status)
		}
	}
	m, body := scrape(t, srv.URL+"/metrics")
	want := map[string]float64{
		`synclane_http_requests_total{route="sync",status="405",code="sync.invalid_request"}`: 1,
		`synclane_http_requests_total{route="sync",status="415",code="sync.invalid_request"}`: 1,
		`synclane_http_requests_total{route="sync",status="401",code="sync.auth_required"}`:   1,
		`synclane_http_requests_total{route="sync",status="413",code="sync.invalid_request"}`: 1,
		`synclane_http_requests_total{route="sync",status="400",code="sync.invalid_request"}`: 2,
		`synclane_http_requests_total{route="sync",status="200",code="none"}`:                 4,
		`synclane_http_requests_total{route="healthz",status="200",code="none"}`:              1,
		`synclane_http_requests_total{route="readyz",status="200",code="none"}`:               1,
		`synclane_http_requests_total{route="other",status="404",code="none"}`:                1,
		`synclane_http_requests_total{route="other",status="405",code="none"}`:                1,
		// One of each kind answered, plus the six refusals (kind other:
		// refused before the request was decoded) and the handshake.
		`synclane_sync_request_duration_seconds_count{kind="push"}`:      1,
		`synclane_sync_request_duration_seconds_count{kind="bootstrap"}`: 1,
		`synclane_sync_request_duration_seconds_count{kind="pull"}`:      1,
		`synclane_sync_request_duration_seconds_count{kind="other"}`:     7,
		`synclane_http_requests_in_flight`:                               1, // the scrape itself
		`synclane_draining`:                                              0,
		// The engine saw only the four requests that reached it.
		`synclane_requests_total`: 4,
	}
	for k, v := range want {
		if got, ok := m[promtext.Key(k)]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	var total float64
	for k, v := range m {
		if strings.HasPrefix(k, "synclane_http_requests_total{") {
			total += v
		}
	}
	if total != float64(len(steps)+1) {
		t.Errorf("synclane_http_requests_total sums to %v, want %d (one per request)", total, len(steps)+1)
	}
	// Histograms: buckets cumulative, +Inf equals _count.
	fams, err := promtext.Families([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	hists := map[string]*dto.Histogram{}
	for _, mm := range fams["synclane_sync_request_duration_seconds"].GetMetric() {
		for _, l := range mm.GetLabel() {
			if l.GetName() == "kind" {
				hists[l.GetValue()] = mm.GetHistogram()
			}
		}
	}
	for _, kind := range []string{"push", "bootstrap", "pull", "other"} {
		h := hists[kind]
		if h == nil {
			t.Errorf("%s: no histogram", kind)
			continue
		}
		prev, n := 0.0, 0
		for _, b := range h.GetBucket() {
			n++
			if v := float64(b.GetCumulativeCount()); v < prev {
				t.Errorf("%s: bucket le=%g = %v below the previous %v (not cumulative)", kind, b.GetUpperBound(), v, prev)
			} else {
				prev = v
			}
		}
		inf := m[promtext.Key(fmt.Sprintf(`synclane_sync_request_duration_seconds_bucket{kind=%q,le="+Inf"}`, kind))]
		count := m[promtext.Key(fmt.Sprintf(`synclane_sync_request_duration_seconds_count{kind=%q}`, kind))]
		if n < 10 || inf != prev || inf != count {
			t.Errorf("%s: %d buckets, +Inf %v, last %v, _count %v", kind, n, inf, prev, count)
		}
		if _, ok := m[promtext.Key(fmt.Sprintf(`synclane_sync_request_duration_seconds_sum{kind=%q}`, kind))]; !ok {
			t.Errorf("%s: no _sum", kind)
		}
	}
	// Runtime metrics.
	if m["go_goroutines"] < 1 || m["go_memstats_heap_alloc_bytes"] <= 0 || m["go_memstats_heap_inuse_bytes"] < m["go_memstats_heap_alloc_bytes"] {
		t.Errorf("runtime metrics: goroutines %v, heap alloc %v, heap in use %v", m["go_goroutines"], m["go_memstats_heap_alloc_bytes"], m["go_memstats_heap_inuse_bytes"])
	}
	if _, ok := m["go_gc_duration_seconds_count"]; !ok {
		t.Error("no go_gc_duration_seconds_count (GC cycles)")
	}
	if t.Failed() {
		t.Logf("exposition:\n%s", body)
	}
	// The scrape is counted once it is answered.
	if m2, _ := scrape(t, srv.URL+"/metrics"); m2[promtext.Key(`synclane_http_requests_total{route="metrics",status="200",code="none"}`)] != 1 {
		t.Errorf("the first scrape was not counted")
	}
}

func TestRequestKind(t *testing.T) {
	sub := func(cursor int64, state string) *ssp2.Subscription {
		s := &ssp2.Subscription{ID: "s", Table: "t", Cursor: cursor}
		if state != "" {
			s.BootstrapState = []byte(state)
		}
		return s
	}
	hdr := &ssp2.ReqHeader{ClientID: "c", SchemaVersion: 1}
	cases := []struct {
		want   string
		frames []ssp2.Frame
	}{
		{httpsync.KindOther, []ssp2.Frame{hdr, &ssp2.PullHeader{}}},
		{httpsync.KindPull, []ssp2.Frame{hdr, &ssp2.PullHeader{}, sub(5, ""), sub(0, "")}},
		{httpsync.KindBootstrap, []ssp2.Frame{hdr, &ssp2.PullHeader{}, sub(5, ""), sub(-1, "")}},
		{httpsync.KindBootstrap, []ssp2.Frame{hdr, &ssp2.PullHeader{}, sub(7, `{"page":2}`)}},
		{httpsync.KindPush, []ssp2.Frame{hdr, &ssp2.PushCommit{ClientCommitID: "x"}, &ssp2.PullHeader{}, sub(-1, "")}},
	}
	for i, c := range cases {
		if got := httpsync.RequestKind(&ssp2.Message{Frames: c.frames}); got != c.want {
			t.Errorf("case %d: %s, want %s", i, got, c.want)
		}
	}
}
