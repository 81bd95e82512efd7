// Package cors lets browser pages served from other origins call the sync
// routes: it answers CORS preflights, adds the CORS response headers to the
// answers of allowed origins, and checks the Origin of WebSocket upgrades
// (browsers apply no CORS to WebSocket) against the same list.
//
// A Policy is built once from exact origins (or the single wildcard "*")
// and wraps each protocol route's handler. Without a Policy nothing
// changes: no CORS header is ever written.
package cors

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/httperr"
)

// DefaultMaxAge is how long a browser may cache a preflight answer when
// Options.MaxAge is zero: 10 minutes (Chromium caps any value at 2 hours,
// Firefox at 24 hours).
const DefaultMaxAge = 10 * time.Minute

// MaxMaxAge is the largest Options.MaxAge New accepts (24 hours, the most
// any browser honours).
const MaxMaxAge = 24 * time.Hour

// Wildcard is the origin that allows every origin (without credentials).
const Wildcard = "*"

// AllowedMethods are the methods a preflight allows: the protocol's routes
// use GET and HEAD (segments, blob downloads, the realtime upgrades), POST
// (sync, remote operations, upload grants) and PUT (blob uploads).
var AllowedMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut}

// AllowedHeaders are the request headers a preflight allows: those the
// server reads from protocol clients. Authorization carries the bearer
// token; Content-Type and Content-Encoding describe a sync body or a blob
// upload; X-Syncular-Scopes narrows a segment download; X-Request-Id names
// a request in the logs; If-None-Match, If-Range and Range make
// conditional and partial blob and segment downloads; X-Actor and
// X-Partition are the development-authentication headers.
var AllowedHeaders = []string{"Authorization", "Content-Type", "Content-Encoding", "X-Syncular-Scopes", "X-Request-Id",
	"If-None-Match", "If-Range", "Range", "X-Actor", "X-Partition"}

// ExposedHeaders are the response headers a page may read beyond the
// CORS-safelisted ones: the request id every route echoes, Retry-After of
// retryable refusals, ETag, Content-Range and Accept-Ranges of segment and
// blob downloads, Content-Encoding of compressed answers, and Allow of a
// 405.
var ExposedHeaders = []string{"X-Request-Id", "Retry-After", "ETag", "Content-Range", "Accept-Ranges", "Content-Encoding", "Allow"}

// Options configure a Policy.
type Options struct {
	// Origins are the allowed origins, each exactly as a browser sends it
	// in the Origin header: scheme://host[:port], no path (the default
	// port of http and https is dropped, scheme and host are lower-cased).
	// Any scheme is accepted (app shells use capacitor://localhost,
	// tauri://localhost and the like). The single entry "*" allows every
	// origin and cannot be combined with other origins or with
	// AllowCredentials. "null" is refused (sandboxed and file: pages share
	// it). At least one origin is required.
	Origins []string
	// AllowCredentials answers Access-Control-Allow-Credentials: true, so
	// pages may send cookies (fetch credentials "include"). Only a custom
	// Auth reading cookies needs it: the bearer token in Authorization is
	// not a credential in the CORS sense. Never combined with "*".
	AllowCredentials bool
	// MaxAge is how long a browser may cache a preflight answer (0:
	// DefaultMaxAge; at most MaxMaxAge; whole seconds).
	MaxAge time.Duration
	// ExtraHeaders are request headers allowed beyond AllowedHeaders (the
	// headers a host's own Auth reads, say).
	ExtraHeaders []string
}

// Policy is a validated CORS configuration. Its methods are safe for
// concurrent use.
type Policy struct {
	origins     map[string]bool
	any         bool
	credentials bool
	maxAge      string
	methods     string
	headers     string
	expose      string
}

// New validates opts and returns the Policy; an invalid origin or
// combination is an error naming it.
func New(opts Options) (*Policy, error) {
	if len(opts.Origins) == 0 {
		return nil, errors.New("cors: no origin given")
	}
	p := &Policy{origins: map[string]bool{}, credentials: opts.AllowCredentials}
	for _, o := range opts.Origins {
		if o == Wildcard {
			p.any = true
			continue
		}
		n, err := NormalizeOrigin(o)
		if err != nil {
			return nil, err
		}
		p.origins[n] = true
	}
	switch {
	case p.any && len(p.origins) > 0:
		return nil, errors.New(`cors: origin "*" allows every origin and cannot be combined with others`)
	case p.any && p.credentials:
		return nil, errors.New(`cors: credentials need exact origins: a browser refuses them with "*"`)
	}
	maxAge := opts.MaxAge
	if maxAge == 0 {
		maxAge = DefaultMaxAge
	}
	if maxAge < time.Second || maxAge > MaxMaxAge {
		return nil, fmt.Errorf("cors: max age %s: want 1s to %s", opts.MaxAge, MaxMaxAge)
	}
	p.maxAge = strconv.Itoa(int(maxAge / time.Second))
	p.methods = strings.Join(AllowedMethods, ", ")
	headers := append([]string(nil), AllowedHeaders...)
	for _, h := range opts.ExtraHeaders {
		h = strings.TrimSpace(h)
		if h == "" || strings.ContainsAny(h, " ,:\t\r\n") {
			return nil, fmt.Errorf("cors: extra header %q is not a header name", h)
		}
		headers = append(headers, h)
	}
	p.headers = strings.Join(headers, ", ")
	p.expose = strings.Join(ExposedHeaders, ", ")
	return p, nil
}

