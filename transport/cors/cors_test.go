package cors_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/cors"
	"github.com/synclane/synclane/transport/httperr"
)

func TestNewValidates(t *testing.T) {
	cases := []struct {
		name string
		opts cors.Options
		err  string // "" when valid
	}{
		{"one origin", cors.Options{Origins: []string{"https://app.example.com"}}, ""},
		{"origin with port", cors.Options{Origins: []string{"http://127.0.0.1:5173"}}, ""},
		{"app shell scheme", cors.Options{Origins: []string{"capacitor://localhost"}}, ""},
		{"wildcard alone", cors.Options{Origins: []string{"*"}}, ""},
		{"credentials with exact origins", cors.Options{Origins: []string{"https://a.example", "https://b.example"}, AllowCredentials: true}, ""},
		{"no origin", cors.Options{}, "no origin"},
		{"wildcard with credentials", cors.Options{Origins: []string{"*"}, AllowCredentials: true}, "credentials need exact origins"},
		{"wildcard with others", cors.Options{Origins: []string{"*", "https://a.example"}}, "cannot be combined"},
		{"null", cors.Options{Origins: []string{"null"}}, `"null" is refused`},
		{"no scheme", cors.Options{Origins: []string{"app.example.com"}}, "want scheme://host"},
		{"path", cors.Options{Origins: []string{"https://app.example.com/app"}}, "no path"},
		{"trailing slash", cors.Options{Origins: []string{"https://app.example.com/"}}, "ends with a slash"},
		{"query", cors.Options{Origins: []string{"https://app.example.com?x=1"}}, "no path"},
		{"user", cors.Options{Origins: []string{"https://u@app.example.com"}}, "no path"},
		{"pattern", cors.Options{Origins: []string{"https://*.example.com"}}, "patterns are not supported"},
		{"max age too long", cors.Options{Origins: []string{"https://a.example"}, MaxAge: 25 * time.Hour}, "max age"},
		{"max age under a second", cors.Options{Origins: []string{"https://a.example"}, MaxAge: time.Millisecond}, "max age"},
		{"extra header with a comma", cors.Options{Origins: []string{"https://a.example"}, ExtraHeaders: []string{"A, B"}}, "not a header name"},
	}
	for _, c := range cases {
		_, err := cors.New(c.opts)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.err)
		}
	}
}

