// Package lease keeps auth leases (SPEC §7.3): a server-issued,
// time-bounded record of the scopes an actor's client was last granted,
// keyed by (partition, clientId), that authorizes the client's rounds
// while the host's scope resolver signals an outage.
//
// A Keeper slides a client's lease on every round whose resolution
// succeeded (same leaseId, expiry now + TTL) and answers outage rounds
// from the stored lease. Records are signed at rest with HMAC-SHA256
// under a server key over a canonical encoding (sign.go); a record whose
// MAC fails is refused, logged, and treated as no lease.
//
// Storage cost: a slide is written only when the stored expiry has fallen
// more than TTL/SlideGranularity behind now + TTL (or the actor, grants or
// lease changed), so a client syncing every second writes its lease about
// once per TTL/64, not once per round. The LEASE frame always carries the
// stored expiry: what the client is told is what the server will honour.
// The verified records of recent rounds are cached in memory (at most
// MaxCached, an arbitrary entry evicted when full) so such rounds read no
// storage either. Outage rounds and revocations always read storage.
//
// Several processes sharing a store (PostgreSQL) need the same key. Their
// caches are not shared: after a revocation in one process, another may
// keep echoing the revoked lease on online rounds until its next slide
// write (at most TTL/SlideGranularity later) or its next outage round for
// that client, whichever comes first; then it rereads the record and
// issues a fresh lease. Outage rounds are never served from the cache, so
// a revoked lease never authorizes one.
package lease

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// Limits.
const (
	// MaxTTL is the longest lease lifetime accepted.
	MaxTTL = 30 * 24 * time.Hour
	// SlideGranularity: a slide is written once the stored expiry lags
	// now + TTL by more than TTL/SlideGranularity.
	SlideGranularity = 64
	// MaxCached bounds the verified records cached in memory.
	MaxCached = 65536
	// swapAttempts bounds the compare-and-swap retries of one slide or
	// revocation when other processes write the same lease meanwhile.
	swapAttempts = 4
)

// ErrNoLease reports a revocation of a lease that does not exist (or
// whose record fails its MAC check).
var ErrNoLease = errors.New("lease: no such lease")

// Config configures a Keeper.
type Config struct {
	// Store holds the records (required).
	Store storage.Leases
	// Key signs them: at least MinKeyBytes (required).
	Key []byte
	// TTL is the lease lifetime, 1ms..MaxTTL (required).
	TTL time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives refused records and failed writes (default no-op).
	Logger *zap.Logger
}

// Keeper issues, slides, checks and revokes leases. It is safe for
// concurrent use.
type Keeper struct {
	store  storage.Leases
	sign   signer
	ttlMs  int64
	now    func() time.Time
	log    *zap.Logger
	cache  cache
	lagMax int64 // TTL/SlideGranularity in ms
}

// New validates cfg and returns a Keeper.
func New(cfg Config) (*Keeper, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("lease: a Store is required")
	case len(cfg.Key) < MinKeyBytes:
		return nil, fmt.Errorf("lease: the signing key must be at least %d bytes", MinKeyBytes)
	case cfg.TTL < time.Millisecond || cfg.TTL > MaxTTL:
		return nil, fmt.Errorf("lease: TTL %s is outside 1ms..%s", cfg.TTL, MaxTTL)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	ttl := cfg.TTL.Milliseconds()
	return &Keeper{store: cfg.Store, sign: signer{key: bytes.Clone(cfg.Key)}, ttlMs: ttl, now: cfg.Now, log: cfg.Logger,
		cache: cache{m: map[cacheKey]storage.LeaseRecord{}}, lagMax: ttl / SlideGranularity}, nil
}

// TTL returns the lease lifetime.
func (k *Keeper) TTL() time.Duration { return time.Duration(k.ttlMs) * time.Millisecond }