// NormalizeOrigin returns o as a browser serializes an origin
// (scheme://host[:port], lower case, no default port), or an error saying
// why o is not an origin.
func NormalizeOrigin(o string) (string, error) {
	if o == "null" {
		return "", errors.New(`cors: origin "null" is refused: sandboxed frames and file: pages all send it`)
	}
	u, err := url.Parse(o)
	if err != nil || u.Scheme == "" || u.Host == "" || u.Opaque != "" {
		return "", fmt.Errorf("cors: origin %q: want scheme://host[:port], e.g. https://app.example.com", o)
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery || strings.HasSuffix(o, "#") {
		return "", fmt.Errorf("cors: origin %q has more than scheme://host[:port] (no path, query or user)", o)
	}
	if u.Path == "/" {
		return "", fmt.Errorf("cors: origin %q ends with a slash: browsers send %q", o, strings.TrimSuffix(o, "/"))
	}
	scheme, host := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname())
	if strings.ContainsAny(host, "*?[") {
		return "", fmt.Errorf("cors: origin %q: patterns are not supported, list each origin", o)
	}
	port := u.Port()
	if scheme == "http" && port == "80" || scheme == "https" && port == "443" {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	return scheme + "://" + host, nil
}

// allows reports whether a request Origin is allowed (compared exactly:
// browsers send origins serialized, in lower case).
func (p *Policy) allows(origin string) bool {
	return origin != "" && (p.any || p.origins[origin])
}

// Wrap returns next behind the policy:
//
//   - a preflight (OPTIONS with Origin and Access-Control-Request-Method)
//     from an allowed origin is answered 204 with the allowed methods,
//     headers and max age; from another origin 403 sync.forbidden without
//     any CORS header (the browser then refuses the real request);
//   - a WebSocket upgrade carrying an Origin that is not allowed is
//     refused 403 sync.forbidden before next runs; one without Origin (not
//     a browser) or with an allowed one goes on to next;
//   - any other request goes on to next; an allowed origin's answer
//     carries Access-Control-Allow-Origin (the origin itself, or "*"),
//     Access-Control-Expose-Headers and, with credentials,
//     Access-Control-Allow-Credentials; with exact origins every answer
//     carries Vary: Origin, so caches keep answers per origin.
func (p *Policy) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if r.Method == http.MethodOptions && origin != "" && r.Header.Get("Access-Control-Request-Method") != "" {
			p.preflight(w, origin)
			return
		}
		if isWebSocketUpgrade(r) {
			if origin != "" && !p.allows(origin) {
				httperr.WriteStatus(w, http.StatusForbidden, syncerr.New(syncerr.Forbidden,
					"WebSocket upgrade refused: origin %s is not allowed (see --cors-origin)", syncerr.Quote(origin)))
				return
			}
			next.ServeHTTP(w, r) // browsers read no CORS header on a 101
			return
		}
		h := w.Header()
		if !p.any {
			h.Add("Vary", "Origin")
			w = &varyWriter{ResponseWriter: w}
		}
		if p.allows(origin) {
			p.allowOrigin(h, origin)
			h.Set("Access-Control-Expose-Headers", p.expose)
		}
		next.ServeHTTP(w, r)
	})
}

// preflight answers a preflight request from origin.
func (p *Policy) preflight(w http.ResponseWriter, origin string) {
	h := w.Header()
	if !p.any {
		h.Add("Vary", "Origin")
	}
	if !p.allows(origin) {
		httperr.WriteStatus(w, http.StatusForbidden, syncerr.New(syncerr.Forbidden, "origin %s is not allowed (see --cors-origin)", syncerr.Quote(origin)))
		return
	}
	p.allowOrigin(h, origin)
	h.Set("Access-Control-Allow-Methods", p.methods)
	h.Set("Access-Control-Allow-Headers", p.headers)
	h.Set("Access-Control-Max-Age", p.maxAge)
	w.WriteHeader(http.StatusNoContent)
}

// allowOrigin sets the origin and credentials headers of an allowed
// origin.
func (p *Policy) allowOrigin(h http.Header, origin string) {
	if p.any {
		h.Set("Access-Control-Allow-Origin", Wildcard)
		return
	}
	h.Set("Access-Control-Allow-Origin", origin)
	if p.credentials {
		h.Set("Access-Control-Allow-Credentials", "true")
	}
}

// isWebSocketUpgrade reports whether r asks for a WebSocket upgrade.
func isWebSocketUpgrade(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	for _, v := range r.Header.Values("Upgrade") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "websocket") {
				return true
			}
		}
	}
	return false
}

// varyWriter keeps Origin in the Vary header when the handler replaces
// Vary with its own list (the segment and blob routes Set it).
type varyWriter struct {
	http.ResponseWriter
	done bool
}

func (w *varyWriter) ensure() {
	if w.done {
		return
	}
	w.done = true
	h := w.Header()
	for _, v := range h.Values("Vary") {
		for _, tok := range strings.Split(v, ",") {
			if t := strings.TrimSpace(tok); strings.EqualFold(t, "Origin") || t == "*" {
				return
			}
		}
	}
	h.Add("Vary", "Origin")
}

// WriteHeader implements http.ResponseWriter.
func (w *varyWriter) WriteHeader(code int) {
	w.ensure()
	w.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (w *varyWriter) Write(b []byte) (int, error) {
	w.ensure()
	return w.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (w *varyWriter) Flush() {
	w.ensure()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController and the metrics recorder reach the
// response underneath.
func (w *varyWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
