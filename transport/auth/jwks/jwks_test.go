package jwks_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/synclane/synclane/transport/auth/jwks"
	"github.com/synclane/synclane/transport/auth/jwks/jwkstest"
)

// clock is a manual clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newSet(t *testing.T, srv *jwkstest.Server, clk *clock, o jwks.Options) *jwks.KeySet {
	t.Helper()
	o.URL = srv.URL
	o.Now = clk.Now
	s, err := jwks.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

var ctx = context.Background()

// A kid that appears in the JWKS after the first fetch is found after one
// refetch; an unknown kid refetches at most once per MinRefetch, however
// many lookups ask for it.
func TestRotationAndUnknownKidRefetchBound(t *testing.T) {
	a, b := jwkstest.NewEC("a", "ES256"), jwkstest.NewEC("b", "ES256")
	srv := jwkstest.NewServer(a)
	defer srv.Close()
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	s := newSet(t, srv, clk, jwks.Options{})
	if err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if ks, err := s.Lookup(ctx, "a"); err != nil || len(ks) != 1 {
		t.Fatalf("lookup a: %v %v", ks, err)
	}
	if srv.Hits() != 1 {
		t.Fatalf("hits %d, want 1 (a cached kid does not refetch)", srv.Hits())
	}

	// Within MinRefetch of the last fetch an unknown kid does not refetch.
	srv.SetKeys(a, b)
	for range 5 {
		if _, err := s.Lookup(ctx, "b"); !errors.Is(err, jwks.ErrUnknownKey) {
			t.Fatalf("lookup b within the interval: %v, want ErrUnknownKey", err)
		}
	}
	if srv.Hits() != 1 {
		t.Fatalf("hits %d, want 1 within the refetch interval", srv.Hits())
	}
	// After it, one refetch finds the rotated key.
	clk.Advance(jwks.DefaultMinRefetch)
	if ks, err := s.Lookup(ctx, "b"); err != nil || len(ks) != 1 || ks[0].ID != "b" {
		t.Fatalf("lookup b after the interval: %v %v", ks, err)
	}
	if srv.Hits() != 2 {
		t.Fatalf("hits %d, want 2", srv.Hits())
	}

	// Concurrent lookups of a made-up kid: one refetch among them all.
	clk.Advance(jwks.DefaultMinRefetch)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			_, err := s.Lookup(ctx, "nope")
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, jwks.ErrUnknownKey) {
			t.Fatalf("lookup nope: %v, want ErrUnknownKey", err)
		}
	}
	if srv.Hits() != 3 {
		t.Fatalf("hits %d after 20 concurrent unknown-kid lookups, want 3 (one refetch)", srv.Hits())
	}
	if s.Fetches() != 3 {
		t.Fatalf("Fetches() = %d, want 3", s.Fetches())
	}
}

// When the JWKS cannot be fetched nothing is trusted: a never-fetched set
// and an unknown kid whose refetch failed are unavailable; cached keys
// serve while refreshes fail, until MaxAge.
func TestUnavailableFailsClosed(t *testing.T) {
	a := jwkstest.NewEd25519("a")
	srv := jwkstest.NewServer(a)
	defer srv.Close()
	clk := &clock{t: time.Unix(1_800_000_000, 0)}

	srv.SetStatus(http.StatusServiceUnavailable)
	s := newSet(t, srv, clk, jwks.Options{MaxAge: time.Hour})
	if err := s.Refresh(ctx); err == nil || !strings.Contains(err.Error(), "HTTP 503") {
		t.Fatalf("refresh of a failing JWKS: %v", err)
	}
	if _, err := s.Lookup(ctx, "a"); !errors.Is(err, jwks.ErrUnavailable) {
		t.Fatalf("lookup, never fetched: %v, want ErrUnavailable", err)
	}

	srv.SetStatus(http.StatusOK)
	clk.Advance(jwks.DefaultMinRefetch)
	if _, err := s.Lookup(ctx, "a"); err != nil {
		t.Fatalf("lookup once the JWKS answers: %v", err)
	}

	srv.Close() // the provider goes away
	clk.Advance(jwks.DefaultMinRefetch)
	if err := s.Refresh(ctx); err == nil {
		t.Fatal("refresh of a closed server succeeded")
	}
	if _, err := s.Lookup(ctx, "a"); err != nil {
		t.Fatalf("cached key while refreshes fail: %v", err)
	}
	if _, err := s.Lookup(ctx, "other"); !errors.Is(err, jwks.ErrUnavailable) {
		t.Fatalf("unknown kid with a failed refetch: %v, want ErrUnavailable", err)
	}
	clk.Advance(time.Hour)
	if _, err := s.Lookup(ctx, "a"); !errors.Is(err, jwks.ErrUnavailable) {
		t.Fatalf("cached key older than MaxAge: %v, want ErrUnavailable", err)
	}
}

