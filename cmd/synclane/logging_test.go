package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/accesslog"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/realtime"
)

// accessLines returns the access log lines of a JSON log.
func accessLines(t *testing.T, log string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(log), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil {
			t.Fatalf("log line is not JSON: %q", l)
		}
		if m["msg"] == accesslog.Message {
			out = append(out, m)
		}
	}
	return out
}

// traffic sends a pull (with a request id), opens and closes a realtime
// socket, and asks for a segment that does not exist.
func traffic(t *testing.T, base string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hdr := http.Header{"X-Actor": {"ada"}, "X-Partition": {"p7"}, "X-Request-Id": {"pull-1"}}
	c := &httpsync.Client{URL: base + "/sync", ClientID: "c1", Header: hdr}
	if _, err := c.Pull(ctx, ssp2.PullHeader{Accept: ssp2.AcceptInlineRows},
		&ssp2.Subscription{ID: "s", Table: "todos", Scopes: map[string][]string{"list_id": {"l1"}}, Cursor: -1}); err != nil {
		t.Fatal(err)
	}
	s, err := realtime.Dial(ctx, base+"/realtime", "c1", realtime.DialOptions{Header: http.Header{"X-Actor": {"ada"}, "X-Partition": {"p7"}}})
	if err != nil {
		t.Fatalf("realtime through the access log: %v", err)
	}
	if h := s.Hello(); h.ActorID != "ada" {
		t.Fatalf("hello %+v", h)
	}
	s.CloseNow()
	res, err := http.Get(base + "/segments/no-such-segment")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
}

// synclane serve logs one access line per request with the stable fields;
// the realtime upgrade works through it; --access-log=false turns it off.
func TestServeAccessLog(t *testing.T) {
	t.Run("on", func(t *testing.T) {
		p := startServeProc(t, nil, "--data", t.TempDir(), "--log-level", "info")
		traffic(t, p.base)
		p.cancel()
		if code := p.wait(t); code != 0 {
			t.Fatalf("exit %d", code)
		}
		byRoute := map[string]map[string]any{}
		for _, l := range accessLines(t, p.stderr.String()) {
			byRoute[l["route"].(string)] = l
			if l["logger"] != "access" || l["level"] != "info" {
				t.Errorf("access line logger %v level %v: %v", l["logger"], l["level"], l)
			}
		}
		want := map[string]map[string]any{
			"/sync":              {"method": "POST", "status": 200.0, "request_id": "pull-1", "actor": "ada", "partition": "p7"},
			"GET /realtime":      {"method": "GET", "status": 101.0, "actor": "ada", "partition": "p7"},
			"GET /segments/{id}": {"method": "GET", "status": 401.0},
			"GET /healthz":       {"method": "GET", "status": 200.0},
		}
		for route, fields := range want {
			l := byRoute[route]
			if l == nil {
				t.Errorf("no access line for route %s; lines by route: %v", route, byRoute)
				continue
			}
			for k, v := range fields {
				if l[k] != v {
					t.Errorf("route %s: %s = %v, want %v (%v)", route, k, l[k], v, l)
				}
			}
			for _, k := range []string{"bytes", "duration", "request_id"} {
				if _, ok := l[k]; !ok {
					t.Errorf("route %s: no %s field: %v", route, k, l)
				}
			}
		}
		if b, _ := byRoute["/sync"]["bytes"].(float64); b <= 0 {
			t.Errorf("/sync bytes %v", byRoute["/sync"]["bytes"])
		}
	})
	t.Run("off", func(t *testing.T) {
		p := startServeProc(t, nil, "--data", t.TempDir(), "--log-level", "info", "--access-log=false")
		traffic(t, p.base)
		p.cancel()
		if code := p.wait(t); code != 0 {
			t.Fatalf("exit %d", code)
		}
		if l := accessLines(t, p.stderr.String()); len(l) != 0 {
			t.Fatalf("--access-log=false logged %d access lines: %v", len(l), l)
		}
		if !strings.Contains(p.stderr.String(), `"msg":"synclane serving"`) {
			t.Fatalf("no other log lines either:\n%s", p.stderr.String())
		}
	})
}

// --log-format console writes human-readable lines; an unknown format
// exits 2 naming the flag.
func TestServeLogFormat(t *testing.T) {
	p := startServeProc(t, nil, "--data", t.TempDir(), "--log-level", "info", "--log-format", "console")
	traffic(t, p.base)
	p.cancel()
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
	log := p.stderr.String()
	var sawServing, sawAccess bool
	for _, l := range strings.Split(strings.TrimSpace(log), "\n") {
		if strings.HasPrefix(l, "{") {
			t.Fatalf("console log has a JSON line: %q", l)
		}
		sawServing = sawServing || strings.Contains(l, "\tINFO\tsynclane serving\t")
		sawAccess = sawAccess || strings.Contains(l, "\tINFO\taccess\t"+accesslog.Message+"\t") && strings.Contains(l, `"route": "/sync"`)
	}
	if !sawServing || !sawAccess {
		t.Fatalf("console log lacks the serving line (%v) or a /sync access line (%v):\n%s", sawServing, sawAccess, log)
	}
	code, _, stderr := runCmdEnv(t, nil, "serve", "--data", t.TempDir(), "--log-format", "xml")
	if code != 2 || !strings.Contains(stderr, `--log-format: "xml"`) {
		t.Fatalf("--log-format xml: exit %d, stderr %q", code, stderr)
	}
}
