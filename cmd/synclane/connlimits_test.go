package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/synclane/synclane/transport/httperr"
	"github.com/synclane/synclane/transport/realtime"
)

// idleConn opens a connection to base, sends one keep-alive request for
// path and reads the answer, leaving the connection open and idle.
func idleConn(t *testing.T, base, path string) (net.Conn, int) {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second)) // a hang fails, it does not block
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s: no answer (a hang?): %v", path, err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = c.SetDeadline(time.Time{})
	return c, res.StatusCode
}

// freshGet GETs base+path on a new connection (no keep-alive reuse).
func freshGet(t *testing.T, base, path string) (*http.Response, []byte) {
	t.Helper()
	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := cl.Get(base + path)
	if err != nil {
		t.Fatalf("GET %s: %v (the cap must answer, never hang)", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, b
}

// With --max-connections held by idle keep-alive connections, an honest
// /healthz and /readyz still get through (the oldest idle connection is
// closed for them); held by realtime sockets (busy, not idle), a new
// connection is answered 503 sync.rate_limited with Retry-After at once.
// The cap and the descriptor limit are logged at start; the counters are
// in /metrics.
func TestMaxConnectionsServe(t *testing.T) {
	const capN = 6
	p := startServeProc(t, nil, "--max-connections", fmt.Sprint(capN), "--max-websockets", fmt.Sprint(capN), "--log-level", "info")
	t.Cleanup(func() { p.cancel(); p.wait(t) })
	http.DefaultClient.CloseIdleConnections() // the readiness probe's
	for i := range capN + 4 {
		if _, code := idleConn(t, p.base, "/healthz"); code != http.StatusOK {
			t.Fatalf("idle connection %d: %d", i, code)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if res, b := freshGet(t, p.base, path); res.StatusCode != http.StatusOK {
			t.Fatalf("honest %s while idle connections hold the cap: %d %s", path, res.StatusCode, b)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range capN {
		s, err := realtime.Dial(ctx, p.base+"/realtime", fmt.Sprintf("c%d", i), realtime.DialOptions{Header: http.Header{"X-Actor": {fmt.Sprintf("a%d", i)}}})
		if err != nil {
			t.Fatalf("socket %d: %v", i, err)
		}
		t.Cleanup(s.CloseNow)
	}
	res, b := freshGet(t, p.base, "/healthz")
	var body httperr.Body
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" || json.Unmarshal(b, &body) != nil ||
		body.Code != "sync.rate_limited" || !body.Retryable {
		t.Fatalf("over the cap with every connection busy: %d Retry-After %q %s", res.StatusCode, res.Header.Get("Retry-After"), b)
	}
	logs := p.stderr.String()
	if !strings.Contains(logs, `"msg":"connection limits"`) || !strings.Contains(logs, fmt.Sprintf(`"max_connections":%d`, capN)) ||
		!strings.Contains(logs, `"fd_limit":`) || !strings.Contains(logs, `"max_connections_source":"flag"`) {
		t.Fatalf("start log lacks the connection limits:\n%s", logs)
	}
}

// --max-websockets given above --max-connections is refused at start; the
// default --max-websockets is lowered to the cap with a warning; the
// per-client and per-actor flags reach the hub.
func TestMaxConnectionsVersusWebsockets(t *testing.T) {
	code, _, stderr := runCmd(t, "serve", "--listen", "127.0.0.1:0", "--max-connections", "50", "--max-websockets", "100")
	if code != 2 || !strings.Contains(stderr, "--max-websockets 100 exceeds --max-connections 50") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, tc := range []struct {
		name  string
		flags []string
		ws    int
		clamp bool
	}{
		{"default websockets clamped", []string{"--max-connections", "50"}, 50, true},
		{"within the cap", []string{"--max-connections", "50", "--max-websockets", "50"}, 50, false},
		{"no cap", []string{"--max-connections", "-1"}, realtime.DefaultMaxConnections, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, given := parseServe(t, nil, tc.flags...)
			if err := c.validate(given); err != nil {
				t.Fatal(err)
			}
			if c.maxWebsockets != tc.ws || (c.conn.clampedWS > 0) != tc.clamp {
				t.Fatalf("--max-websockets %d (clamped from %d), want %d", c.maxWebsockets, c.conn.clampedWS, tc.ws)
			}
		})
	}
	c, _ := parseServe(t, nil, "--max-websockets-per-client", "3", "--max-websockets-per-actor", "-1")
	var o realtime.Options
	c.conn.hubOptions(&o)
	if o.MaxConnectionsPerClient != 3 || o.MaxConnectionsPerActor != -1 {
		t.Fatalf("hub options %+v", o)
	}
}

// The derived --max-connections is the descriptor limit minus the reserve.
func TestDerivedMaxConnections(t *testing.T) {
	c, given := parseServe(t, nil, "--max-websockets", "1")
	if err := c.validate(given); err != nil {
		t.Fatal(err)
	}
	lim := fdLimit() // after validate, which may have raised it
	if lim == 0 {
		t.Fatal("no RLIMIT_NOFILE on a unix build")
	}
	want := int(min(lim-uint64(fdReserve(lim)), maxDerivedConnections))
	if c.conn.effective != want || c.conn.source != "fd_limit" {
		t.Fatalf("derived cap %d (%s), want %d from the limit %d", c.conn.effective, c.conn.source, want, lim)
	}
	for _, tc := range []struct {
		limit   uint64
		reserve int
	}{{1024, 256}, {4096, 1024}, {1 << 20, 1024}} {
		if got := fdReserve(tc.limit); got != tc.reserve {
			t.Errorf("reserve under %d: %d, want %d", tc.limit, got, tc.reserve)
		}
	}
}

// A default start warns about nothing it did itself: the default
// --max-websockets lowered to the cap derived from the descriptor limit is
// a field of the info line; lowered to the user's --max-connections it is a
// warning (the user's setting is what to change).
func TestWebsocketClampLogLevel(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fdLimit uint64
		flags   []string
		warn    bool
		lowered bool // max_websockets_default on the info line
	}{
		{"default start, low descriptor limit", 4096, nil, false, true},
		{"default start, high descriptor limit", 1 << 20, nil, false, false},
		{"user's --max-connections below the default", 1 << 20, []string{"--max-connections", "50"}, true, false},
		{"user's --max-websockets within the cap", 4096, []string{"--max-websockets", "100"}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, given := parseServe(t, nil, tc.flags...)
			c.conn.fdLimitFn = func() uint64 { return tc.fdLimit }
			if err := c.validate(given); err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			core, logs := observer.New(zap.InfoLevel)
			c.conn.wrap(ln, &http.Server{}, c.maxWebsockets, zap.New(core))
			if got := logs.FilterLevelExact(zap.WarnLevel).Len() > 0; got != tc.warn {
				t.Fatalf("warned %v, want %v: %v", got, tc.warn, logs.All())
			}
			info := logs.FilterMessage("connection limits").All()
			if len(info) != 1 {
				t.Fatalf("connection limits logged %d times", len(info))
			}
			if _, got := info[0].ContextMap()["max_websockets_default"]; got != tc.lowered {
				t.Fatalf("max_websockets_default on the info line %v, want %v: %v", got, tc.lowered, info[0].ContextMap())
			}
		})
	}
}
