package postgres

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

func lookupIdempotency(ctx context.Context, q queryer, sql, partition, clientID, clientCommitID string) (*storage.IdempotencyRecord, error) {
	rec := storage.IdempotencyRecord{ClientID: clientID, ClientCommitID: clientCommitID}
	var status int16
	err := q.QueryRow(ctx, sql, partition, clientID, clientCommitID).Scan(&status, &rec.CommitSeq, &rec.Result)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rec.Status = ssp2.CommitStatus(status)
	return &rec, nil
}

// LookupIdempotency returns the committed record for the key, or nil. It
// takes no lock (the optimistic check before BeginPush).
func (s *Store) LookupIdempotency(ctx context.Context, partition, clientID, clientCommitID string) (*storage.IdempotencyRecord, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	var rec *storage.IdempotencyRecord
	err := retry(ctx, "LookupIdempotency", func() error {
		var err error
		rec, err = lookupIdempotency(ctx, s.pool, s.q.getIdem, partition, clientID, clientCommitID)
		return err
	})
	return rec, err
}

// GetClient returns the client record, or nil. Subscriptions come back
// byte for byte as stored (nil when stored nil).
func (s *Store) GetClient(ctx context.Context, partition, clientID string) (*storage.ClientRecord, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	var rec *storage.ClientRecord
	err := retry(ctx, "GetClient", func() error {
		r := storage.ClientRecord{ClientID: clientID}
		var subs pgtype.Text
		var wire int32
		err := s.pool.QueryRow(ctx, s.q.getClient, partition, clientID).Scan(&r.ActorID, &subs, &r.Cursor, &wire, &r.UpdatedAtMs)
		if errors.Is(err, pgx.ErrNoRows) {
			rec = nil
			return nil
		}
		if err != nil {
			return err
		}
		if subs.Valid {
			r.Subscriptions = json.RawMessage(subs.String)
		}
		r.WireVersion = uint16(wire)
		rec = &r
		return nil
	})
	return rec, err
}

// PutClient creates or replaces the client record.
func (s *Store) PutClient(ctx context.Context, partition string, recs ...storage.ClientRecord) error {
	if err := s.ready(); err != nil {
		return err
	}
	if len(recs) == 0 {
		return nil
	}
	return retry(ctx, "PutClient", func() error {
		b := &pgx.Batch{}
		for _, rec := range recs {
			var subs any
			if rec.Subscriptions != nil {
				subs = string(rec.Subscriptions)
			}
			b.Queue(s.q.putClient, partition, rec.ClientID, rec.ActorID, subs, rec.Cursor, int32(rec.WireVersion), rec.UpdatedAtMs)
		}
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
}
