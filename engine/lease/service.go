package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/storage"
)

// Options configure auth leases (engine.Config.Leases; SPEC §7.3). TTL >
// 0 turns them on: every round whose resolution succeeds slides the
// client's lease and sends LEASE; a resolver returning an error wrapping
// engine.ErrResolverOutage has the round authorized by the lease. Key
// signs the records (at least MinKeyBytes; every process sharing the
// store needs the same key). TTL 0: off, no LEASE frame is ever sent.
type Options struct {
	TTL time.Duration
	Key []byte
}

// ErrLeasesOff reports a lease call on an engine without leases.
var ErrLeasesOff = errors.New("engine: auth leases are off (Config.Leases.TTL is 0)")

// Service is the engine's lease feature: the Keeper the partition actors
// slide and check leases with (none when off) and the operator's
// revocations. It is safe for concurrent use.
type Service struct {
	k *Keeper // nil when leases are off
}

// NewService builds the service over the storage Leases role st (needed
// only with opts.TTL set; engine.New checks it): off when opts.TTL is 0,
// otherwise a Keeper on now and log, or the Keeper's configuration error.
func NewService(st storage.Leases, opts Options, now func() time.Time, log *zap.Logger) (*Service, error) {
	if opts.TTL == 0 {
		return &Service{}, nil
	}
	k, err := New(Config{Store: st, Key: opts.Key, TTL: opts.TTL, Now: now, Logger: log.Named("lease")})
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	return &Service{k: k}, nil
}

// Configure hands the Keeper to the partition actors of pc (nothing when
// leases are off: the actors then send no LEASE frame and refuse every
// outage round).
func (s *Service) Configure(pc *partition.Config) {
	if s.k != nil {
		pc.Leases = s.k
	}
}

// Enabled reports whether the engine issues auth leases.
func (s *Service) Enabled() bool { return s.k != nil }

// Revoke revokes the auth lease of clientID in partition and returns
// its id: from then on a round of that client during a resolver outage
// fails with sync.auth_lease_revoked (in every process sharing the
// store), and its next round with a working resolver issues a fresh lease
// (a new id). Nothing of the client's data is purged. Revoking a revoked
// lease succeeds again; a client without a lease is ErrNoLease; an engine
// without leases, ErrLeasesOff.
func (s *Service) Revoke(ctx context.Context, partition, clientID string) (string, error) {
	if s.k == nil {
		return "", ErrLeasesOff
	}
	return s.k.Revoke(ctx, partition, clientID)
}

// RevokeID revokes the auth lease with leaseID in partition like
// Revoke; an id that is not a client's current lease is ErrNoLease.
func (s *Service) RevokeID(ctx context.Context, partition, leaseID string) error {
	if s.k == nil {
		return ErrLeasesOff
	}
	return s.k.RevokeID(ctx, partition, leaseID)
}
