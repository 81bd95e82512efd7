package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/synclane/synclane/internal/promtext"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
)

var secret32 = strings.Repeat("k", 32)

// Authentication fails closed: an empty or short secret, development auth
// off loopback, and contradictory auth flags stop startup (exit 2) before
// storage is touched.
func TestServeAuthFailsClosed(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"empty --jwt-secret", nil, []string{"--jwt-secret", ""}, "set but empty"},
		{"empty --jwt-secret=", nil, []string{"--jwt-secret="}, "set but empty"},
		{"SYNCLANE_JWT_SECRET set but empty", map[string]string{"SYNCLANE_JWT_SECRET": ""}, nil, "set but empty"},
		{"short secret", nil, []string{"--jwt-secret", "hunter2"}, "at least 32"},
		{"short secret from env", map[string]string{"SYNCLANE_JWT_SECRET": strings.Repeat("k", 31)}, nil, "at least 32"},
		{"dev auth off", nil, []string{"--dev-auth=false"}, "no authentication"},
		{"dev auth and jwt", nil, []string{"--dev-auth", "--jwt-secret", secret32}, "exclude each other"},
		{"default dev auth on all interfaces", nil, []string{"--listen", "0.0.0.0:0"}, "loopback"},
		{"default dev auth without a host", nil, []string{"--listen", ":0"}, "loopback"},
		{"explicit dev auth on all interfaces", nil, []string{"--dev-auth", "--listen", "0.0.0.0:0"}, "loopback"},
		{"dev auth on a LAN address from env", map[string]string{"SYNCLANE_LISTEN": "192.0.2.1:0"}, nil, "loopback"},
		{"allow no exp without jwt", nil, []string{"--jwt-allow-no-exp"}, "--jwt-allow-no-exp needs --jwt-secret"},
		{"non-loopback override with jwt", nil, []string{"--jwt-secret", secret32, "--dev-auth-non-loopback"}, "only to development"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"serve", "--data", dir}
			if tc.env["SYNCLANE_LISTEN"] == "" {
				args = append(args, "--listen", "127.0.0.1:0")
			}
			code, _, stderr := runCmdEnv(t, tc.env, append(args, tc.args...)...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit 2 naming %q", code, stderr, tc.want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Fatalf("a refused start touched storage: %v", entries)
			}
		})
	}
}

// parseServe parses serve's flags and environment as serve does.
func parseServe(t *testing.T, env map[string]string, args ...string) (serveConfig, map[string]bool) {
	t.Helper()
	var c serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	serveFlags(fs, &c)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := applyEnv(fs, envOf(env)); err != nil {
		t.Fatal(err)
	}
	return c, givenFlags(fs)
}

func TestServeAuthChoices(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		args []string
		dev  bool
	}{
		{"no auth flag: dev auth on loopback", nil, nil, true},
		{"explicit dev auth on localhost", nil, []string{"--dev-auth", "--listen", "localhost:9"}, true},
		{"explicit dev auth on IPv6 loopback", nil, []string{"--dev-auth", "--listen", "[::1]:9"}, true},
		{"dev auth off loopback with the override", nil, []string{"--listen", "0.0.0.0:9", "--dev-auth-non-loopback"}, true},
		{"jwt on all interfaces", nil, []string{"--listen", "0.0.0.0:9", "--jwt-secret", secret32}, false},
		{"jwt from env", map[string]string{"SYNCLANE_JWT_SECRET": secret32, "SYNCLANE_LISTEN": "0.0.0.0:9"}, nil, false},
		{"jwt allowing no exp", nil, []string{"--jwt-secret", secret32, "--jwt-allow-no-exp"}, false},
	}
	for _, tc := range cases {
		c, given := parseServe(t, tc.env, tc.args...)
		if err := c.validate(given); err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if c.useDevAuth(given) != tc.dev {
			t.Errorf("%s: development auth %v, want %v", tc.name, c.useDevAuth(given), tc.dev)
		}
	}
}

// An empty environment variable is a given empty value, not an unset one:
// for a number that is an error naming the variable.
func TestEnvSetButEmpty(t *testing.T) {
	var c serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	serveFlags(fs, &c)
	err := applyEnv(fs, envOf(map[string]string{"SYNCLANE_PG_MAX_CONNS": ""}))
	if err == nil || !strings.Contains(err.Error(), "SYNCLANE_PG_MAX_CONNS") {
		t.Fatalf("empty SYNCLANE_PG_MAX_CONNS: %v", err)
	}
	c, given := parseServe(t, map[string]string{"SYNCLANE_POSTGRES": ""})
	if !given["postgres"] || given["jwt-secret"] || c.postgresURL != "" {
		t.Fatalf("given %v, postgres %q", given, c.postgresURL)
	}
}

