package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/httpsync"
)

// TestServeSegmentOptions drives the real server: --inline-segment-max-bytes
// 0 sends every bootstrap by ref, --signed-url-ttl issues signed URLs whose
// lifetime POST /_test/signed-url-ttl changes at runtime (0: born expired),
// and --segment-ttl with the virtual clock expires segments
// (404 sync.segment_expired).
func TestServeSegmentOptions(t *testing.T) {
	base := startTestControl(t, "--clock-ms", "1700000000000", "--inline-segment-max-bytes", "0",
		"--segment-ttl", "1h", "--signed-url-ttl", "5m")
	if code := control(t, "PUT", base+"/_test/allowed-scopes/ada", `{"project_id":["p1"]}`, nil); code != 200 {
		t.Fatalf("grant: %d", code)
	}
	c := newThingsClient(base, "ada", "c-ada")
	pushThing(t, c, "i1", "p1", "commit-1")
	sub := &ssp2.Subscription{ID: "s", Table: "things", Scopes: map[string][]string{"project_id": {"p1"}}, Cursor: -1}
	pull := func() *ssp2.SegmentRef {
		t.Helper()
		resp, err := c.Pull(context.Background(), ssp2.PullHeader{Accept: ssp2.AcceptInlineRows | ssp2.AcceptRefRows | ssp2.AcceptSignedURLs}, sub)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range resp.Frames {
			if r, ok := f.(*ssp2.SegmentRef); ok {
				return r
			}
		}
		t.Fatal("no SEGMENT_REF although --inline-segment-max-bytes is 0")
		return nil
	}
	get := func(u string, hdr map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	ref := pull()
	if ref.URL == nil || !strings.HasPrefix(*ref.URL, base+"/segments/"+ref.SegmentID+"?st=") || *ref.URLExpiresAtMs != 1700000000000+300_000 {
		t.Fatalf("signed URL %v %v", ref.URL, ref.URLExpiresAtMs)
	}
	if code, _ := get(*ref.URL, nil); code != 200 {
		t.Fatalf("signed download: %d", code)
	}
	if code := control(t, "POST", base+"/_test/signed-url-ttl", `{"ttlSeconds":0}`, nil); code != 200 {
		t.Fatalf("signed-url-ttl: %d", code)
	}
	if code := control(t, "POST", base+"/_test/signed-url-ttl", `{"ttlSeconds":901}`, nil); code != 400 {
		t.Fatalf("signed-url-ttl above 15 min: %d", code)
	}
	born := pull()
	if code, body := get(*born.URL, nil); code != 403 || !strings.Contains(body, string(syncerr.Forbidden)) {
		t.Fatalf("born-expired URL: %d %s", code, body)
	}
	direct := map[string]string{"X-Actor": "ada", httpsync.ScopesHeader: `{"project_id":["p1"]}`}
	if code, _ := get(base+"/segments/"+ref.SegmentID, direct); code != 200 {
		t.Fatalf("direct download: %d", code)
	}
	if code := control(t, "POST", base+"/_test/clock/advance", `{"ms":3600000}`, nil); code != 200 {
		t.Fatalf("advance: %d", code)
	}
	if code, body := get(base+"/segments/"+ref.SegmentID, direct); code != 404 || !strings.Contains(body, string(syncerr.SegmentExpired)) {
		t.Fatalf("after the segment TTL: %d %s", code, body)
	}
}

// TestTestControlSignedURLTTLNeedsFlag: without --signed-url-ttl the
// control is refused.
func TestTestControlSignedURLTTLNeedsFlag(t *testing.T) {
	base := startTestControl(t)
	if code := control(t, "POST", base+"/_test/signed-url-ttl", `{"ttlSeconds":60}`, nil); code != http.StatusConflict {
		t.Fatalf("without --signed-url-ttl: %d, want 409", code)
	}
}
