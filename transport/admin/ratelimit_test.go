package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	adminsvc "github.com/synclane/synclane/engine/admin"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/admin"
)

type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// newLimitedHandler is an admin handler over a memory engine with the
// default token-attempt limits on a test clock.
func newLimitedHandler(t *testing.T, limits admin.TokenAttempts) (*admin.Handler, *testClock, *engine.Engine) {
	t.Helper()
	sch, err := schema.Parse([]byte(schemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(context.Background(), engine.Config{Schema: sch, Backend: memory.New().Backend(),
		Resolver: engine.AllowAll(sch), Events: events.NewRing(0, nil), SlowRequest: -1})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := adminsvc.New(eng)
	if err != nil {
		t.Fatal(err)
	}
	clk := &testClock{t: time.Unix(1_000_000, 0)}
	h, err := admin.New(svc, admin.Options{Token: testToken, TokenAttempts: limits, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(); eng.Close() })
	return h, clk, eng
}

// call sends GET /api/overview from remote with the Authorization header
// (none when empty) and returns the answer.
func call(h http.Handler, remote, authorization string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, "/api/overview", nil)
	req.RemoteAddr = remote
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// Wrong admin tokens are rate-limited per source: a burst of 100 is
// mostly answered 429 sync.rate_limited with Retry-After; the right token
// from that source is refused too until the bucket refills (no oracle),
// then works; another source is unaffected; requests without a token are
// never limited.
func TestAdminTokenGuessesRateLimited(t *testing.T) {
	h, clk, eng := newLimitedHandler(t, admin.TokenAttempts{})
	const attacker, other = "198.51.100.9:5555", "198.51.100.10:5555"
	status := map[int]int{}
	retryAfter := ""
	for i := range 100 {
		rec := call(h, attacker, fmt.Sprintf("Bearer wrong-token-%016d", i))
		status[rec.Code]++
		if rec.Code == http.StatusTooManyRequests {
			var eb admin.ErrorBody
			if err := decodeJSON(rec.Result(), &eb); err != nil {
				t.Fatal(err)
			}
			if eb.Error.Code != "sync.rate_limited" {
				t.Fatalf("429 with code %q, want sync.rate_limited", eb.Error.Code)
			}
			retryAfter = rec.Header().Get("Retry-After")
		}
	}
	if status[http.StatusUnauthorized] != admin.DefaultTokenAttemptBurst || status[http.StatusTooManyRequests] != 100-admin.DefaultTokenAttemptBurst {
		t.Fatalf("100 wrong tokens in a burst answered %v, want %d× 401 then 429", status, admin.DefaultTokenAttemptBurst)
	}
	if n, err := strconv.Atoi(retryAfter); err != nil || n < 1 {
		t.Fatalf("429 with Retry-After %q, want whole seconds >= 1", retryAfter)
	}
	// The right token from the limited source: still refused, like a wrong one.
	if rec := call(h, attacker, "Bearer "+testToken); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("right token from a rate-limited source: status %d, want 429", rec.Code)
	}
	// Another source: unaffected, both ways.
	if rec := call(h, other, "Bearer "+testToken); rec.Code != http.StatusOK {
		t.Fatalf("right token from another source: status %d, want 200", rec.Code)
	}
	if rec := call(h, other, "Bearer wrong-token-0123456789"); rec.Code != http.StatusUnauthorized {
		t.Fatalf("wrong token from another source: status %d, want 401", rec.Code)
	}
	// No token at all is not a guess: 401, not 429.
	if rec := call(h, attacker, ""); rec.Code != http.StatusUnauthorized {
		t.Fatalf("no token from the limited source: status %d, want 401", rec.Code)
	}
	// After the Retry-After interval the right token works, and right
	// tokens do not drain the bucket.
	n, _ := strconv.Atoi(retryAfter)
	clk.add(time.Duration(n) * time.Second)
	for i := range 3 * admin.DefaultTokenAttemptBurst {
		if rec := call(h, attacker, "Bearer "+testToken); rec.Code != http.StatusOK {
			t.Fatalf("right token #%d after the interval: status %d, want 200", i, rec.Code)
		}
	}
	// Every refusal is counted, by reason.
	c := eng.AuthFailureCounts()
	if got := c[engine.AuthFailureKey{Route: "admin", Reason: "sync.rate_limited"}]; got != 100-admin.DefaultTokenAttemptBurst+1 {
		t.Fatalf("counted %d rate-limited admin attempts, want %d (%v)", got, 100-admin.DefaultTokenAttemptBurst+1, c)
	}
}

// The table of sources is bounded: beyond it, untracked sources share one
// bucket, and sources that have refilled make room again.
func TestAdminTokenLimiterBoundedSources(t *testing.T) {
	h, clk, _ := newLimitedHandler(t, admin.TokenAttempts{Rate: 1, Burst: 1, Sources: 4})
	// Four sources each use their one attempt: the table is full.
	for i := range 4 {
		if rec := call(h, fmt.Sprintf("192.0.2.%d:1", i+1), "Bearer wrong-token-0123456789"); rec.Code != http.StatusUnauthorized {
			t.Fatalf("source %d first guess: %d, want 401", i, rec.Code)
		}
	}
	// Further sources share the one "other" bucket.
	codes := map[int]int{}
	for i := range 50 {
		codes[call(h, fmt.Sprintf("192.0.2.%d:1", 100+i), "Bearer wrong-token-0123456789").Code]++
	}
	if codes[http.StatusUnauthorized] != 1 || codes[http.StatusTooManyRequests] != 49 {
		t.Fatalf("50 untracked sources answered %v, want one 401 then 429s (one shared bucket)", codes)
	}
	// Once the tracked sources have refilled, a new source gets its own bucket.
	clk.add(2 * time.Second)
	if rec := call(h, "192.0.2.200:1", "Bearer "+testToken); rec.Code != http.StatusOK {
		t.Fatalf("a new source after the table refilled: %d, want 200", rec.Code)
	}
}