func jwtClient(base, token string) *httpsync.Client {
	return &httpsync.Client{URL: base + "/sync", ClientID: "jwt-client", Header: http.Header{"Authorization": {"Bearer " + token}}}
}

// A JWT server refuses tokens without exp (unless --jwt-allow-no-exp) and
// ?access_token= on POST /sync, with 401 sync.auth_required.
func TestServeJWT(t *testing.T) {
	ctx := context.Background()
	exp := time.Now().Add(time.Hour).Unix()
	withExp := auth.SignJWT([]byte(secret32), map[string]any{"sub": "ada", "exp": exp})
	noExp := auth.SignJWT([]byte(secret32), map[string]any{"sub": "ada"})
	unauthorized := func(t *testing.T, what string, err error) {
		t.Helper()
		if syncerr.CodeOf(err) != syncerr.AuthRequired || !strings.Contains(fmt.Sprint(syncerr.As(err).Err), "401") {
			t.Fatalf("%s: %v, want HTTP 401 sync.auth_required", what, err)
		}
	}

	base := startServe(t, "--data", t.TempDir(), "--jwt-secret", secret32)
	if err := jwtClient(base, withExp).Handshake(ctx); err != nil {
		t.Fatalf("token with exp: %v", err)
	}
	unauthorized(t, "token without exp", jwtClient(base, noExp).Handshake(ctx))
	unauthorized(t, "development headers", (&httpsync.Client{URL: base + "/sync", ClientID: "c", Header: http.Header{"X-Actor": {"ada"}}}).Handshake(ctx))
	q := &httpsync.Client{URL: base + "/sync?access_token=" + url.QueryEscape(withExp), ClientID: "c"}
	unauthorized(t, "access_token on POST /sync", q.Handshake(ctx))

	lax := startServe(t, "--data", t.TempDir(), "--jwt-secret", secret32, "--jwt-allow-no-exp")
	if err := jwtClient(lax, noExp).Handshake(ctx); err != nil {
		t.Fatalf("token without exp with --jwt-allow-no-exp: %v", err)
	}
}

// A body trickled slowly or never sent is cut off at --read-timeout with
// 408, and the connection closed.
func TestServeReadTimeout(t *testing.T) {
	const timeout = 500 * time.Millisecond
	base := startServe(t, "--data", t.TempDir(), "--read-timeout", timeout.String())
	addr := strings.TrimPrefix(base, "http://")
	head := "POST /sync HTTP/1.1\r\nHost: x\r\nContent-Type: " + httpsync.ContentType + "\r\nX-Actor: ada\r\nContent-Length: 1000\r\n\r\n"
	for _, trickle := range []bool{false, true} {
		name := map[bool]string{false: "never sent", true: "trickled"}[trickle]
		t.Run(name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now()
			if _, err := io.WriteString(conn, head+"SSP2"); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			defer close(stop)
			if trickle {
				// One byte every 50ms: always making progress, never done.
				go func() {
					tick := time.NewTicker(50 * time.Millisecond)
					defer tick.Stop()
					for {
						select {
						case <-stop:
							return
						case <-tick.C:
							if _, err := conn.Write([]byte{0}); err != nil {
								return
							}
						}
					}
				}()
			}
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(conn)
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer within 10s of a %v read timeout: %v", timeout, err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			elapsed := time.Since(start)
			if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "sync.invalid_request") {
				t.Fatalf("answer %d %s, want 408 sync.invalid_request", res.StatusCode, body)
			}
			if elapsed < timeout {
				t.Fatalf("cut off after %v, before the %v read timeout", elapsed, timeout)
			}
			// The server closes the connection.
			if _, err := br.ReadByte(); err == nil {
				t.Fatal("the connection is still open after the read timeout")
			}
		})
	}
	// A prompt client is unaffected.
	if pr, err := pushTodo(t, base, "ada", "t1"); err != nil || pr.Status != ssp2.CommitApplied {
		t.Fatalf("push: %+v %v", pr, err)
	}
}

