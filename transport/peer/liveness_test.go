package peer

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
)

// A refusal of this member's call (401 or 403, whatever its body) is an
// unreachable owner, never the callee's sync.auth_required: every call
// kind returns an error wrapping engine.ErrPeerUnreachable and
// ErrRefused (and ErrClockSkew when the callee says the clocks are the
// reason), whose protocol code is not sync.auth_required.
func TestRefusalMapsToUnreachable(t *testing.T) {
	secret, _ := NewSecret([]byte("cluster secret"))
	cases := []struct {
		name   string
		status int
		body   string
		skew   bool
	}{
		{"401 signature", 401, `{"code":"sync.auth_required","category":"auth-required","retryable":true,"recommendedAction":"refreshAuth","message":"member routes need the cluster secret","details":{"reason":"signature"}}`, false},
		{"401 clock skew", 401, `{"code":"sync.auth_required","message":"m","details":{"reason":"clock_skew"}}`, true},
		{"401 without details", 401, `{"code":"sync.auth_required","message":"member routes need the cluster secret"}`, false},
		{"401 plain text", 401, "member call not signed with the cluster secret\n", false},
		{"403", 403, `{"code":"sync.forbidden","message":"no"}`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			c, err := NewClient(ClientOptions{Self: "http://caller", Secret: secret})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			id := engine.Identity{ActorID: "u1", Partition: "p1"}
			calls := map[string]func() error{
				"sync": func() error {
					_, err := c.Sync(ctx, srv.URL, id, []byte("x"))
					return err
				},
				"client state": func() error { _, err := c.ClientState(ctx, srv.URL, id, "c1"); return err },
				"deltas":       func() error { _, err := c.BuildDeltas(ctx, srv.URL, "p1", engine.DeltaRequest{}); return err },
				"ack":          func() error { return c.Ack(ctx, srv.URL, "p1", nil) },
				"operation":    func() error { _, err := c.Operation(ctx, srv.URL, id, []byte("x")); return err },
				"release":      func() error { return c.Release(ctx, srv.URL, "p1") },
				"member":       func() error { _, err := c.Member(ctx, srv.URL); return err },
				"events":       func() error { _, err := c.Events(ctx, srv.URL, 0, 1); return err },
				"probe":        func() error { return c.Probe(ctx, srv.URL) },
			}
			for name, call := range calls {
				err := call()
				routed := name != "probe"
				if !errors.Is(err, ErrRefused) || routed != errors.Is(err, engine.ErrPeerUnreachable) ||
					tc.skew != errors.Is(err, ErrClockSkew) || syncerr.CodeOf(err) == syncerr.AuthRequired || syncerr.CodeOf(err) == syncerr.Forbidden {
					t.Errorf("%s: %v (code %s), want ErrRefused (clock skew %v), unreachable %v, never the callee's code", name, err, syncerr.CodeOf(err), tc.skew, routed)
				}
			}
		})
	}
}

// A member started with another secret is refused by Probe (ErrRefused,
// not unreachable); one with the same secret is accepted; a member that
// does not answer is unreachable.
func TestProbe(t *testing.T) {
	secret, _ := NewSecret([]byte("cluster secret"))
	other, _ := NewSecret([]byte("another secret"))
	_, srv := member(t, secret)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		secret  Secret
		refused bool
	}{{"same secret", secret, false}, {"another secret", other, true}} {
		c, _ := NewClient(ClientOptions{Self: "http://caller", Secret: tc.secret})
		err := c.Probe(ctx, srv.URL)
		c.Close()
		if tc.refused != (err != nil) || tc.refused != errors.Is(err, ErrRefused) || errors.Is(err, engine.ErrPeerUnreachable) {
			t.Errorf("%s: Probe = %v, want refused %v", tc.name, err, tc.refused)
		}
	}
	c, _ := NewClient(ClientOptions{Self: "http://caller", Secret: secret})
	defer c.Close()
	addr := srv.URL
	srv.Close()
	if err := c.Probe(ctx, addr); !errors.Is(err, engine.ErrPeerUnreachable) || errors.Is(err, ErrRefused) {
		t.Fatalf("Probe of a closed member = %v, want ErrPeerUnreachable", err)
	}
}