// Slide is called for a round whose scope resolution succeeded: it keeps
// the client's lease (same id) valid until now + TTL with the grants just
// resolved, issuing a fresh lease (new id) when there is none, it expired,
// it was revoked, its record fails the MAC check, or it belongs to another
// actor. It returns the LEASE frame to send, which carries the stored
// expiry. On a storage failure it returns the error and the round goes on
// without a LEASE frame (the client keeps the lease it holds).
func (k *Keeper) Slide(ctx context.Context, partition, clientID, actorID string, grants map[string][]string) (*ssp2.Lease, error) {
	scopes, err := encodeScopes(grants)
	if err != nil {
		return nil, err
	}
	now := k.now().UnixMilli()
	key := cacheKey{partition, clientID}
	if c, ok := k.cache.get(key); ok && k.fresh(c, actorID, scopes, now) {
		return &ssp2.Lease{LeaseID: c.LeaseID, ExpiresAtMs: c.ExpiresAtMs}, nil
	}
	gen := k.cache.generation() // a revocation from here on wins over what this round caches
	for range swapAttempts {
		cur, err := k.store.GetLease(ctx, partition, clientID)
		if err != nil {
			return nil, fmt.Errorf("lease: read: %w", err)
		}
		var prev []byte
		next := storage.LeaseRecord{ClientID: clientID, ActorID: actorID, AllowedScopes: scopes, IssuedAtMs: now, ExpiresAtMs: now + k.ttlMs}
		if cur != nil {
			prev = cur.MAC
			if _, verr := k.sign.verify(partition, cur); verr != nil {
				k.refused(partition, cur, verr)
			} else if k.fresh(*cur, actorID, scopes, now) {
				k.cache.putIf(key, *cur, gen) // another process slid it just now
				return &ssp2.Lease{LeaseID: cur.LeaseID, ExpiresAtMs: cur.ExpiresAtMs}, nil
			} else if cur.RevokedAtMs == 0 && cur.ActorID == actorID && now < cur.ExpiresAtMs {
				next.LeaseID, next.IssuedAtMs = cur.LeaseID, cur.IssuedAtMs // slide: same id
			}
		}
		if next.LeaseID == "" {
			next.LeaseID = newID()
		}
		next = k.sign.sign(partition, next)
		ok, err := k.store.SwapLease(ctx, partition, next, prev)
		if err != nil {
			return nil, fmt.Errorf("lease: write: %w", err)
		}
		if ok {
			k.cache.putIf(key, next, gen)
			return &ssp2.Lease{LeaseID: next.LeaseID, ExpiresAtMs: next.ExpiresAtMs}, nil
		}
		// Another process wrote the lease meanwhile: read it again.
	}
	k.cache.drop(key)
	return nil, fmt.Errorf("lease: %d concurrent writes to the lease of client %s; giving up this round", swapAttempts, storage.QuoteID(clientID))
}

// fresh reports whether rec, a verified record, needs no write for a
// round of actorID with scopes at now.
func (k *Keeper) fresh(rec storage.LeaseRecord, actorID string, scopes []byte, now int64) bool {
	return rec.RevokedAtMs == 0 && rec.ActorID == actorID && bytes.Equal(rec.AllowedScopes, scopes) &&
		now < rec.ExpiresAtMs && now+k.ttlMs-rec.ExpiresAtMs <= k.lagMax
}

// Authorize is called for a round during a resolver outage: it returns
// the allowed scopes of the client's stored lease when that lease is valid
// (its MAC verifies, now < expiresAtMs, not revoked, issued to actorID).
// It never slides the lease. Otherwise it returns a request-level
// sync.auth_lease_revoked (the lease was revoked) or
// sync.auth_lease_required (no lease, an expired one, another actor's, or
// a record that fails its MAC check), or sync.internal_error when storage
// fails (fail closed).
func (k *Keeper) Authorize(ctx context.Context, partition, clientID, actorID string) (map[string][]string, error) {
	// The stored record is the truth from here on: the next online round
	// rereads it, so a revocation made by another process is seen by then.
	k.cache.drop(cacheKey{partition, clientID})
	cur, err := k.store.GetLease(ctx, partition, clientID)
	if err != nil {
		return nil, syncerr.Wrap(syncerr.InternalError, err, "the scope resolver is in an outage and the client's lease could not be read; retry")
	}
	if cur == nil {
		return nil, syncerr.New(syncerr.AuthLeaseRequired, "the scope resolver is in an outage and this client holds no lease")
	}
	grants, verr := k.sign.verify(partition, cur)
	switch {
	case verr != nil:
		k.refused(partition, cur, verr)
		return nil, syncerr.New(syncerr.AuthLeaseRequired, "the scope resolver is in an outage and this client holds no valid lease")
	case cur.RevokedAtMs != 0:
		return nil, syncerr.New(syncerr.AuthLeaseRevoked, "the scope resolver is in an outage and this client's lease was revoked")
	case cur.ActorID != actorID:
		return nil, syncerr.New(syncerr.AuthLeaseRequired, "the scope resolver is in an outage and this client's lease was issued to another actor")
	case k.now().UnixMilli() >= cur.ExpiresAtMs:
		return nil, syncerr.New(syncerr.AuthLeaseRequired, "the scope resolver is in an outage and this client's lease expired")
	}
	return grants, nil
}

