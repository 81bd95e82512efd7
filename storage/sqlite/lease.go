package sqlite

import (
	"context"
	"fmt"

	"github.com/synclane/synclane/storage"
)

// leaseTableDDL creates the auth lease records: one per (partition,
// client), replaced by compare-and-swap on mac.
const leaseTableDDL = `CREATE TABLE IF NOT EXISTS sync_leases (
		partition_id TEXT NOT NULL,
		client_id TEXT NOT NULL,
		lease_id TEXT NOT NULL,
		actor_id TEXT NOT NULL,
		allowed_scopes BLOB NOT NULL,
		issued_at_ms INTEGER NOT NULL,
		expires_at_ms INTEGER NOT NULL,
		revoked_at_ms INTEGER NOT NULL DEFAULT 0,
		mac BLOB NOT NULL,
		PRIMARY KEY (partition_id, client_id)
	) WITHOUT ROWID`

// leaseIndexDDL indexes leases by id (FindLease, revocation by id).
const leaseIndexDDL = `CREATE INDEX IF NOT EXISTS sync_leases_by_id ON sync_leases (partition_id, lease_id)`

const leaseCols = `client_id, lease_id, actor_id, allowed_scopes, issued_at_ms, expires_at_ms, revoked_at_ms, mac`

func (s *Store) readLease(ctx context.Context, what, where string, args ...any) (*storage.LeaseRecord, error) {
	if _, _, _, err := s.current(); err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", what, err)
	}
	var r storage.LeaseRecord
	err := s.readQueryRow(ctx, `SELECT `+leaseCols+` FROM sync_leases WHERE `+where, args...).Scan(
		&r.ClientID, &r.LeaseID, &r.ActorID, &r.AllowedScopes, &r.IssuedAtMs, &r.ExpiresAtMs, &r.RevokedAtMs, &r.MAC)
	if isNoRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", what, err)
	}
	return &r, nil
}

// GetLease returns the lease record of clientID, or nil.
func (s *Store) GetLease(ctx context.Context, partition, clientID string) (*storage.LeaseRecord, error) {
	return s.readLease(ctx, "get lease", `partition_id = ? AND client_id = ?`, partition, clientID)
}

// FindLease returns the lease record with leaseID, or nil.
func (s *Store) FindLease(ctx context.Context, partition, leaseID string) (*storage.LeaseRecord, error) {
	return s.readLease(ctx, "find lease", `partition_id = ? AND lease_id = ? LIMIT 1`, partition, leaseID)
}

// SwapLease stores rec when the stored record's mac is prevMAC (nil: none
// stored), in one write transaction of the push commit group (BEGIN
// IMMEDIATE excludes other processes on the file).
func (s *Store) SwapLease(ctx context.Context, partition string, rec storage.LeaseRecord, prevMAC []byte) (bool, error) {
	if _, _, _, err := s.current(); err != nil {
		return false, fmt.Errorf("sqlite: swap lease: %w", err)
	}
	if err := storage.CheckLease(partition, rec); err != nil {
		return false, fmt.Errorf("sqlite: swap lease: %w", err)
	}
	scopes := rec.AllowedScopes
	if scopes == nil {
		scopes = []byte{}
	}
	var n int64
	err := s.writeMember(ctx, "swap lease", func(ctx context.Context) error {
		var q string
		args := []any{rec.LeaseID, rec.ActorID, scopes, rec.IssuedAtMs, rec.ExpiresAtMs, rec.RevokedAtMs, rec.MAC, partition, rec.ClientID}
		if prevMAC == nil {
			q = `INSERT INTO sync_leases (lease_id, actor_id, allowed_scopes, issued_at_ms, expires_at_ms, revoked_at_ms, mac, partition_id, client_id)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (partition_id, client_id) DO NOTHING`
		} else {
			q = `UPDATE sync_leases SET lease_id = ?, actor_id = ?, allowed_scopes = ?, issued_at_ms = ?, expires_at_ms = ?, revoked_at_ms = ?, mac = ?
				WHERE partition_id = ? AND client_id = ? AND mac = ?`
			args = append(args, prevMAC)
		}
		res, err := s.conn.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n == 1, err
}
