package demo

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The handler answers the page at / with the mount written into it, the
// assets under /demo/, and 404 for anything else it is routed.
func TestHandler(t *testing.T) {
	mux := http.NewServeMux()
	h := Handler("/api/")
	for _, p := range Routes {
		mux.Handle(p, h)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, tc := range []struct {
		path, wantType, wantBody string
		status                   int
	}{
		{"/", "text/html; charset=utf-8", `<meta name="synclane-mount" content="/api">`, http.StatusOK},
		{"/demo/client.js", "text/javascript; charset=utf-8", "export class SyncClient", http.StatusOK},
		{"/demo/ssp2.js", "text/javascript; charset=utf-8", "export function encodeRequest", http.StatusOK},
		{"/demo/demo.css", "text/css; charset=utf-8", ":root", http.StatusOK},
		{"/demo/", "", "", http.StatusNotFound},
		{"/demo/index.html", "", "", http.StatusNotFound},
		{"/demo/nope.js", "", "", http.StatusNotFound},
		{"/other", "", "", http.StatusNotFound},
	} {
		res, err := http.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.status {
			t.Errorf("GET %s: status %d, want %d", tc.path, res.StatusCode, tc.status)
			continue
		}
		if tc.status != http.StatusOK {
			continue
		}
		if got := res.Header.Get("Content-Type"); got != tc.wantType {
			t.Errorf("GET %s: content type %q, want %q", tc.path, got, tc.wantType)
		}
		if !strings.Contains(string(body), tc.wantBody) {
			t.Errorf("GET %s: body lacks %q", tc.path, tc.wantBody)
		}
	}
}
