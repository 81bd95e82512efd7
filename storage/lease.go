package storage

import (
	"context"
	"fmt"
)

// MaxLeaseScopesBytes bounds LeaseRecord.AllowedScopes; a larger record is
// refused with ErrUnstorable (the engine then issues no lease).
const MaxLeaseScopesBytes = 64 << 10

// MaxLeaseMACBytes bounds LeaseRecord.MAC.
const MaxLeaseMACBytes = 64

// LeaseRecord is one auth lease (SPEC §7.3) as stored, keyed by
// (partition, ClientID). Storage treats every field as opaque data: the
// engine signs the record (MAC) and verifies it on read; storage never
// checks the MAC.
type LeaseRecord struct {
	ClientID string
	LeaseID  string
	ActorID  string
	// AllowedScopes is the resolver's grant at the last slide, as canonical
	// JSON (at most MaxLeaseScopesBytes).
	AllowedScopes []byte
	IssuedAtMs    int64
	ExpiresAtMs   int64
	// RevokedAtMs is 0 while the lease is not revoked.
	RevokedAtMs int64
	// MAC signs every other field and the partition (at most
	// MaxLeaseMACBytes, non-empty).
	MAC []byte
}

// Leases is the Leases role of a backend: it stores auth lease records,
// at most one per (partition, clientID), replaced only by compare-and-swap
// on the MAC, so two processes sliding or revoking one lease never lose
// each other's write. Every backend has it; the engine needs it when auth
// leases are on (engine.Config.Leases.TTL).
type Leases interface {
	// GetLease returns the lease record of clientID in partition, or nil.
	GetLease(ctx context.Context, partition, clientID string) (*LeaseRecord, error)
	// FindLease returns the lease record with leaseID in partition, or nil.
	FindLease(ctx context.Context, partition, leaseID string) (*LeaseRecord, error)
	// SwapLease stores rec as the lease of rec.ClientID in partition if the
	// stored record's MAC equals prevMAC (prevMAC nil: if none is stored),
	// atomically across processes sharing the store, and reports whether
	// it stored. A record CheckLease refuses fails with ErrUnstorable and
	// stores nothing.
	SwapLease(ctx context.Context, partition string, rec LeaseRecord, prevMAC []byte) (bool, error)
}

// CheckLease reports, wrapping ErrUnstorable, a lease record no backend
// stores: a partition, clientID, leaseID or actorID that is not Storable
// or empty, AllowedScopes over MaxLeaseScopesBytes, an empty MAC or one
// over MaxLeaseMACBytes.
func CheckLease(partition string, rec LeaseRecord) error {
	for _, f := range []struct{ name, v string }{{"partition", partition}, {"clientId", rec.ClientID}, {"leaseId", rec.LeaseID}, {"actorId", rec.ActorID}} {
		if f.v == "" || !Storable(f.v) {
			return fmt.Errorf("lease %s %s: %w", f.name, QuoteID(f.v), ErrUnstorable)
		}
	}
	if len(rec.AllowedScopes) > MaxLeaseScopesBytes {
		return fmt.Errorf("lease allowed scopes of %d bytes (limit %d): %w", len(rec.AllowedScopes), MaxLeaseScopesBytes, ErrUnstorable)
	}
	if len(rec.MAC) == 0 || len(rec.MAC) > MaxLeaseMACBytes {
		return fmt.Errorf("lease MAC of %d bytes (want 1..%d): %w", len(rec.MAC), MaxLeaseMACBytes, ErrUnstorable)
	}
	return nil
}
