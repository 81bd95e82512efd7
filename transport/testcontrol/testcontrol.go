// Package testcontrol is the test-only control surface of `synclane serve
// --test-control`: a few HTTP endpoints under /_test/ that let an external
// conformance harness set up and inspect a server it drives through the
// real protocol surface (POST /sync and the rest). No production client
// can reach it: the server refuses to start it unless authentication is
// development auth and it listens on a loopback address.
//
// The surface owns the hooks the server is built with: a virtual Clock
// (every timestamp the engine writes reads it), a Resolver whose allowed
// scopes the harness sets per actor (an actor it never set holds nothing)
// and that can fail or signal an outage (auth leases), the declarative
// validator Rules (rules.go), and an IdempotencyFault the engine consults
// at each idempotency read. It also moves the engine's blob presign
// switch (blobs.go). The engine runs the production store and its
// transactions: the surface wraps nothing.
// Endpoints of features synclane does not have yet answer 501 with
// {"code":"test.unsupported"}.
package testcontrol

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/synclane/synclane/engine"
)

// Clock is a virtual clock: it starts at a given instant and moves only
// when Advance is called. It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock reading startMs (Unix milliseconds).
func NewClock(startMs int64) *Clock { return &Clock{now: time.UnixMilli(startMs)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (d must not be negative) and returns
// the new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// ErrResolverFailing is what the Resolver returns while it is set to fail.
var ErrResolverFailing = errors.New("testcontrol: the scope resolver is set to fail")

// errResolverOutage is what the Resolver returns during an outage.
var errResolverOutage = fmt.Errorf("testcontrol: the scope resolver is set to an outage: %w", engine.ErrResolverOutage)

// Resolver is an engine.ScopeResolver whose grants a harness sets per
// actor: an actor never set holds no scope (its subscriptions are revoked
// and its writes forbidden). It is safe for concurrent use.
type Resolver struct {
	mu      sync.RWMutex
	grants  map[string]map[string][]string
	failing atomic.Bool
	outage  atomic.Bool
}

// NewResolver returns a resolver that grants nothing to anyone.
func NewResolver() *Resolver { return &Resolver{grants: map[string]map[string][]string{}} }

// Set replaces actor's grants (scope variable → values, "*" = any value;
// an empty map grants nothing).
func (r *Resolver) Set(actor string, grants map[string][]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.grants[actor] = grants
}

// SetFailing makes every resolution fail (true) or succeed again (false).
func (r *Resolver) SetFailing(failing bool) { r.failing.Store(failing) }

// SetOutage makes every resolution signal an outage (an error wrapping
// engine.ErrResolverOutage: rounds are authorized by the client's auth
// lease) or ends it. An outage takes precedence over SetFailing.
func (r *Resolver) SetOutage(outage bool) { r.outage.Store(outage) }

// ResolveScopes implements engine.ScopeResolver.
func (r *Resolver) ResolveScopes(_ context.Context, id engine.Identity) (map[string][]string, error) {
	if r.outage.Load() {
		return nil, errResolverOutage
	}
	if r.failing.Load() {
		return nil, ErrResolverFailing
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	g := r.grants[id.ActorID]
	out := make(map[string][]string, len(g))
	for k, v := range g {
		out[k] = append([]string(nil), v...)
	}
	return out, nil
}

// IdempotencyFault is the one-shot fault of POST
// /_test/fail-next-idempotency-lookup. Its Take is the engine's
// Config.IdempotencyFault: the next authoritative idempotency read of a
// pushed commit (or command) after Arm answers an unreadable record, so
// the commit is answered rejected with the retryable
// sync.idempotency_cache_miss and nothing is persisted for it. The store
// and its transactions are the production ones: nothing is wrapped. It is
// safe for concurrent use.
type IdempotencyFault struct{ armed atomic.Bool }

// Arm makes the next idempotency read fail (one read; arming twice before
// it is used still fails one read).
func (f *IdempotencyFault) Arm() { f.armed.Store(true) }

// Take reports whether the fault is armed and disarms it: true for
// exactly one call after Arm.
func (f *IdempotencyFault) Take() bool { return f.armed.CompareAndSwap(true, false) }
