package sqlite

import (
	"context"
	"fmt"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// LookupIdempotency reads the committed record from a read connection.
func (s *Store) LookupIdempotency(ctx context.Context, partition, clientID, clientCommitID string) (*storage.IdempotencyRecord, error) {
	if _, _, _, err := s.current(); err != nil {
		return nil, fmt.Errorf("sqlite: lookup idempotency: %w", err)
	}
	rec, err := scanIdem(s.readQueryRow(ctx, sysSQL["lookupIdem"], partition, clientID, clientCommitID), clientID, clientCommitID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: lookup idempotency: %w", err)
	}
	return rec, nil
}

func scanIdem(r rowScanner, clientID, clientCommitID string) (*storage.IdempotencyRecord, error) {
	rec := &storage.IdempotencyRecord{ClientID: clientID, ClientCommitID: clientCommitID}
	var status int64
	err := r.Scan(&status, &rec.CommitSeq, &rec.Result)
	if isNoRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rec.Status = ssp2.CommitStatus(status)
	return rec, nil
}

// GetClient reads the client record from a read connection, or nil.
func (s *Store) GetClient(ctx context.Context, partition, clientID string) (*storage.ClientRecord, error) {
	if _, _, _, err := s.current(); err != nil {
		return nil, fmt.Errorf("sqlite: get client: %w", err)
	}
	rec := &storage.ClientRecord{ClientID: clientID}
	var subs []byte
	var wire int64
	err := s.readQueryRow(ctx, `SELECT actor_id, subscriptions, cursor, wire_version, updated_at_ms FROM sync_clients
		WHERE partition_id = ? AND client_id = ?`, partition, clientID).Scan(&rec.ActorID, &subs, &rec.Cursor, &wire, &rec.UpdatedAtMs)
	if isNoRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: get client %q: %w", clientID, err)
	}
	rec.Subscriptions, rec.WireVersion = subs, uint16(wire)
	return rec, nil
}

// PutClient creates or replaces the record (one write transaction under
// the write lock).
func (s *Store) PutClient(ctx context.Context, partition string, recs ...storage.ClientRecord) error {
	if len(recs) == 0 {
		return nil
	}
	if _, _, _, err := s.current(); err != nil {
		return fmt.Errorf("sqlite: put client: %w", err)
	}
	// Client records ride in the push commit group like a push transaction
	// (group.go), so write-backs from many partitions share fsyncs too.
	s.pushWaiters.Add(1)
	err := s.acquire(ctx)
	s.pushWaiters.Add(-1)
	if err != nil {
		return fmt.Errorf("sqlite: put client: %w", err)
	}
	if err := s.beginMember(ctx); err != nil {
		s.unlock()
		return fmt.Errorf("sqlite: put client: %w", err)
	}
	wctx := context.WithoutCancel(ctx)
	for _, rec := range recs {
		var subs any
		if rec.Subscriptions != nil {
			subs = []byte(rec.Subscriptions)
		}
		_, err := s.conn.ExecContext(wctx, `INSERT INTO sync_clients(partition_id, client_id, actor_id, subscriptions, cursor, wire_version, updated_at_ms)
		VALUES(?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT(partition_id, client_id) DO UPDATE SET actor_id = excluded.actor_id, subscriptions = excluded.subscriptions,
			cursor = excluded.cursor, wire_version = excluded.wire_version, updated_at_ms = excluded.updated_at_ms`,
			partition, rec.ClientID, rec.ActorID, subs, rec.Cursor, int64(rec.WireVersion), rec.UpdatedAtMs)
		if err != nil {
			s.abortMember()
			return fmt.Errorf("sqlite: put client %q: %w", rec.ClientID, err)
		}
	}
	if _, err := s.conn.ExecContext(wctx, "RELEASE ptx"); err != nil {
		s.abortMember()
		return fmt.Errorf("sqlite: put client: %w", err)
	}
	return s.endMember(true)
}
