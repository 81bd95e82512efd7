// Package jwks fetches and caches the JSON Web Key Set an identity
// provider publishes (RFC 7517), for verifying the RS*/PS*, ES* and EdDSA
// JWTs it signs: a bounded fetch (timeout, body size), a cache refreshed
// periodically and on an unknown kid (at most once per interval), and
// failure that never falls back to accepting anything.
package jwks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Defaults of Options.
const (
	DefaultFetchTimeout    = 10 * time.Second
	DefaultRefreshInterval = 5 * time.Minute
	DefaultMinRefetch      = 30 * time.Second
	DefaultMaxAge          = time.Hour
	DefaultMaxBodyBytes    = 1 << 20
)

// ErrUnavailable is wrapped by Lookup's error when the key set cannot be
// trusted to answer: it was never fetched, its last good copy is older
// than Options.MaxAge, or the kid is unknown and the refetch failed. The
// token may be fine; the caller should answer "try later", not "bad
// token".
var ErrUnavailable = errors.New("the JWKS is unavailable")

// ErrUnknownKey is wrapped by Lookup's error when a fresh key set has no
// key with the token's kid.
var ErrUnknownKey = errors.New("no JWKS key has this kid")

// Options configure a KeySet. Zero values take the defaults.
type Options struct {
	// URL is the JWKS address (http or https; required).
	URL string
	// Client makes the requests (default: a client of its own; every
	// fetch is bounded by FetchTimeout whatever the client).
	Client *http.Client
	// FetchTimeout bounds one fetch, connecting to reading the last byte
	// (default 10s).
	FetchTimeout time.Duration
	// RefreshInterval is the period of the background refresh Start runs
	// (default 5m). Cache-Control is not consulted: a rotated key is
	// picked up by the unknown-kid refetch.
	RefreshInterval time.Duration
	// MinRefetch is the least time between two fetches a lookup triggers
	// (an unknown kid, or no usable key set; default 30s): tokens with
	// made-up kids cannot make the key set hammer the provider.
	MinRefetch time.Duration
	// MaxAge is how long after its last successful fetch a key set is
	// still used while refreshes fail (default 1h, or three
	// RefreshIntervals when that is longer); after it lookups fail with
	// ErrUnavailable until a fetch succeeds.
	MaxAge time.Duration
	// MaxBodyBytes caps the JWKS response body (default 1 MiB); a larger
	// one fails the fetch.
	MaxBodyBytes int64
	// Logger receives fetch failures and refreshes (default: nothing).
	Logger *zap.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// KeySet is a cached JWKS. Its methods are safe for concurrent use. Start
// runs a background refresh that Close (or the context given to Start)
// stops.
type KeySet struct {
	o Options

	fetchMu sync.Mutex // one fetch at a time

	mu          sync.Mutex
	keys        []Key
	fetchedAt   time.Time // last successful fetch (zero: never)
	attemptedAt time.Time // last fetch attempt, successful or not
	lastErr     error     // error of the last attempt (nil when it succeeded)
	fetches     int

	startOnce sync.Once
	cancel    context.CancelFunc // set by Start; ends the refresh
	done      chan struct{}      // closed when the refresh returns
}

// New returns a key set for o.URL; nothing is fetched until Refresh,
// Start or Lookup. It fails when the URL is not an absolute http(s) URL.
func New(o Options) (*KeySet, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("JWKS URL %q: want an absolute https:// (or http://) URL", o.URL)
	}
	if o.Client == nil {
		o.Client = &http.Client{}
	}
	if o.FetchTimeout <= 0 {
		o.FetchTimeout = DefaultFetchTimeout
	}
	if o.RefreshInterval <= 0 {
		o.RefreshInterval = DefaultRefreshInterval
	}
	if o.MinRefetch <= 0 {
		o.MinRefetch = DefaultMinRefetch
	}
	if o.MaxAge <= 0 {
		o.MaxAge = max(DefaultMaxAge, 3*o.RefreshInterval)
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &KeySet{o: o, done: make(chan struct{})}, nil
}

// Refresh fetches the key set now (bounded by FetchTimeout and ctx). On
// success the new keys replace the cached ones; on failure the cached
// keys stay (until MaxAge) and the error is returned.
func (s *KeySet) Refresh(ctx context.Context) error {
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	return s.fetchLocked(ctx)
}

func (s *KeySet) fetchLocked(ctx context.Context) error {
	keys, err := s.fetch(ctx)
	now := s.o.Now()
	s.mu.Lock()
	s.attemptedAt, s.lastErr = now, err
	s.fetches++
	if err == nil {
		s.keys, s.fetchedAt = keys, now
	}
	s.mu.Unlock()
	if err != nil {
		s.o.Logger.Warn("JWKS fetch failed", zap.String("jwks_url", s.o.URL), zap.Error(err))
		return err
	}
	s.o.Logger.Debug("JWKS fetched", zap.String("jwks_url", s.o.URL), zap.Int("keys", len(keys)))
	return nil
}

// fetch reads and parses the JWKS once.
func (s *KeySet) fetch(ctx context.Context) ([]Key, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.o.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("JWKS request: %w", err)
	}
	req.Header.Set("Accept", "application/json, application/jwk-set+json")
	resp, err := s.o.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch JWKS (timeout %s): %w", s.o.FetchTimeout, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch JWKS: HTTP %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, s.o.MaxBodyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read JWKS (timeout %s): %w", s.o.FetchTimeout, err)
	}
	if int64(len(body)) > s.o.MaxBodyBytes {
		return nil, fmt.Errorf("JWKS body is larger than %d bytes", s.o.MaxBodyBytes)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("JWKS is not a JSON key set: %w", err)
	}
	keys := make([]Key, 0, len(set.Keys))
	for i, raw := range set.Keys {
		k, err := parseKey(raw)
		if err != nil {
			lvl := zap.WarnLevel
			if errors.Is(err, errSkip) {
				lvl = zap.DebugLevel
			}
			s.o.Logger.Log(lvl, "JWKS key skipped", zap.String("jwks_url", s.o.URL), zap.Int("index", i), zap.String("kid", k.ID), zap.Error(err))
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("JWKS has no usable signature key (of %d)", len(set.Keys))
	}
	return keys, nil
}