// On SIGTERM the server first turns unready while still serving for
// --drain-delay, then stops accepting and exits 0.
func TestServeDrainIsObservable(t *testing.T) {
	const delay = 3 * time.Second
	p := startServeProc(t, nil, "--data", t.TempDir(), "--drain-delay", delay.String())
	if code, body := get(t, p.base+"/readyz"); code != 200 {
		t.Fatalf("/readyz before the drain: %d %s", code, body)
	}
	idleConn(t, p.base, "/healthz") // a load balancer's keep-alive connection: the drain is for it
	p.cancel()                      // SIGTERM
	sigterm := time.Now()
	deadline := sigterm.Add(delay)
	for {
		code, body := get(t, p.base+"/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "draining") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d %q after SIGTERM", code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Still serving sync requests, health and metrics during the delay.
	if pr, err := pushTodo(t, p.base, "ada", "during-drain"); err != nil || pr.Status != ssp2.CommitApplied {
		t.Fatalf("push during the drain delay: %+v %v", pr, err)
	}
	if rows, err := pullTodos(t, p.base, "bob"); err != nil || len(rows) != 1 {
		t.Fatalf("pull during the drain delay: %v %v", rows, err)
	}
	if code, body := get(t, p.base+"/metrics"); code != 200 || !promtext.Has([]byte(body), "synclane_draining 1") {
		t.Fatalf("/metrics during the drain: %d\n%s", code, body)
	}
	if time.Since(sigterm) >= delay {
		t.Fatalf("the checks took longer than the %v drain delay; the test proves nothing", delay)
	}
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d after the drain", code)
	}
	if d := time.Since(sigterm); d < delay {
		t.Fatalf("exited %v after SIGTERM, before the %v drain delay", d, delay)
	}
	if _, err := http.Get(p.base + "/healthz"); err == nil {
		t.Fatal("still accepting connections after exit")
	}
}

// With no connection open at SIGTERM there is no one to tell about the
// drain: serve stops at once instead of waiting --drain-delay; one idle
// keep-alive connection keeps the whole drain (and sees /readyz 503 on it).
func TestServeNoDrainWhenIdle(t *testing.T) {
	// start runs serve on a free port and returns once it announced the
	// port (the listener is open; nothing has connected to it).
	start := func(t *testing.T, delay time.Duration) (string, context.CancelFunc, chan int, *lockedBuffer) {
		pr, pw := io.Pipe()
		ctx, cancel := context.WithCancel(context.Background())
		done, stderr := make(chan int, 1), &lockedBuffer{}
		go func() {
			done <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--log-level", "info",
				"--drain-delay", delay.String()}, noEnv, pw, stderr)
			pw.Close()
		}()
		var first struct{ Listening string }
		line, err := bufio.NewReader(pr).ReadString('\n')
		if err != nil || json.Unmarshal([]byte(line), &first) != nil || first.Listening == "" {
			cancel()
			t.Fatalf("serve did not announce its address: %q %v\n%s", line, err, stderr.String())
		}
		go func() { _, _ = io.Copy(io.Discard, pr) }()
		return first.Listening, cancel, done, stderr
	}
	stopped := func(t *testing.T, done chan int, within time.Duration, stderr *lockedBuffer) {
		t.Helper()
		select {
		case code := <-done:
			if code != 0 {
				t.Fatalf("exit %d\n%s", code, stderr.String())
			}
		case <-time.After(within):
			t.Fatalf("serve still running %v after SIGTERM\n%s", within, stderr.String())
		}
	}

	t.Run("no connection", func(t *testing.T) {
		_, cancel, done, stderr := start(t, time.Hour)
		cancel() // SIGTERM
		stopped(t, done, 10*time.Second, stderr)
		if logs := stderr.String(); !strings.Contains(logs, "no open connection: no drain delay") || strings.Contains(logs, "draining:") {
			t.Fatalf("log does not say the drain was skipped:\n%s", logs)
		}
	})
	t.Run("one keep-alive connection", func(t *testing.T) {
		const delay = 2 * time.Second
		base, cancel, done, stderr := start(t, delay)
		c, code := idleConn(t, base, "/healthz")
		if code != http.StatusOK {
			t.Fatalf("/healthz %d", code)
		}
		cancel() // SIGTERM
		sigterm := time.Now()
		_ = c.SetDeadline(time.Now().Add(delay))
		// On the held connection, /readyz turns 503 draining.
		br := bufio.NewReader(c)
		for {
			if _, err := io.WriteString(c, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatalf("the held connection was closed before the drain delay ended: %v", err)
			}
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("/readyz on the held connection: %v", err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(b), "draining") {
				break
			}
		}
		stopped(t, done, 15*time.Second, stderr)
		if d := time.Since(sigterm); d < delay {
			t.Fatalf("stopped %v after SIGTERM, before the %v drain delay", d, delay)
		}
		if logs := stderr.String(); !strings.Contains(logs, `"open_connections":1`) {
			t.Fatalf("log lacks the drain with its open connection:\n%s", logs)
		}
	})
}