// A body over MaxBodyBytes fails the fetch (the default 1 MiB, and a
// smaller option); one at the limit is read.
func TestBodyLimit(t *testing.T) {
	a := jwkstest.NewEC("a", "ES384")
	set := jwkstest.Set(a)
	padTo := func(n int) []byte { // valid JSON of exactly n bytes
		return append(bytes.Repeat([]byte(" "), n-len(set)), set...)
	}
	cases := []struct {
		name  string
		limit int64
		size  int
		ok    bool
	}{
		{"default limit, 1 MiB", 0, 1 << 20, true},
		{"default limit, 1 MiB + 1", 0, 1<<20 + 1, false},
		{"4 KiB limit, at it", 4096, 4096, true},
		{"4 KiB limit, over", 4096, 4097, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := jwkstest.NewServer()
			defer srv.Close()
			srv.SetBody(padTo(tc.size))
			s := newSet(t, srv, &clock{t: time.Unix(1_800_000_000, 0)}, jwks.Options{MaxBodyBytes: tc.limit})
			err := s.Refresh(ctx)
			if tc.ok != (err == nil) {
				t.Fatalf("refresh: %v, want ok=%v", err, tc.ok)
			}
			if !tc.ok {
				if !strings.Contains(err.Error(), "larger than") {
					t.Fatalf("refresh: %v, want a size error", err)
				}
				if _, err := s.Lookup(ctx, "a"); !errors.Is(err, jwks.ErrUnavailable) {
					t.Fatalf("lookup after an oversized body: %v, want ErrUnavailable", err)
				}
			}
		})
	}
}

// A server that never answers fails the fetch within FetchTimeout.
func TestFetchTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := jwkstest.NewServer()
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer srv.Close()
	defer close(release)
	s := newSet(t, srv, &clock{t: time.Unix(1_800_000_000, 0)}, jwks.Options{FetchTimeout: 100 * time.Millisecond})
	err := s.Refresh(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("refresh of a silent server: %v, want a deadline error", err)
	}
}

// Keys that cannot verify signatures are skipped: symmetric, encryption,
// short RSA, off-curve EC, a JWK alg that does not fit its kty. A set of
// nothing else fails the fetch.
func TestUnusableKeysSkipped(t *testing.T) {
	ok := jwkstest.NewEd25519("ok")
	rsaKey := jwkstest.NewRSA("pinned", "RS256").JWK()
	rsaKey["alg"] = "ES256"
	ec := jwkstest.NewEC("offcurve", "ES256").JWK()
	ec["y"] = ec["x"]
	enc := jwkstest.NewRSA("enc", "RS256").JWK()
	enc["use"] = "enc"
	short, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	shortJWK := (&jwkstest.Signer{Kid: "short", Alg: "RS256", Key: short}).JWK()
	bad := []string{
		`{"kty":"oct","kid":"hmac","k":"c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"}`,
		mustJSON(enc),
		mustJSON(shortJWK),
		mustJSON(ec),
		mustJSON(rsaKey),
		`{"kty":"OKP","kid":"x25519","crv":"X25519","x":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}`,
		`{"kty":"EC","kid":"secp256k1","crv":"secp256k1","x":"AA","y":"AA"}`,
	}
	srv := jwkstest.NewServer()
	defer srv.Close()
	srv.SetBody([]byte(`{"keys":[` + strings.Join(append(bad, mustJSON(ok.JWK())), ",") + `]}`))
	s := newSet(t, srv, &clock{t: time.Unix(1_800_000_000, 0)}, jwks.Options{})
	if err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	ks, err := s.Lookup(ctx, "")
	if err != nil || len(ks) != 1 || ks[0].ID != "ok" {
		t.Fatalf("usable keys %v (%v), want only ok", ks, err)
	}

	srv.SetBody([]byte(`{"keys":[` + strings.Join(bad, ",") + `]}`))
	if err := s.Refresh(ctx); err == nil || !strings.Contains(err.Error(), "no usable") {
		t.Fatalf("refresh of a set without usable keys: %v", err)
	}
	srv.SetBody([]byte(`<html>`))
	if err := s.Refresh(ctx); err == nil || !strings.Contains(err.Error(), "not a JSON key set") {
		t.Fatalf("refresh of HTML: %v", err)
	}
}

// The background refresh picks up a new key without any lookup asking,
// and Close stops it: no fetch after Close returns.
func TestBackgroundRefreshAndClose(t *testing.T) {
	a, b := jwkstest.NewEd25519("a"), jwkstest.NewEd25519("b")
	srv := jwkstest.NewServer(a)
	defer srv.Close()
	clk := &clock{t: time.Unix(1_800_000_000, 0)} // never advances: lookups never refetch
	s := newSet(t, srv, clk, jwks.Options{RefreshInterval: 10 * time.Millisecond})
	if err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	srv.SetKeys(a, b)
	s.Start(ctx)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := s.Lookup(ctx, "b"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the background refresh did not pick up kid b within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.Close()
	n := s.Fetches()
	// The refresh goroutine has returned; a lookup of a cached kid
	// fetches nothing either.
	if _, err := s.Lookup(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if s.Fetches() != n || srv.Hits() != n {
		t.Fatalf("fetches %d, hits %d after Close, want %d", s.Fetches(), srv.Hits(), n)
	}
	s.Close() // twice is fine
}

// A context ending stops the background refresh too; Close then returns.
func TestBackgroundRefreshStopsWithContext(t *testing.T) {
	srv := jwkstest.NewServer(jwkstest.NewEd25519("a"))
	defer srv.Close()
	s, err := jwks.New(jwks.Options{URL: srv.URL, RefreshInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithCancel(ctx)
	s.Start(c)
	cancel()
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return after the context ended")
	}
}

func TestNewRefusesBadURLs(t *testing.T) {
	for _, u := range []string{"", "jwks.json", "ftp://idp/jwks", "https://", "file:///etc/jwks"} {
		if _, err := jwks.New(jwks.Options{URL: u}); err == nil {
			t.Errorf("New(%q) succeeded", u)
		}
	}
}

func mustJSON(v map[string]any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
