package httpsync_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/timeseries"
	"github.com/synclane/synclane/internal/promtext"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
)

// Every sync request reaches Options.Observer once, errors (status 400 or
// above) flagged, and the Mux's metrics still see the answer's code
// through the observer's writer.
func TestObserverSeesEverySyncRequest(t *testing.T) {
	sch := schema.MustDemo()
	eng, err := engine.New(context.Background(), engine.Config{Schema: sch, Backend: memory.New().Backend(), Resolver: engine.AllowAll(sch)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	series := timeseries.New(timeseries.Options{Seconds: 60})
	srv := httptest.NewServer(httpsync.NewMux(eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{}, Observer: series}}))
	t.Cleanup(srv.Close)

	var sent atomic.Int64
	hc := &http.Client{Transport: countingRT{n: &sent}}
	c := &httpsync.Client{URL: srv.URL + "/sync", ClientID: "c1", HTTP: hc, Header: http.Header{"X-Actor": {"ada"}, "X-Partition": {"p1"}}}
	for range 3 {
		if _, err := c.Pull(context.Background(), ssp2.PullHeader{Accept: ssp2.AcceptInlineRows, LimitSnapshotRows: 100, MaxSnapshotPages: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for _, req := range []func() (*http.Response, error){
		func() (*http.Response, error) { return http.Get(srv.URL + "/sync") },                         // 405
		func() (*http.Response, error) { return http.Post(srv.URL+"/sync", "text/plain", nil) },       // 415
		func() (*http.Response, error) { return http.Get(srv.URL + "/healthz") },                      // not a sync request
		func() (*http.Response, error) { return http.Post(srv.URL+"/operations", "text/plain", nil) }, // nor this
	} {
		res, err := req()
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	w := series.Window(60, 60)
	if w.Total.Requests != uint64(sent.Load())+2 || sent.Load() < 3 || w.Total.Errors != 2 || w.Total.P50Ms <= 0 {
		t.Fatalf("series total %+v, want %d requests, 2 errors", w.Total, sent.Load()+2)
	}
	res, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if !promtext.Has(b, `synclane_http_requests_total{route="sync",status="415",code="sync.invalid_request"} 1`) {
		t.Fatalf("the Mux's metrics lost the code under the observer:\n%s", b)
	}
}

// countingRT counts the requests it carries.
type countingRT struct{ n *atomic.Int64 }

func (c countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}