// Help lists each command's own flags, with their environment variables.
func TestHelp(t *testing.T) {
	code, _, stderr := runCmd(t, "serve", "-h")
	for _, want := range []string{"--jwt-secret", "SYNCLANE_JWT_SECRET", "SYNCLANE_DATA", "SYNCLANE_PG_STATEMENT_TIMEOUT",
		"--read-timeout", "SYNCLANE_READ_TIMEOUT", "SYNCLANE_WRITE_TIMEOUT", "SYNCLANE_HTTP_IDLE_TIMEOUT", "SYNCLANE_DRAIN_DELAY",
		"SYNCLANE_DEV_AUTH", "SYNCLANE_DEV_AUTH_NON_LOOPBACK", "SYNCLANE_JWT_ALLOW_NO_EXP"} {
		if code != 0 || !strings.Contains(stderr, want) {
			t.Fatalf("serve -h: exit %d, lacks %q:\n%s", code, want, stderr)
		}
	}
	code, _, stderr = runCmd(t, "checkpoint", "list", "-h")
	if code != 0 || !strings.Contains(stderr, "--data") || !strings.Contains(stderr, "SYNCLANE_POSTGRES") || !strings.Contains(stderr, "checkpoint list") {
		t.Fatalf("checkpoint list -h: exit %d\n%s", code, stderr)
	}
	for _, not := range []string{"jwt-secret", "listen", "drain-delay", "sources", "test-control"} {
		if strings.Contains(stderr, not) {
			t.Fatalf("checkpoint list -h lists serve's or activate's flag %q:\n%s", not, stderr)
		}
	}
	code, _, stderr = runCmd(t, "checkpoint", "activate", "-h")
	if code != 0 || !strings.Contains(stderr, "--sources") || strings.Contains(stderr, "jwt-secret") {
		t.Fatalf("checkpoint activate -h: exit %d\n%s", code, stderr)
	}
	if code, _, _ := runCmd(t, "checkpoint", "list", "--listen", "x"); code != 2 {
		t.Fatalf("checkpoint list with a serve flag: exit %d, want 2", code)
	}
}

// A blob upload whose body stalls is answered 408 once --read-timeout has
// passed without a byte (before, serve waited 30 s whatever the flag), and
// one cut short 400; both sync.invalid_request, never 500.
func TestServeBlobUploadHonoursReadTimeout(t *testing.T) {
	const timeout = 500 * time.Millisecond
	base := startServe(t, "--data", t.TempDir(), "--read-timeout", timeout.String())
	addr := strings.TrimPrefix(base, "http://")
	data := bytes.Repeat([]byte("b"), 64<<10)
	sum := sha256.Sum256(data)
	head := fmt.Sprintf("PUT /blobs/sha256:%x HTTP/1.1\r\nHost: x\r\nX-Actor: ada\r\nContent-Length: %d\r\n\r\n", sum, len(data))
	for _, c := range []struct {
		name   string
		stall  bool
		status int
	}{{"stalled", true, http.StatusRequestTimeout}, {"cut short", false, http.StatusBadRequest}} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(conn, head+string(data[:len(data)/2])); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if !c.stall {
			_ = conn.(*net.TCPConn).CloseWrite()
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: no answer within 10 s of a %v read timeout: %v", c.name, timeout, err)
		}
		body, _ := io.ReadAll(res.Body)
		conn.Close()
		if res.StatusCode != c.status || !strings.Contains(string(body), "sync.invalid_request") {
			t.Fatalf("%s: %d %s, want %d sync.invalid_request", c.name, res.StatusCode, body, c.status)
		}
		if c.stall && time.Since(start) < timeout {
			t.Fatalf("stalled: answered after %v, before the %v read timeout", time.Since(start), timeout)
		}
	}
}

// A token whose scopes claim names a scope variable the schema does not
// declare is refused at authentication, 401 sync.auth_required
// (refreshAuth: the token is at fault), on every route, instead of failing
// every pull with 400 sync.invalid_subscription (fixRequest) as a request
// the client could fix. A token with the schema's variables still syncs.
func TestServeJWTUndeclaredScopeVariable(t *testing.T) {
	ctx := context.Background()
	exp := time.Now().Add(time.Hour).Unix()
	base := startServe(t, "--data", t.TempDir(), "--jwt-secret", secret32)
	pull := func(scopes map[string][]string) error {
		tok := auth.SignJWT([]byte(secret32), map[string]any{"sub": "ada", "exp": exp, "scopes": scopes})
		r := httpsynctest.NewReplica(jwtClient(base, tok), schema.MustDemo())
		r.Subscribe("s", "todos", map[string][]string{"list_id": {"groceries"}})
		return r.CatchUp(ctx)
	}
	if err := pull(map[string][]string{"list_id": {"groceries"}}); err != nil {
		t.Fatalf("a token with the schema's variable: %v", err)
	}
	for _, scopes := range []map[string][]string{
		{"project_id": {"p1"}},
		{"list_id": {"groceries"}, "project_id": {"p1"}},
	} {
		err := pull(scopes)
		e := syncerr.As(err)
		if e.Code != syncerr.AuthRequired || !strings.Contains(fmt.Sprint(e.Err), "401") || !strings.Contains(e.Message, "project_id") {
			t.Fatalf("scopes %v: %v, want HTTP 401 sync.auth_required naming project_id", scopes, err)
		}
	}
}
