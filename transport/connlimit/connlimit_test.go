package connlimit_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/synclane/synclane/internal/promtext"
	"github.com/synclane/synclane/transport/connlimit"
	"github.com/synclane/synclane/transport/httperr"
)

// server serves h on a loopback listener capped at max connections.
func server(t *testing.T, maxConns int, h http.Handler) (*connlimit.Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := connlimit.New(ln, connlimit.Options{Max: maxConns, RefuseTimeout: 500 * time.Millisecond})
	srv := &http.Server{Handler: h, ConnState: cl.ConnState, IdleTimeout: time.Minute, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(cl) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return cl, ln.Addr().String()
}

// rawGet opens a connection, sends GET path (keep-alive) and reads the
// answer; the connection is returned open.
func rawGet(t *testing.T, addr, path string) (net.Conn, *http.Response) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second)) // a hang fails the test instead of blocking it
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s: no answer: %v", path, err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body = io.NopCloser(strings.NewReader(string(b)))
	_ = c.SetDeadline(time.Time{})
	return c, res
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func ok(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }

// Over the cap with every connection busy, a new connection gets a 503
// with the protocol's sync.rate_limited error and Retry-After at once (not
// a hang), and is closed.
func TestRefusedWith503WhenAllBusy(t *testing.T) {
	const capN = 3
	release := make(chan struct{})
	entered := make(chan struct{}, capN)
	mux := http.NewServeMux()
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	})
	mux.HandleFunc("/healthz", ok)
	cl, addr := server(t, capN, mux)
	defer close(release)
	for range capN {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		<-entered
	}
	c, res := rawGet(t, addr, "/healthz")
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "1" {
		t.Fatalf("over the cap: %d, Retry-After %q; want 503 and 1", res.StatusCode, res.Header.Get("Retry-After"))
	}
	var body httperr.Body
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body.Code != "sync.rate_limited" || !body.Retryable || body.RecommendedAction != "retryLater" || !strings.Contains(body.Message, "3 open connections") {
		t.Fatalf("refusal body %+v", body)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("refused connection still open: %d, %v", n, err)
	}
	if st := cl.Stats(); st.Refused != 1 || st.Open != capN || st.Evicted != 0 {
		t.Fatalf("stats %+v, want 1 refused, %d open, none evicted", st, capN)
	}
	b, err := promtext.Collect(cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"synclane_http_connections_open 3", "synclane_http_connections_refused_total 1"} {
		if !promtext.Has(b, line) {
			t.Fatalf("metrics lack %q:\n%s", line, b)
		}
	}
}

// When idle keep-alive connections (and connections that never sent a
// byte) hold the cap, an honest prober still gets its answer: the oldest
// idle connection is closed to admit it.
func TestIdleConnectionsEvictedForHonestRequest(t *testing.T) {
	const capN = 8
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", ok)
	cl, addr := server(t, capN, mux)
	var hostile []net.Conn
	for i := range capN {
		if i%2 == 0 {
			c, res := rawGet(t, addr, "/healthz") // one request, then idle keep-alive
			if res.StatusCode != http.StatusOK {
				t.Fatalf("hostile request %d: %d", i, res.StatusCode)
			}
			hostile = append(hostile, c)
			continue
		}
		c, err := net.Dial("tcp", addr) // silent
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		hostile = append(hostile, c)
	}
	waitFor(t, "the cap held by idle connections", func() bool { st := cl.Stats(); return st.Open == capN && st.Idle == capN })
	for i := range 3 {
		_, res := rawGet(t, addr, "/healthz")
		if res.StatusCode != http.StatusOK {
			t.Fatalf("honest probe %d while idle connections hold the cap: %d", i, res.StatusCode)
		}
	}
	st := cl.Stats()
	if st.Evicted != 3 || st.Refused != 0 || st.Open > capN {
		t.Fatalf("stats %+v: want 3 evicted, none refused, at most %d open", st, capN)
	}
	// The oldest hostile connection was the one evicted first.
	_ = hostile[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := hostile[0].Read(make([]byte, 1)); err == nil {
		t.Fatal("the oldest idle connection was not closed")
	}
}

// A slot is released when its connection closes, whoever closes it: after
// churn nothing is counted.
func TestSlotsReleasedOnClose(t *testing.T) {
	const capN = 4
	cl, addr := server(t, capN, http.HandlerFunc(ok))
	for round := range 5 {
		var conns []net.Conn
		for range capN {
			c, res := rawGet(t, addr, "/")
			if res.StatusCode != http.StatusOK {
				t.Fatalf("round %d: %d", round, res.StatusCode)
			}
			conns = append(conns, c)
		}
		for _, c := range conns {
			c.Close()
		}
		waitFor(t, "every slot released", func() bool { return cl.Stats().Open == 0 })
	}
	if st := cl.Stats(); st.Refused != 0 || st.Accepted != 5*capN {
		t.Fatalf("stats %+v", st)
	}
}

// A refused client that never reads cannot pin the refusal past its
// deadline: Close returns.
func TestRefusalToNonReaderEnds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := connlimit.New(ln, connlimit.Options{Max: 1, RefuseTimeout: 200 * time.Millisecond})
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := cl.Accept()
		if err == nil {
			accepted <- c
		}
		_, _ = cl.Accept() // refuses the second, then fails once closed
	}()
	first, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	held := <-accepted
	defer held.Close()
	second, err := net.Dial("tcp", ln.Addr().String()) // sends nothing, reads nothing
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	waitFor(t, "the refusal", func() bool { return cl.Stats().Refused == 1 })
	done := make(chan struct{})
	go func() { _ = cl.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close still waits for a refusal to a client that does not read")
	}
}