// Revoke revokes the lease of clientID in partition: outage rounds on it
// fail with sync.auth_lease_revoked from then on, in every process, and
// the next online round issues a fresh lease (new id). It returns the
// revoked lease's id, or ErrNoLease. Revoking a revoked lease succeeds.
// Revocation purges nothing: it is about continued sync, not data.
func (k *Keeper) Revoke(ctx context.Context, partition, clientID string) (string, error) {
	return k.revoke(ctx, partition, func() (*storage.LeaseRecord, error) { return k.store.GetLease(ctx, partition, clientID) })
}

// RevokeID revokes the lease with leaseID in partition like Revoke; an id
// that is not the client's current lease is ErrNoLease.
func (k *Keeper) RevokeID(ctx context.Context, partition, leaseID string) error {
	_, err := k.revoke(ctx, partition, func() (*storage.LeaseRecord, error) { return k.store.FindLease(ctx, partition, leaseID) })
	return err
}

func (k *Keeper) revoke(ctx context.Context, partition string, load func() (*storage.LeaseRecord, error)) (string, error) {
	for range swapAttempts {
		cur, err := load()
		if err != nil {
			return "", fmt.Errorf("lease: read: %w", err)
		}
		if cur == nil {
			return "", ErrNoLease
		}
		k.cache.drop(cacheKey{partition, cur.ClientID})
		if _, verr := k.sign.verify(partition, cur); verr != nil {
			k.refused(partition, cur, verr)
			return "", ErrNoLease
		}
		if cur.RevokedAtMs != 0 {
			return cur.LeaseID, nil
		}
		next := *cur
		next.RevokedAtMs = max(k.now().UnixMilli(), 1)
		next = k.sign.sign(partition, next)
		ok, err := k.store.SwapLease(ctx, partition, next, cur.MAC)
		if err != nil {
			return "", fmt.Errorf("lease: write: %w", err)
		}
		if ok {
			k.log.Info("lease revoked", zap.String("partition", partition), zap.String("client_id", cur.ClientID), zap.String("lease_id", cur.LeaseID))
			return cur.LeaseID, nil
		}
	}
	return "", fmt.Errorf("lease: %d concurrent writes to the lease; revocation not done, retry", swapAttempts)
}

// refused logs a stored record that fails verification.
func (k *Keeper) refused(partition string, rec *storage.LeaseRecord, err error) {
	k.log.Error("refused a stored lease record: treated as no lease", zap.String("partition", partition),
		zap.String("client_id", rec.ClientID), zap.String("lease_id", rec.LeaseID), zap.Error(err))
}

// newID returns a fresh unpredictable lease id (26 base32 characters,
// 130 random bits).
func newID() string { return rand.Text() }

type cacheKey struct{ partition, clientID string }

// cache holds verified records by (partition, clientID), at most
// MaxCached.
// gen counts drops: a record read before a drop (a revocation, an outage
// round) is not cached after it (putIf).
type cache struct {
	mu  sync.Mutex
	m   map[cacheKey]storage.LeaseRecord
	gen uint64
}

// generation is the drop count, read before a record is read from storage.
func (c *cache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// putIf caches r unless a drop happened since generation g was read: the
// drop (say a revocation) may be newer than r.
func (c *cache) putIf(k cacheKey, r storage.LeaseRecord, g uint64) {
	c.mu.Lock()
	stale := c.gen != g
	c.mu.Unlock()
	if !stale {
		c.put(k, r)
	}
}

func (c *cache) get(k cacheKey) (storage.LeaseRecord, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[k]
	return r, ok
}

func (c *cache) put(k cacheKey, r storage.LeaseRecord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok && len(c.m) >= MaxCached {
		for victim := range c.m {
			delete(c.m, victim)
			break
		}
	}
	c.m[k] = r
}

func (c *cache) drop(k cacheKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, k)
	c.gen++
}
