package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/synclane/synclane/engine/lease"
	"github.com/synclane/synclane/partition"
)

// ErrNoLease reports a revocation of a lease that does not exist (or
// whose stored record fails its signature check).
var ErrNoLease = lease.ErrNoLease

// ErrLeasesOff reports a lease call on an engine without leases.
var ErrLeasesOff = errors.New("engine: auth leases are off (Config.LeaseTTL is 0)")

// setupLeases builds the lease keeper when leases are on.
func (e *Engine) setupLeases(pc *partition.Config) error {
	if e.cfg.LeaseTTL == 0 {
		return nil
	}
	k, err := lease.New(lease.Config{Store: e.cfg.Backend.Leases, Key: e.cfg.LeaseKey, TTL: e.cfg.LeaseTTL, Now: e.cfg.Now, Logger: e.cfg.Logger.Named("lease")})
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	e.leases, pc.Leases = k, k
	return nil
}

// LeasesEnabled reports whether the engine issues auth leases.
func (e *Engine) LeasesEnabled() bool { return e.leases != nil }

// RevokeLease revokes the auth lease of clientID in partition and returns
// its id: from then on a round of that client during a resolver outage
// fails with sync.auth_lease_revoked (in every process sharing the
// store), and its next round with a working resolver issues a fresh lease
// (a new id). Nothing of the client's data is purged. Revoking a revoked
// lease succeeds again; a client without a lease is ErrNoLease; an engine
// without leases, ErrLeasesOff.
func (e *Engine) RevokeLease(ctx context.Context, partition, clientID string) (string, error) {
	if e.leases == nil {
		return "", ErrLeasesOff
	}
	return e.leases.Revoke(ctx, partition, clientID)
}

// RevokeLeaseID revokes the auth lease with leaseID in partition like
// RevokeLease; an id that is not a client's current lease is ErrNoLease.
func (e *Engine) RevokeLeaseID(ctx context.Context, partition, leaseID string) error {
	if e.leases == nil {
		return ErrLeasesOff
	}
	return e.leases.RevokeID(ctx, partition, leaseID)
}
