package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/storage"
)

// leaseTable is the qualified name of the auth lease records.
func (s *Store) leaseTable() string { return qualify(s.schema, "sync_leases") }

// ensureLeases creates the auth lease records (one per (partition,
// client), replaced by compare-and-swap on mac) and their index by id.
func (s *Store) ensureLeases(ctx context.Context, tx pgx.Tx) error {
	t := s.leaseTable()
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS ` + t + ` (
	partition text COLLATE "C" NOT NULL,
	client_id text COLLATE "C" NOT NULL,
	lease_id text COLLATE "C" NOT NULL,
	actor_id text NOT NULL,
	allowed_scopes bytea NOT NULL,
	issued_at_ms bigint NOT NULL,
	expires_at_ms bigint NOT NULL,
	revoked_at_ms bigint NOT NULL DEFAULT 0,
	mac bytea NOT NULL,
	PRIMARY KEY (partition, client_id)
)`,
		`CREATE INDEX IF NOT EXISTS sync_leases_by_id ON ` + t + ` (partition, lease_id)`,
	} {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

const leaseCols = `client_id, lease_id, actor_id, allowed_scopes, issued_at_ms, expires_at_ms, revoked_at_ms, mac`

func (s *Store) readLease(ctx context.Context, op, where string, args ...any) (*storage.LeaseRecord, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	for _, a := range args {
		if v, ok := a.(string); ok && !storage.Storable(v) {
			return nil, nil // never stored; not sent to the database
		}
	}
	var rec *storage.LeaseRecord
	err := retry(ctx, op, func() error {
		var r storage.LeaseRecord
		err := s.pool.QueryRow(ctx, `SELECT `+leaseCols+` FROM `+s.leaseTable()+` WHERE `+where, args...).Scan(
			&r.ClientID, &r.LeaseID, &r.ActorID, &r.AllowedScopes, &r.IssuedAtMs, &r.ExpiresAtMs, &r.RevokedAtMs, &r.MAC)
		if errors.Is(err, pgx.ErrNoRows) {
			rec = nil
			return nil
		}
		if err != nil {
			return err
		}
		rec = &r
		return nil
	})
	return rec, err
}

// GetLease returns the lease record of clientID, or nil.
func (s *Store) GetLease(ctx context.Context, partition, clientID string) (*storage.LeaseRecord, error) {
	return s.readLease(ctx, "GetLease", `partition = $1 AND client_id = $2`, partition, clientID)
}

// FindLease returns the lease record with leaseID, or nil.
func (s *Store) FindLease(ctx context.Context, partition, leaseID string) (*storage.LeaseRecord, error) {
	return s.readLease(ctx, "FindLease", `partition = $1 AND lease_id = $2 LIMIT 1`, partition, leaseID)
}

// SwapLease stores rec when the stored record's mac is prevMAC (nil: none
// stored) in one statement: an INSERT ... ON CONFLICT DO NOTHING or an
// UPDATE conditioned on the mac, so concurrent swaps from several
// processes serialize on the row and exactly one of them wins.
func (s *Store) SwapLease(ctx context.Context, partition string, rec storage.LeaseRecord, prevMAC []byte) (bool, error) {
	if err := s.ready(); err != nil {
		return false, err
	}
	if err := storage.CheckLease(partition, rec); err != nil {
		return false, fmt.Errorf("postgres: swap lease: %w", err)
	}
	scopes := rec.AllowedScopes
	if scopes == nil {
		scopes = []byte{}
	}
	t := s.leaseTable()
	args := []any{partition, rec.ClientID, rec.LeaseID, rec.ActorID, scopes, rec.IssuedAtMs, rec.ExpiresAtMs, rec.RevokedAtMs, rec.MAC}
	var q string
	if prevMAC == nil {
		q = `INSERT INTO ` + t + ` (partition, client_id, lease_id, actor_id, allowed_scopes, issued_at_ms, expires_at_ms, revoked_at_ms, mac)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (partition, client_id) DO NOTHING`
	} else {
		q = `UPDATE ` + t + ` SET lease_id = $3, actor_id = $4, allowed_scopes = $5, issued_at_ms = $6, expires_at_ms = $7, revoked_at_ms = $8, mac = $9
WHERE partition = $1 AND client_id = $2 AND mac = $10`
		args = append(args, prevMAC)
	}
	var stored bool
	err := retry(ctx, "SwapLease", func() error {
		tag, err := s.pool.Exec(ctx, q, args...)
		if err != nil {
			return err
		}
		stored = tag.RowsAffected() == 1
		return nil
	})
	return stored, err
}