// frozenMember is a listener whose connections are accepted (by the
// kernel, as for a SIGSTOPped process) and never answered.
func frozenMember(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() { // owned by the test: ends when ln is closed
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

// A call to a member that takes the request and never answers (frozen)
// fails with ErrUnresponsive (engine.ErrPeerUnreachable) after about
// UnresponsiveTimeout, and the next one after about half of it, while
// Timeout (the wait for a live owner) is much longer; a member that is
// slow to answer but answers its probes is waited for, past
// UnresponsiveTimeout; once the frozen member answers probes again,
// calls to it succeed.
func TestUnresponsiveMember(t *testing.T) {
	const unresponsive = 400 * time.Millisecond
	secret, _ := NewSecret([]byte("cluster secret"))
	for _, proto := range []string{ProtocolFrames, ProtocolHTTP1, ProtocolH2} {
		t.Run(proto, func(t *testing.T) {
			c, err := NewClient(ClientOptions{Self: "http://caller", Secret: secret, Protocol: proto, Timeout: 30 * time.Second, UnresponsiveTimeout: unresponsive})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			id := engine.Identity{ActorID: "u1", Partition: "p1"}

			frozen := frozenMember(t)
			for i, limit := range []time.Duration{unresponsive, unresponsive / 2} {
				start := time.Now()
				_, err := c.Sync(ctx, frozen, id, request(t, "c1", "", &ssp2.PullHeader{Accept: 1}))
				took := time.Since(start)
				if !errors.Is(err, ErrUnresponsive) || !errors.Is(err, engine.ErrPeerUnreachable) {
					t.Fatalf("call %d to a frozen member: %v after %v, want ErrUnresponsive", i, err, took)
				}
				if took < limit*3/4 || took > limit+time.Second {
					t.Fatalf("call %d to a frozen member failed after %v, want about %v", i, took, limit)
				}
			}

			if proto == ProtocolFrames {
				return // the slow member below is a plain HTTP server: see TestFramesSlowOwnerIsWaitedFor
			}
			// Slow but alive: the answer starts after 3 unresponsive
			// timeouts, the probes are answered at once.
			release := make(chan struct{})
			slow := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == pathProbe {
					w.Header().Set("Content-Type", "application/json")
					_, _ = io.WriteString(w, "{}")
					return
				}
				select {
				case <-release:
				case <-r.Context().Done():
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"exists":true}`)
			}))
			slow.Config.Protocols = new(http.Protocols)
			slow.Config.Protocols.SetHTTP1(true)
			slow.Config.Protocols.SetUnencryptedHTTP2(true)
			slow.Start()
			defer slow.Close()
			t0 := time.AfterFunc(3*unresponsive, func() { close(release) })
			defer t0.Stop()
			start := time.Now()
			st, err := c.ClientState(ctx, slow.URL, id, "c1")
			if err != nil || !st.Exists || time.Since(start) < 3*unresponsive {
				t.Fatalf("a slow member that answers its probes: %+v, %v after %v, want its answer after %v", st, err, time.Since(start), 3*unresponsive)
			}
		})
	}
}

// The probe state forgets nothing it needs: a member that answered its
// probe is not probed again within half the timeout (one probe for many
// calls waiting at once).
func TestProbesAreSingleFlight(t *testing.T) {
	secret, _ := NewSecret([]byte("cluster secret"))
	var mu sync.Mutex
	probes := 0
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == pathProbe {
			mu.Lock()
			probes++
			mu.Unlock()
			_, _ = io.WriteString(w, "{}")
			return
		}
		<-release
		_, _ = io.WriteString(w, "{}")
	}))
	defer srv.Close()
	const unresponsive = time.Second
	c, _ := NewClient(ClientOptions{Self: "http://caller", Secret: secret, UnresponsiveTimeout: unresponsive})
	defer c.Close()
	var wg sync.WaitGroup
	errs := make([]error, 50)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Ack(context.Background(), srv.URL, "p1", nil)
		}()
	}
	t0 := time.AfterFunc(unresponsive*3/4, func() { close(release) }) // after the first probe round, before the second
	defer t0.Stop()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if probes != 1 {
		t.Fatalf("%d probes for 50 calls waiting at once, want 1", probes)
	}
}