func TestNormalizeOrigin(t *testing.T) {
	for in, want := range map[string]string{
		"https://App.Example.COM":     "https://app.example.com",
		"HTTPS://app.example.com:443": "https://app.example.com",
		"http://localhost:80":         "http://localhost",
		"http://localhost:8080":       "http://localhost:8080",
		"https://app.example.com:80":  "https://app.example.com:80",
		"http://[::1]:3000":           "http://[::1]:3000",
		"tauri://localhost":           "tauri://localhost",
	} {
		got, err := cors.NormalizeOrigin(in)
		if err != nil || got != want {
			t.Errorf("NormalizeOrigin(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// echo is the wrapped handler: it answers 200 "ok", setting its own Vary
// the way the segment and blob routes do (replacing the list).
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Vary", "Authorization, Accept-Encoding")
	w.Header().Set("X-Request-Id", "r1")
	_, _ = w.Write([]byte("ok"))
})

func TestWrap(t *testing.T) {
	exact, err := cors.New(cors.Options{Origins: []string{"https://app.example.com", "http://localhost:5173"}, MaxAge: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	creds, err := cors.New(cors.Options{Origins: []string{"https://app.example.com"}, AllowCredentials: true, ExtraHeaders: []string{"X-Tenant"}})
	if err != nil {
		t.Fatal(err)
	}
	anyOrigin, err := cors.New(cors.Options{Origins: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	const (
		allowed = "https://app.example.com"
		other   = "https://evil.example.net"
	)
	preflight := map[string]string{"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"}
	upgrade := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket"}
	type want struct {
		status  int
		code    syncerr.Code      // the JSON error's code, when the answer is one
		headers map[string]string // "" means the header must be absent
		vary    bool              // Vary lists Origin
		reached bool              // the wrapped handler ran
	}
	noCORS := map[string]string{"Access-Control-Allow-Origin": "", "Access-Control-Allow-Credentials": "",
		"Access-Control-Allow-Methods": "", "Access-Control-Expose-Headers": ""}
	cases := []struct {
		name    string
		p       *cors.Policy
		method  string
		origin  string
		headers map[string]string
		want    want
	}{
		{"preflight from an allowed origin", exact, http.MethodOptions, allowed, preflight, want{status: 204, vary: true, headers: map[string]string{
			"Access-Control-Allow-Origin":      allowed,
			"Access-Control-Allow-Methods":     "GET, HEAD, POST, PUT",
			"Access-Control-Allow-Headers":     strings.Join(cors.AllowedHeaders, ", "),
			"Access-Control-Max-Age":           "90",
			"Access-Control-Allow-Credentials": "",
		}}},
		{"preflight from the second allowed origin", exact, http.MethodOptions, "http://localhost:5173", preflight, want{status: 204, vary: true,
			headers: map[string]string{"Access-Control-Allow-Origin": "http://localhost:5173"}}},
		{"preflight from another origin", exact, http.MethodOptions, other, preflight, want{status: 403, code: syncerr.Forbidden, vary: true, headers: noCORS}},
		{"preflight from an origin differing in case", exact, http.MethodOptions, "https://APP.example.com", preflight, want{status: 403, code: syncerr.Forbidden, vary: true, headers: noCORS}},
		{"preflight with credentials and an extra header", creds, http.MethodOptions, allowed, preflight, want{status: 204, vary: true, headers: map[string]string{
			"Access-Control-Allow-Origin":      allowed,
			"Access-Control-Allow-Credentials": "true",
			"Access-Control-Allow-Headers":     strings.Join(cors.AllowedHeaders, ", ") + ", X-Tenant",
			"Access-Control-Max-Age":           "600",
		}}},
		{"preflight under the wildcard", anyOrigin, http.MethodOptions, other, preflight, want{status: 204, headers: map[string]string{
			"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Credentials": "",
		}}},
		{"OPTIONS without a requested method is not a preflight", exact, http.MethodOptions, allowed, nil, want{status: 200, reached: true, vary: true,
			headers: map[string]string{"Access-Control-Allow-Origin": allowed}}},
		{"request from an allowed origin", exact, http.MethodPost, allowed, nil, want{status: 200, reached: true, vary: true, headers: map[string]string{
			"Access-Control-Allow-Origin":      allowed,
			"Access-Control-Expose-Headers":    strings.Join(cors.ExposedHeaders, ", "),
			"Access-Control-Allow-Credentials": "",
		}}},
		{"request with credentials", creds, http.MethodGet, allowed, nil, want{status: 200, reached: true, vary: true,
			headers: map[string]string{"Access-Control-Allow-Origin": allowed, "Access-Control-Allow-Credentials": "true"}}},
		{"request from another origin", exact, http.MethodPost, other, nil, want{status: 200, reached: true, vary: true, headers: noCORS}},
		{"request without Origin", exact, http.MethodPost, "", nil, want{status: 200, reached: true, vary: true, headers: noCORS}},
		{"request under the wildcard", anyOrigin, http.MethodGet, other, nil, want{status: 200, reached: true,
			headers: map[string]string{"Access-Control-Allow-Origin": "*", "Access-Control-Expose-Headers": strings.Join(cors.ExposedHeaders, ", ")}}},
		{"upgrade from an allowed origin", exact, http.MethodGet, allowed, upgrade, want{status: 200, reached: true, headers: noCORS}},
		{"upgrade without Origin", exact, http.MethodGet, "", upgrade, want{status: 200, reached: true, headers: noCORS}},
		{"upgrade from another origin", exact, http.MethodGet, other, upgrade, want{status: 403, code: syncerr.Forbidden, headers: noCORS}},
		{"upgrade under the wildcard", anyOrigin, http.MethodGet, other, upgrade, want{status: 200, reached: true, headers: noCORS}},
	}
	for _, c := range cases {
		reached := false
		h := c.p.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reached = true
			echo(w, r)
		}))
		req := httptest.NewRequest(c.method, "/sync", nil)
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		for k, v := range c.headers {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		res := rec.Result()
		if res.StatusCode != c.want.status || reached != c.want.reached {
			t.Errorf("%s: status %d, handler reached %v; want %d, %v", c.name, res.StatusCode, reached, c.want.status, c.want.reached)
		}
		if c.want.code != "" {
			var eb httperr.Body
			if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Code != string(c.want.code) || !strings.Contains(eb.Message, c.origin) {
				t.Errorf("%s: body %q, want JSON code %s naming the origin", c.name, rec.Body.String(), c.want.code)
			}
		}
		for k, v := range c.want.headers {
			if got := res.Header.Get(k); got != v {
				t.Errorf("%s: %s = %q, want %q", c.name, k, got, v)
			}
		}
		vary := strings.Join(res.Header.Values("Vary"), ", ")
		if hasOrigin := strings.Contains(vary, "Origin"); hasOrigin != c.want.vary {
			t.Errorf("%s: Vary %q, want Origin listed: %v", c.name, vary, c.want.vary)
		}
		if reached && c.want.vary && !strings.Contains(vary, "Authorization, Accept-Encoding") {
			t.Errorf("%s: Vary %q lost the handler's own list", c.name, vary)
		}
	}
}

// A handler that flushes before writing still gets Vary: Origin, and the
// flush reaches the connection.
func TestWrapFlushKeepsVary(t *testing.T) {
	p, err := cors.New(cors.Options{Origins: []string{"https://app.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	h := p.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Vary", "Accept-Encoding")
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush: %v", err)
		}
	}))
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/segments/x", nil)
	req.Header.Set("Origin", "https://app.example.com")
	h.ServeHTTP(rec, req)
	if !rec.Flushed || !strings.Contains(strings.Join(rec.Result().Header.Values("Vary"), ","), "Origin") {
		t.Fatalf("flushed %v, Vary %q", rec.Flushed, rec.Result().Header.Values("Vary"))
	}
}
