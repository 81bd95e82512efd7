package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/synclane/synclane/internal/promtext"
)

// corsDo sends method to url with the headers kv (name, value, ...) and
// returns the answer with its body read.
func corsDo(t *testing.T, method, url string, kv ...string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(body)
}

// With --cors-origin (a comma-separated list and a repeated flag), every
// protocol route answers preflights of the listed origins (204, the
// methods, headers and --cors-max-age) and refuses others' (403
// sync.forbidden, no CORS header); answers to listed origins carry
// Access-Control-Allow-Origin and keep Vary: Origin next to the route's own
// Vary; /healthz and /metrics carry no CORS header; a plain OPTIONS is
// still 405; preflights are counted under their route.
func TestServeCORSRoutes(t *testing.T) {
	base := startServe(t, "--data", t.TempDir(), "--cors-origin", "https://app.example.com, http://localhost:5173",
		"--cors-origin", "https://third.example", "--cors-max-age", "2m")
	routes := []string{"/sync", "/operations", "/realtime", "/segments/seg-1", "/blobs/blob-1", "/blobs/blob-1/upload-grant"}
	for _, origin := range []string{"https://app.example.com", "http://localhost:5173", "https://third.example"} {
		for _, route := range routes {
			res, body := corsDo(t, http.MethodOptions, base+route, "Origin", origin,
				"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization,content-type,x-syncular-scopes")
			if res.StatusCode != http.StatusNoContent || res.Header.Get("Access-Control-Allow-Origin") != origin ||
				res.Header.Get("Access-Control-Max-Age") != "120" || res.Header.Get("Access-Control-Allow-Credentials") != "" ||
				!strings.Contains(res.Header.Get("Access-Control-Allow-Headers"), "X-Syncular-Scopes") ||
				!strings.Contains(res.Header.Get("Access-Control-Allow-Methods"), "PUT") {
				t.Errorf("preflight of %s from %s: %d %v %q", route, origin, res.StatusCode, res.Header, body)
			}
		}
	}
	for _, route := range routes {
		res, body := corsDo(t, http.MethodOptions, base+route, "Origin", "https://evil.example.net", "Access-Control-Request-Method", "POST")
		if res.StatusCode != http.StatusForbidden || res.Header.Get("Access-Control-Allow-Origin") != "" || !strings.Contains(body, `"sync.forbidden"`) {
			t.Errorf("preflight of %s from a refused origin: %d %v %q", route, res.StatusCode, res.Header, body)
		}
	}
	// An actual answer (here a refusal: no credentials) to a listed origin.
	res, _ := corsDo(t, http.MethodGet, base+"/segments/seg-1", "Origin", "https://app.example.com")
	vary := strings.Join(res.Header.Values("Vary"), ", ")
	if res.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" || !strings.Contains(vary, "Origin") ||
		!strings.Contains(vary, "X-Syncular-Scopes") || !strings.Contains(res.Header.Get("Access-Control-Expose-Headers"), "Retry-After") {
		t.Errorf("segment answer to a listed origin: %d %v", res.StatusCode, res.Header)
	}
	res, _ = corsDo(t, http.MethodGet, base+"/segments/seg-1", "Origin", "https://evil.example.net")
	if res.Header.Get("Access-Control-Allow-Origin") != "" || !strings.Contains(strings.Join(res.Header.Values("Vary"), ","), "Origin") {
		t.Errorf("segment answer to a refused origin: %d %v", res.StatusCode, res.Header)
	}
	for _, route := range []string{"/healthz", "/metrics"} {
		res, _ := corsDo(t, http.MethodGet, base+route, "Origin", "https://app.example.com")
		if res.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("%s carries CORS headers: %v", route, res.Header)
		}
	}
	res, body := corsDo(t, http.MethodOptions, base+"/segments/seg-1")
	if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != "GET, HEAD" || !strings.Contains(body, `"sync.invalid_request"`) {
		t.Errorf("plain OPTIONS: %d %v %q", res.StatusCode, res.Header, body)
	}
	// A WebSocket upgrade from a refused origin is refused before
	// authentication.
	res, body = corsDo(t, http.MethodGet, base+"/realtime?clientId=x", "Origin", "https://evil.example.net",
		"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, `"sync.forbidden"`) || !strings.Contains(body, "evil.example.net") {
		t.Errorf("upgrade from a refused origin: %d %q", res.StatusCode, body)
	}
	_, metrics := corsDo(t, http.MethodGet, base+"/metrics")
	for _, line := range []string{`synclane_http_requests_total{route="segments",status="204",code="none"} 3`,
		`synclane_http_requests_total{route="realtime",status="403",code="sync.forbidden"} 2`} {
		if !promtext.Has([]byte(metrics), line) {
			t.Errorf("metrics lack %s", line)
		}
	}
}

// Without --cors-origin nothing changes: no CORS header, a preflight is a
// 405 as before. SYNCLANE_CORS_ORIGIN takes the comma-separated list.
func TestServeCORSOffByDefaultAndFromEnv(t *testing.T) {
	base := startServe(t, "--data", t.TempDir())
	res, _ := corsDo(t, http.MethodOptions, base+"/sync", "Origin", "https://app.example.com", "Access-Control-Request-Method", "POST")
	if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Access-Control-Allow-Origin") != "" || res.Header.Get("Vary") != "" {
		t.Errorf("preflight without --cors-origin: %d %v", res.StatusCode, res.Header)
	}
	p := startServeProc(t, map[string]string{"SYNCLANE_CORS_ORIGIN": "https://a.example,https://b.example"}, "--data", t.TempDir())
	defer func() { p.cancel(); p.wait(t) }()
	res, _ = corsDo(t, http.MethodOptions, p.base+"/sync", "Origin", "https://b.example", "Access-Control-Request-Method", "POST")
	if res.StatusCode != http.StatusNoContent || res.Header.Get("Access-Control-Allow-Origin") != "https://b.example" || res.Header.Get("Access-Control-Max-Age") != "600" {
		t.Errorf("preflight with SYNCLANE_CORS_ORIGIN: %d %v", res.StatusCode, res.Header)
	}
}

// Bad CORS flags stop startup with exit 2 and a message naming the
// problem.
func TestServeCORSFlagErrors(t *testing.T) {
	cases := []struct {
		flags []string
		want  string
	}{
		{[]string{"--cors-origin", "*", "--cors-credentials"}, "credentials need exact origins"},
		{[]string{"--cors-origin", "*,https://a.example"}, "cannot be combined"},
		{[]string{"--cors-origin", "https://a.example/app"}, "no path"},
		{[]string{"--cors-origin", "null"}, `"null" is refused`},
		{[]string{"--cors-origin", ""}, "set but empty"},
		{[]string{"--cors-credentials"}, "need --cors-origin"},
		{[]string{"--cors-origin", "https://a.example", "--cors-max-age", "48h"}, "max age"},
	}
	for _, c := range cases {
		args := append([]string{"serve", "--data", t.TempDir()}, c.flags...)
		code, _, stderr := runCmdEnv(t, nil, args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.flags, code, stderr, c.want)
		}
	}
}