// Lookup returns the cached keys with this kid (every key when kid is
// empty). When none has it, or the cache is empty or older than MaxAge,
// it refetches first, unless the last fetch was less than MinRefetch ago.
// It fails with ErrUnavailable when the set cannot be trusted (never
// fetched, too old, or the last fetch failed and the kid is unknown), and
// with ErrUnknownKey when a good set lacks the kid.
func (s *KeySet) Lookup(ctx context.Context, kid string) ([]Key, error) {
	if ks, ok := s.cached(kid); ok {
		return ks, nil
	}
	s.fetchMu.Lock()
	// Another lookup may have refreshed while this one waited.
	if ks, ok := s.cached(kid); ok {
		s.fetchMu.Unlock()
		return ks, nil
	}
	s.mu.Lock()
	due := s.attemptedAt.IsZero() || s.o.Now().Sub(s.attemptedAt) >= s.o.MinRefetch
	s.mu.Unlock()
	if due {
		// A refetch serves every request waiting on it: the caller going
		// away does not cancel it (FetchTimeout bounds it).
		_ = s.fetchLocked(context.WithoutCancel(ctx))
	}
	s.fetchMu.Unlock()
	if ks, ok := s.cached(kid); ok {
		return ks, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.fetchedAt.IsZero():
		return nil, fmt.Errorf("%w: never fetched: %w", ErrUnavailable, s.lastErr)
	case s.o.Now().Sub(s.fetchedAt) > s.o.MaxAge:
		return nil, fmt.Errorf("%w: last fetched %s ago (more than %s): %w", ErrUnavailable, s.o.Now().Sub(s.fetchedAt).Round(time.Second), s.o.MaxAge, s.lastErr)
	case s.lastErr != nil:
		return nil, fmt.Errorf("%w: kid %q unknown and the refetch failed: %w", ErrUnavailable, kid, s.lastErr)
	}
	return nil, fmt.Errorf("%w: kid %q (refetched at most every %s)", ErrUnknownKey, kid, s.o.MinRefetch)
}

// cached returns the keys with kid from a set younger than MaxAge.
func (s *KeySet) cached(kid string) ([]Key, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fetchedAt.IsZero() || s.o.Now().Sub(s.fetchedAt) > s.o.MaxAge {
		return nil, false
	}
	var out []Key
	for _, k := range s.keys {
		if kid == "" || k.ID == kid {
			out = append(out, k)
		}
	}
	return out, len(out) > 0
}

// Fetches returns how many fetches were attempted (metrics, tests).
func (s *KeySet) Fetches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fetches
}

// Start runs the background refresh, one fetch every RefreshInterval,
// until ctx ends or Close is called. Calls after the first do nothing.
func (s *KeySet) Start(ctx context.Context) {
	s.startOnce.Do(func() {
		ctx, s.cancel = context.WithCancel(ctx)
		go s.run(ctx)
	})
}

func (s *KeySet) run(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.o.RefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = s.Refresh(ctx) // logged; cached keys stay until MaxAge
		}
	}
}

// Close stops the background refresh (cancelling a fetch in flight) and
// waits for it to return. It is safe to call more than once, and without
// Start (then a later Start does nothing).
func (s *KeySet) Close() {
	s.startOnce.Do(func() { close(s.done) })
	if s.cancel != nil {
		s.cancel()
	}
	<-s.done
}
