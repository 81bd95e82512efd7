package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
// takes no lock (the optimistic check before BeginPush). A key that is not
// storage.Storable is never stored and is not sent.
func (s *Store) LookupIdempotency(ctx context.Context, partition, clientID, clientCommitID string) (*storage.IdempotencyRecord, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	if !storage.Storable(partition) || !storage.Storable(clientID) || !storage.Storable(clientCommitID) {
		return nil, nil
	}
	var rec *storage.IdempotencyRecord
	err := retry(ctx, "LookupIdempotency", func() error {
		var err error
		rec, err = lookupIdempotency(ctx, s.pool, s.q.getIdem, partition, clientID, clientCommitID)
		return err
	})
	return rec, err
}

// GetClient returns the client record, or nil (also, without asking the
// database, for a key that is not storage.Storable). Subscriptions come
// back byte for byte as stored (nil when stored nil).
func (s *Store) GetClient(ctx context.Context, partition, clientID string) (*storage.ClientRecord, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	if !storage.Storable(partition) || !storage.Storable(clientID) {
		return nil, nil
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

// PutClient creates or replaces the records storage.StorableClients keeps,
// in one transaction (one pipelined batch), never changing the actor_id of
// an existing record. Records it skips are never sent, so they cannot fail
// the batch (an over-long client_id would exceed the primary key's index
// row size); the returned error names them (storage.ErrUnstorable).
//
// When ctx carries an ownership fence (storage.WithFence) the same batch
// first takes a share lock on the partition's registry row and reads its
// generation (no extra round trip); a stale fence rolls the transaction
// back and fails with storage.ErrOwnershipLost, so nothing is written.
// The share lock waits for a push holding the partition's write lock, and
// ClaimPartition waits for it.
func (s *Store) PutClient(ctx context.Context, partition string, recs ...storage.ClientRecord) error {
	if err := s.ready(); err != nil {
		return err
	}
	keep, skipErr := storage.StorableClients(partition, recs)
	if skipErr != nil {
		skipErr = fmt.Errorf("postgres: PutClient: %w", skipErr)
	}
	if len(keep) == 0 {
		return skipErr
	}
	_, fenced := storage.FenceFrom(ctx)
	err := retry(ctx, "PutClient", func() error {
		b := &pgx.Batch{}
		var gen int64 // stays 0 when the partition has no registry row
		if fenced {
			// The share lock comes first (a push's order: registry row,
			// then client records) and holds until the commit.
			s.queueShareOwner(b, partition, &gen)
		}
		s.queueClients(b, partition, keep)
		return s.sendBatchIn(ctx, b, func() error { return checkFence(ctx, partition, gen) })
	})
	if err != nil {
		return err
	}
	return skipErr
}

// AdvanceClients is one transaction sending, in one round trip, a share
// lock on the partition's registry row (a rotation's lockPartition takes
// it for update, so the two serialize; a push's order: registry row, then
// client records) reading its epoch and generation, then one UPDATE per
// ack in clientId order (as PutClient locks them) raising the cursor and
// timestamp to their maxima where the actor matches and the epoch is
// logEpoch. A stale ownership fence in ctx rolls it back
// (storage.ErrOwnershipLost).
func (s *Store) AdvanceClients(ctx context.Context, partition, logEpoch string, acks ...storage.ClientAdvance) (int, error) {
	if err := s.ready(); err != nil {
		return 0, err
	}
	if len(acks) == 0 || !storage.Storable(partition) || !storage.Storable(logEpoch) {
		return 0, nil
	}
	keep := make([]storage.ClientAdvance, 0, len(acks))
	for _, a := range acks {
		if storage.Storable(a.ClientID) && storage.Storable(a.ActorID) {
			keep = append(keep, a)
		}
	}
	slices.SortFunc(keep, func(a, b storage.ClientAdvance) int { return strings.Compare(a.ClientID, b.ClientID) })
	update := `UPDATE ` + s.q.clients + ` SET cursor = GREATEST(cursor, $3), updated_at_ms = GREATEST(updated_at_ms, $4)
WHERE partition = $1 AND client_id = $2 AND actor_id = $5
  AND EXISTS (SELECT 1 FROM ` + s.q.partitions + ` WHERE partition = $1 AND log_epoch = $6)`
	n := 0
	err := retry(ctx, "AdvanceClients", func() error {
		n = 0
		b := &pgx.Batch{}
		var gen int64 // stays 0 when the partition has no registry row
		s.queueShareOwner(b, partition, &gen)
		for _, a := range keep {
			b.Queue(update, partition, a.ClientID, a.Cursor, a.AtMs, a.ActorID, logEpoch).Exec(func(ct pgconn.CommandTag) error {
				n += int(ct.RowsAffected())
				return nil
			})
		}
		return s.sendBatchIn(ctx, b, func() error { return checkFence(ctx, partition, gen) })
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// HandOverClients implements storage.ClientHandOver: one transaction
// sending, in one round trip, a share lock on the partition's registry row
// reading its log epoch (a rotation's lockPartition takes the row for
// update, so the two serialize; a push's order: registry row, then client
// records), then one conditional upsert per record in clientId order (as
// PutClient locks them). It checks no fence. At another log epoch, or
// without a registry row, the transaction is rolled back and nothing is
// written.
func (s *Store) HandOverClients(ctx context.Context, partition, logEpoch string, recs ...storage.ClientRecord) (int, error) {
	if err := s.ready(); err != nil {
		return 0, err
	}
	keep, skipErr := storage.StorableClients(partition, recs)
	if skipErr != nil {
		skipErr = fmt.Errorf("postgres: HandOverClients: %w", skipErr)
	}
	if len(keep) == 0 || !storage.Storable(logEpoch) {
		return 0, skipErr
	}
	keep = slices.Clone(keep)
	slices.SortFunc(keep, func(a, b storage.ClientRecord) int { return strings.Compare(a.ClientID, b.ClientID) })
	n := 0
	err := retry(ctx, "HandOverClients", func() error {
		n = 0
		b := &pgx.Batch{}
		var epoch string // stays "" without a registry row
		b.Queue(s.q.shareEpoch, partition).QueryRow(func(row pgx.Row) error {
			if err := row.Scan(&epoch); !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			return nil
		})
		for _, rec := range keep {
			var subs any
			if rec.Subscriptions != nil {
				subs = string(rec.Subscriptions)
			}
			b.Queue(s.q.handOverClient, partition, rec.ClientID, rec.ActorID, subs, rec.Cursor, int32(rec.WireVersion), rec.UpdatedAtMs).
				Exec(func(ct pgconn.CommandTag) error {
					n += int(ct.RowsAffected())
					return nil
				})
		}
		return s.sendBatchIn(ctx, b, func() error {
			if epoch != logEpoch {
				n = 0
				return errNoCommit // nothing of it is kept
			}
			return nil
		})
	})
	if err != nil {
		return 0, err
	}
	return n, skipErr
}

// PutClients answers storage.PushTx: PutClient's upserts sent on the
// transaction's connection in one round trip (after a pending SAVEPOINT),
// durable with its COMMIT. Records storage.StorableClients skips are never
// sent; the returned error names them (storage.ErrUnstorable).
func (tx *pushTx) PutClients(ctx context.Context, recs ...storage.ClientRecord) error {
	if err := tx.check(); err != nil {
		return err
	}
	keep, skipErr := storage.StorableClients(tx.partition, recs)
	if skipErr != nil {
		skipErr = fmt.Errorf("postgres: PutClients: %w", skipErr)
	}
	if len(keep) == 0 {
		return skipErr
	}
	b := &pgx.Batch{}
	for _, p := range tx.writePrefix() {
		b.Queue(p)
	}
	tx.s.queueClients(b, tx.partition, keep)
	if err := tx.conn.SendBatch(ctx, b).Close(); err != nil {
		return classify("PutClients", err)
	}
	return skipErr
}

// queueClients queues the upserts of recs in clientId order, so two
// writers of overlapping records (a PutClient and a push transaction's
// PutClients in another process) lock them in one order and cannot
// deadlock each other.
func (s *Store) queueClients(b *pgx.Batch, partition string, recs []storage.ClientRecord) {
	recs = slices.Clone(recs)
	slices.SortFunc(recs, func(a, b storage.ClientRecord) int { return strings.Compare(a.ClientID, b.ClientID) })
	for _, rec := range recs {
		var subs any
		if rec.Subscriptions != nil {
			subs = string(rec.Subscriptions)
		}
		b.Queue(s.q.putClient, partition, rec.ClientID, rec.ActorID, subs, rec.Cursor, int32(rec.WireVersion), rec.UpdatedAtMs)
	}
}

// bindAttempts bounds BindClient's rounds: a round finds no record only
// when RotateLogEpoch deleted it between the round's two statements.
const bindAttempts = 8

// BindClient sends, in one round trip (one pipelined batch), INSERT … ON
// CONFLICT DO NOTHING of a minimal record bound to actorID and a SELECT of
// the record's actor_id. A concurrent insert of the same key, in any
// process, makes the INSERT wait until it commits and then do nothing, and
// the SELECT (a new snapshot, READ COMMITTED) then reads the winner's
// binding, so every caller gets the first binding. Rebinding an existing
// record writes nothing.
func (s *Store) BindClient(ctx context.Context, partition, clientID, actorID string, nowMs int64) (string, error) {
	if err := s.ready(); err != nil {
		return "", err
	}
	if err := storage.CheckClient(partition, storage.ClientRecord{ClientID: clientID, ActorID: actorID}); err != nil {
		return "", fmt.Errorf("postgres: BindClient: %w", err)
	}
	var bound string
	err := retry(ctx, "BindClient", func() error {
		for range bindAttempts {
			b := &pgx.Batch{}
			b.Queue(s.q.bindClient, partition, clientID, actorID, nowMs)
			found := false
			b.Queue(s.q.getClient, partition, clientID).QueryRow(func(row pgx.Row) error {
				var subs pgtype.Text
				var cursor, updated int64
				var wire int32
				err := row.Scan(&bound, &subs, &cursor, &wire, &updated)
				if errors.Is(err, pgx.ErrNoRows) {
					return nil
				}
				found = err == nil
				return err
			})
			if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
				return err
			}
			if found {
				return nil
			}
		}
		return fmt.Errorf("client %s: record deleted under %d binding attempts", storage.QuoteID(clientID), bindAttempts)
	})
	if err != nil {
		return "", err
	}
	return bound, nil
}

// BindClients sends every binding's INSERT … ON CONFLICT DO NOTHING and
// SELECT of its actor_id in one transaction (one batch, one commit and WAL
// flush), in clientID order so two callers binding overlapping sets wait
// for each other instead of deadlocking. Each INSERT's row count tells
// whether it created the record; under READ COMMITTED each SELECT reads
// the winner's binding once the INSERT waited for a concurrent one. A
// record deleted between the two statements (RotateLogEpoch) fails the
// call: nothing of it is committed, and binding again is safe.
func (s *Store) BindClients(ctx context.Context, partition string, nowMs int64, binds ...storage.ClientBinding) ([]storage.BoundClient, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	if err := storage.CheckBindings(partition, binds); err != nil {
		return nil, fmt.Errorf("postgres: BindClients: %w", err)
	}
	out := make([]storage.BoundClient, len(binds))
	if len(binds) == 0 {
		return out, nil
	}
	order := make([]int, len(binds))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(binds[a].ClientID, binds[b].ClientID) })
	err := retry(ctx, "BindClients", func() error {
		missing := ""
		b := &pgx.Batch{}
		for _, i := range order {
			bd := binds[i]
			out[i] = storage.BoundClient{}
			b.Queue(s.q.bindClient, partition, bd.ClientID, bd.ActorID, nowMs).Exec(func(ct pgconn.CommandTag) error {
				out[i].Created = ct.RowsAffected() == 1
				return nil
			})
			b.Queue(s.q.getClient, partition, bd.ClientID).QueryRow(func(row pgx.Row) error {
				var subs pgtype.Text
				var cursor, updated int64
				var wire int32
				err := row.Scan(&out[i].ActorID, &subs, &cursor, &wire, &updated)
				if errors.Is(err, pgx.ErrNoRows) {
					missing = bd.ClientID
					return nil
				}
				return err
			})
		}
		return s.sendBatchIn(ctx, b, func() error {
			if missing != "" {
				return fmt.Errorf("client %s: record deleted while it was bound", storage.QuoteID(missing))
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// queueShareOwner queues the share lock on partition's registry row that
// fenced client writes take first (a push's order: registry row, then
// client records), scanning its ownership generation into gen (left 0
// when the partition has no registry row).
func (s *Store) queueShareOwner(b *pgx.Batch, partition string, gen *int64) {
	b.Queue(s.q.shareOwner, partition).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(gen); !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		return nil
	})
}

// errNoCommit is what sendBatchIn's decide returns to roll the batch back
// and report success.
var errNoCommit = errors.New("postgres: roll the batch back")

// sendBatchIn sends b in one transaction of the pool (one round trip),
// then asks decide: nil commits it; errNoCommit rolls it back and returns
// nil; any other error rolls it back and is returned.
func (s *Store) sendBatchIn(ctx context.Context, b *pgx.Batch, decide func() error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	if err := decide(); err != nil {
		if errors.Is(err, errNoCommit) {
			return nil
		}
		return err
	}
	return tx.Commit(ctx)
}
