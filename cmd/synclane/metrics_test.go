package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/synclane/synclane/internal/promtext"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/realtime"
)

// After a push, a pull, a blob upload and download, a realtime socket, a
// refused request and a retention prune, serve's GET /metrics lints clean
// with promlint, carries the process and Go collectors and
// synclane_build_info, and no metric has a partition label.
func TestServeMetricsExposition(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := startTestControl(t, "--blob-store", t.TempDir())
	control(t, "PUT", base+"/_test/allowed-scopes/ada", `{"project_id":["p1"]}`, nil)
	c := newThingsClient(base, "ada", "c-ada")

	data := bytes.Repeat([]byte("metrics "), 100)
	id := blobstore.IDOf(data)
	if err := c.UploadBlob(ctx, id, "text/plain", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	ref := `{"blobId":"` + id + `","byteLength":` + strconv.Itoa(len(data)) + `}`
	if pr := pushRow(t, c, ssp2.Row{"a1", "p1", nil, nil, nil, nil, nil, ref, nil}, "cc1"); pr.Status != ssp2.CommitApplied {
		t.Fatalf("push: %+v", pr)
	}
	for i := range 6 {
		if pr := pushThing(t, c, fmt.Sprint("t", i), "p1", fmt.Sprint("c", i)); pr.Status != ssp2.CommitApplied {
			t.Fatalf("push %d: %+v", i, pr)
		}
	}
	var got bytes.Buffer
	if _, err := c.DownloadBlob(ctx, id, &got); err != nil || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("download: %v", err)
	}
	if _, err := c.Pull(ctx, ssp2.PullHeader{Accept: ssp2.AcceptInlineRows},
		&ssp2.Subscription{ID: "s", Table: "things", Scopes: map[string][]string{"project_id": {"p1"}}, Cursor: -1}); err != nil {
		t.Fatal(err)
	}
	s, err := realtime.Dial(ctx, base+"/realtime", "rt", realtime.DialOptions{Header: http.Header{"X-Actor": {"ada"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.CloseNow()
	if code, _ := get(t, base+"/sync"); code != http.StatusMethodNotAllowed {
		t.Fatalf("GET /sync = %d", code)
	}
	if err := (&httpsync.Client{URL: base + "/sync", ClientID: "anon"}).Handshake(ctx); err == nil {
		t.Fatal("a request without an actor was served")
	}
	var h struct {
		HorizonSeq int64 `json:"horizonSeq"`
	}
	if code := control(t, "POST", base+"/_test/prune", `{"activeWindowMs":0,"minRetainedCommits":2}`, &h); code != http.StatusOK || h.HorizonSeq == 0 {
		t.Fatalf("prune: %d %+v", code, h)
	}

	res, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	fams, err := promtext.Families(body)
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "partition" {
					t.Errorf("%s has a partition label", name)
				}
			}
		}
	}
	for _, name := range []string{"process_cpu_seconds_total", "process_resident_memory_bytes", "go_goroutines", "go_gc_duration_seconds",
		"synclane_build_info", "synclane_realtime_sockets", "synclane_http_connections_open", "synclane_blob_uploads_total",
		"synclane_retention_horizon_seq_max", "synclane_auth_failures_total", "synclane_sync_request_duration_seconds"} {
		if fams[name] == nil {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	for _, want := range []string{"synclane_realtime_sockets 1", "synclane_blob_uploads_total 1", "synclane_blob_downloads_total 1",
		"synclane_retention_horizon_partitions 1", "synclane_retention_horizon_seq_max " + strconv.FormatInt(h.HorizonSeq, 10),
		`synclane_http_requests_total{route="sync",status="405",code="sync.invalid_request"} 1`,
		`synclane_auth_failures_total{route="sync",reason="sync.auth_required"} 1`} {
		if !promtext.Has(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if bi := fams["synclane_build_info"]; bi != nil {
		labels := map[string]string{}
		for _, l := range bi.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if bi.GetMetric()[0].GetGauge().GetValue() != 1 || labels["goversion"] == "" || labels["version"] == "" || labels["revision"] == "" {
			t.Errorf("synclane_build_info %v = %v", labels, bi.GetMetric()[0].GetGauge().GetValue())
		}
	}
	if t.Failed() {
		t.Logf("exposition:\n%s", body)
	}
}
