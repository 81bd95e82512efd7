package httpsync_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/internal/promtext"
	"github.com/synclane/synclane/protocol/opwire"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
)

// A storm of failed authentications (one source, then thousands of
// distinct ones) cannot flush the event ring: the events emitted before it
// are all still retained, the storm is sampled into a few auth.failed
// events carrying the held-back counts, and the metric counts every one.
func TestAuthFailureStormKeepsRing(t *testing.T) {
	s := schema.MustDemo()
	ring := events.NewRing(events.DefaultSize, nil)
	var clock atomic.Int64 // the sampler's clock, in seconds
	clock.Store(1_000_000)
	eng, err := engine.New(context.Background(), engine.Config{Schema: s, Backend: memory.New().Backend(),
		Resolver: engine.AllowAll(s), Events: ring, SlowRequest: -1,
		AuthFailureSampling: events.SamplerOptions{Now: func() time.Time { return time.Unix(clock.Load(), 0) }}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	mux := httpsync.NewMux(eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{}}})

	const real = 500
	for i := range real {
		ring.Emit(events.Event{Kind: events.PushRejected, Source: "test", Message: fmt.Sprintf("real event %d", i)})
	}
	fail := func(path, remote string) {
		t.Helper()
		method := http.MethodPost
		if strings.HasPrefix(path, "/segments/") {
			method = http.MethodGet
		}
		req := httptest.NewRequest(method, path, bytes.NewReader([]byte("x")))
		req.RemoteAddr = remote
		switch path {
		case "/sync":
			req.Header.Set("Content-Type", httpsync.ContentType)
		case "/operations":
			req.Header.Set("Content-Type", opwire.ContentType)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("%s %s from %s without an actor: status %d, want 401", method, path, remote, rec.Code)
		}
	}
	paths := []string{"/sync", "/segments/abc", "/operations"}
	const storm = 3000
	for i := range storm {
		fail(paths[i%len(paths)], "203.0.113.7:40000")
	}
	for i := range storm {
		fail(paths[i%len(paths)], fmt.Sprintf("10.%d.%d.%d:1234", i/65536, (i/256)%256, i%256))
	}
	for i := range storm { // and over IPv6 (one /64: one source, see TestSourceOf)
		fail("/sync", fmt.Sprintf("[2001:db8::%x]:1234", i+1))
	}

	all := ring.Recent(0, 0)
	seen := map[string]bool{}
	auths := 0
	for _, e := range all {
		switch e.Kind {
		case events.PushRejected:
			seen[e.Message] = true
		case events.AuthFailed:
			auths++
		}
	}
	for i := range real {
		if !seen[fmt.Sprintf("real event %d", i)] {
			t.Fatalf("real event %d was flushed out of the ring by the auth failure storm (%d auth.failed events retained)", i, auths)
		}
	}
	// One source, one IPv6 /64 and at most DefaultSampleSources+1 buckets
	// for the distinct sources (the table also holds the first two).
	if maxEvents := events.DefaultSampleSources + 1; auths == 0 || auths > maxEvents {
		t.Fatalf("%d auth.failed events for %d failures, want 1..%d", auths, 3*storm, maxEvents)
	}
	// The counts held back are reported by the source's next event, once
	// the interval has passed.
	clock.Add(int64(events.DefaultSampleInterval / time.Second))
	after := ring.Stats().LastSeq
	fail("/sync", "203.0.113.7:40001")
	next := ring.Recent(after, 0)
	if len(next) != 1 || next[0].Kind != events.AuthFailed || next[0].Suppressed != storm-1 {
		t.Fatalf("the source's next failure after the interval: events %+v, want one auth.failed with suppressed %d", next, storm-1)
	}
	counts := eng.AuthFailureCounts()
	var total uint64
	for k, v := range counts {
		if k.Reason != "sync.auth_required" {
			t.Fatalf("auth failures counted under %+v, want reason sync.auth_required", k)
		}
		total += v
	}
	if total != 3*storm+1 {
		t.Fatalf("metric counted %d auth failures, want %d (%v)", total, 3*storm+1, counts)
	}
	for _, route := range []string{"sync", "segments", "operations"} {
		if counts[engine.AuthFailureKey{Route: route, Reason: "sync.auth_required"}] == 0 {
			t.Fatalf("no auth failures counted for route %s: %v", route, counts)
		}
	}

	// The metric is served.
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	want := fmt.Sprintf("synclane_auth_failures_total{route=\"sync\",reason=\"sync.auth_required\"} %d", counts[engine.AuthFailureKey{Route: "sync", Reason: "sync.auth_required"}])
	if !promtext.Has(rec.Body.Bytes(), want) {
		t.Fatalf("/metrics lacks %q", want)
	}
}
