package sqlite

import (
	"context"
	"fmt"
	"sync"

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

// putClientSQL upserts a client record; an existing record keeps its
// actor_id (the binding is immutable).
const putClientSQL = `INSERT INTO sync_clients(partition_id, client_id, actor_id, subscriptions, cursor, wire_version, updated_at_ms)
	VALUES(?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT(partition_id, client_id) DO UPDATE SET subscriptions = excluded.subscriptions,
		cursor = excluded.cursor, wire_version = excluded.wire_version, updated_at_ms = excluded.updated_at_ms`

// PutClient creates or replaces the records storage.StorableClients keeps
// (one write transaction under the write lock, in the push commit group),
// never changing the actor_id of an existing record. Skipped records are
// named by the returned error (storage.ErrUnstorable); when every record
// is skipped nothing is written.
func (s *Store) PutClient(ctx context.Context, partition string, recs ...storage.ClientRecord) error {
	if len(recs) == 0 {
		return nil
	}
	if _, _, _, err := s.current(); err != nil {
		return fmt.Errorf("sqlite: put client: %w", err)
	}
	keep, skipErr := storage.StorableClients(partition, recs)
	if skipErr != nil {
		skipErr = fmt.Errorf("sqlite: put client: %w", skipErr)
	}
	if len(keep) == 0 {
		return skipErr
	}
	if err := s.writeBack(ctx, partition, keep); err != nil {
		return err
	}
	return skipErr
}

// clientWriteBack combines the PutClient calls of many partitions: each
// partition writes its buffered client records back about once a second,
// and with a thousand partitions those small write transactions cost as
// much as the pushes. A call joins the open batch, or opens one and leads
// it: the leader waits for the writer and then writes every record that
// joined until then as ONE member of the push commit group (group.go);
// the others wait for that member's durable result. A failed batch is
// retried by each of its callers alone, so no partition's records keep
// another's from being written.
type clientWriteBack struct {
	mu   sync.Mutex
	open *clientBatch
}

type clientBatch struct {
	parts []partClients
	done  chan struct{}
	err   error
}

type partClients struct {
	partition string
	recs      []storage.ClientRecord
}

// writeBack writes storable records of partition in a batch shared with
// other partitions (clientWriteBack), returning once they are durable.
func (s *Store) writeBack(ctx context.Context, partition string, recs []storage.ClientRecord) error {
	wb := &s.writeBacks
	wb.mu.Lock()
	b := wb.open
	lead := b == nil
	if lead {
		b = &clientBatch{done: make(chan struct{})}
		wb.open = b
	}
	b.parts = append(b.parts, partClients{partition, recs})
	wb.mu.Unlock()
	if lead {
		b.err = s.writeMember(ctx, "put client", func(ctx context.Context) error {
			// Sealed once the writer is ours: later calls open the next batch.
			wb.mu.Lock()
			wb.open = nil
			parts := b.parts
			wb.mu.Unlock()
			for _, pc := range parts {
				if err := s.putClients(ctx, pc.partition, pc.recs); err != nil {
					return err
				}
			}
			return nil
		})
		wb.mu.Lock()
		if wb.open == b { // the writer was never ours
			wb.open = nil
		}
		alone := len(b.parts) == 1
		wb.mu.Unlock()
		close(b.done)
		if b.err == nil || alone {
			return b.err
		}
	} else {
		select {
		case <-b.done:
			if b.err == nil {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("sqlite: put client: %w", ctx.Err())
		}
	}
	return s.writeMember(ctx, "put client", func(ctx context.Context) error {
		return s.putClients(ctx, partition, recs)
	})
}

// advanceClientSQL raises an existing record's cursor and timestamp and
// touches nothing else; the actor must match.
const advanceClientSQL = `UPDATE sync_clients SET cursor = max(cursor, ?), updated_at_ms = max(updated_at_ms, ?)
	WHERE partition_id = ? AND client_id = ? AND actor_id = ?`

// AdvanceClients checks the epoch and updates the records in one member
// of the push commit group (under the write lock, which RotateLogEpoch's
// transaction takes too).
func (s *Store) AdvanceClients(ctx context.Context, partition, logEpoch string, acks ...storage.ClientAdvance) (int, error) {
	if len(acks) == 0 {
		return 0, nil
	}
	if _, _, _, err := s.current(); err != nil {
		return 0, fmt.Errorf("sqlite: advance clients: %w", err)
	}
	n := 0
	err := s.writeMember(ctx, "advance clients", func(ctx context.Context) error {
		n = 0
		var epoch string
		err := s.conn.QueryRowContext(ctx, `SELECT log_epoch FROM sync_partitions WHERE partition_id = ?`, partition).Scan(&epoch)
		if isNoRows(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if epoch != logEpoch {
			return nil // a delayed ack from before a rotation
		}
		st, err := s.writerStmt(ctx, advanceClientSQL)
		if err != nil {
			return err
		}
		for _, a := range acks {
			if !storage.Storable(a.ClientID) || !storage.Storable(a.ActorID) {
				continue
			}
			res, err := st.ExecContext(ctx, a.Cursor, a.AtMs, partition, a.ClientID, a.ActorID)
			if err != nil {
				return err
			}
			k, err := res.RowsAffected()
			if err != nil {
				return err
			}
			n += int(k)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// PutClients answers storage.PushTx: PutClient's upserts run in
// the push transaction (no write transaction, savepoint or lock hand-off
// of their own), durable with its group's COMMIT.
func (tx *pushTx) PutClients(ctx context.Context, recs ...storage.ClientRecord) error {
	ctx, err := tx.check(ctx, "put clients")
	if err != nil {
		return err
	}
	keep, skipErr := storage.StorableClients(tx.info.Partition, recs)
	if err := tx.write(ctx); err != nil {
		return err
	}
	if err := tx.s.putClients(ctx, tx.info.Partition, keep); err != nil {
		return fmt.Errorf("sqlite: put clients: %w", err)
	}
	if skipErr != nil {
		return fmt.Errorf("sqlite: put clients: %w", skipErr)
	}
	return nil
}

// putClients upserts storable records with putClientSQL, prepared once on
// the writer connection; the caller holds the write lock inside an open
// transaction.
func (s *Store) putClients(ctx context.Context, partition string, keep []storage.ClientRecord) error {
	if len(keep) == 0 {
		return nil
	}
	st, err := s.writerStmt(ctx, putClientSQL)
	if err != nil {
		return err
	}
	for _, rec := range keep {
		var subs any
		if rec.Subscriptions != nil {
			subs = []byte(rec.Subscriptions)
		}
		if _, err := st.ExecContext(ctx, partition, rec.ClientID, rec.ActorID, subs, rec.Cursor, int64(rec.WireVersion), rec.UpdatedAtMs); err != nil {
			return fmt.Errorf("client %s: %w", storage.QuoteID(rec.ClientID), err)
		}
	}
	return nil
}

// BindClient returns the actor of the committed record of clientID, read
// from a read connection; only when there is none does it take the write
// lock and, in one write transaction (in the push commit group; BEGIN
// IMMEDIATE excludes other processes on the file), insert a minimal record
// bound to actorID unless one exists by then, and read the binding back.
func (s *Store) BindClient(ctx context.Context, partition, clientID, actorID string, nowMs int64) (string, error) {
	if _, _, _, err := s.current(); err != nil {
		return "", fmt.Errorf("sqlite: bind client: %w", err)
	}
	if err := storage.CheckClient(partition, storage.ClientRecord{ClientID: clientID, ActorID: actorID}); err != nil {
		return "", fmt.Errorf("sqlite: bind client: %w", err)
	}
	var bound string
	err := s.readQueryRow(ctx, `SELECT actor_id FROM sync_clients WHERE partition_id = ? AND client_id = ?`, partition, clientID).Scan(&bound)
	if err == nil {
		return bound, nil
	}
	if !isNoRows(err) {
		return "", fmt.Errorf("sqlite: bind client %s: %w", storage.QuoteID(clientID), err)
	}
	err = s.writeMember(ctx, "bind client", func(ctx context.Context) error {
		if _, err := s.conn.ExecContext(ctx, `INSERT INTO sync_clients(partition_id, client_id, actor_id, subscriptions, cursor, wire_version, updated_at_ms)
			VALUES(?, ?, ?, NULL, -1, 0, ?) ON CONFLICT(partition_id, client_id) DO NOTHING`, partition, clientID, actorID, nowMs); err != nil {
			return err
		}
		return s.conn.QueryRowContext(ctx, `SELECT actor_id FROM sync_clients WHERE partition_id = ? AND client_id = ?`, partition, clientID).Scan(&bound)
	})
	if err != nil {
		return "", err
	}
	return bound, nil
}

// bindInsertSQL and bindSelectSQL are BindClients' statements (prepared
// once on the writer connection).
const (
	bindInsertSQL = `INSERT INTO sync_clients(partition_id, client_id, actor_id, subscriptions, cursor, wire_version, updated_at_ms)
VALUES(?, ?, ?, NULL, -1, 0, ?) ON CONFLICT(partition_id, client_id) DO NOTHING RETURNING actor_id`
	bindSelectSQL = `SELECT actor_id FROM sync_clients WHERE partition_id = ? AND client_id = ?`
)

// BindClients inserts every binding's minimal record unless one exists,
// in one member of the push commit group (writeMember: the fsync is the
// group's, shared with the pushes and client write-backs of every
// partition of the file waiting then), and returns once it is durable.
// Each INSERT … ON CONFLICT DO NOTHING RETURNING tells whether it created
// the record; only a clientID already bound is read (in the same
// transaction).
func (s *Store) BindClients(ctx context.Context, partition string, nowMs int64, binds ...storage.ClientBinding) ([]storage.BoundClient, error) {
	if _, _, _, err := s.current(); err != nil {
		return nil, fmt.Errorf("sqlite: bind clients: %w", err)
	}
	if err := storage.CheckBindings(partition, binds); err != nil {
		return nil, fmt.Errorf("sqlite: bind clients: %w", err)
	}
	out := make([]storage.BoundClient, len(binds))
	if len(binds) == 0 {
		return out, nil
	}
	err := s.writeMember(ctx, "bind clients", func(ctx context.Context) error {
		ins, err := s.writerStmt(ctx, bindInsertSQL)
		if err != nil {
			return err
		}
		for i, b := range binds {
			var bound string
			err := ins.QueryRowContext(ctx, partition, b.ClientID, b.ActorID, nowMs).Scan(&bound)
			if err == nil {
				out[i] = storage.BoundClient{ActorID: bound, Created: true}
				continue
			}
			if !isNoRows(err) {
				return fmt.Errorf("client %s: %w", storage.QuoteID(b.ClientID), err)
			}
			sel, err := s.writerStmt(ctx, bindSelectSQL)
			if err != nil {
				return err
			}
			if err := sel.QueryRowContext(ctx, partition, b.ClientID).Scan(&bound); err != nil {
				return fmt.Errorf("client %s: %w", storage.QuoteID(b.ClientID), err)
			}
			out[i] = storage.BoundClient{ActorID: bound}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// writeMember runs fn as a member of the push commit group (group.go),
// like a push transaction, so client write-backs from many partitions
// share fsyncs too: it takes the write lock, opens the member savepoint,
// runs fn (with a context that is not cancelled: cancellation is honoured
// only while waiting for the lock) and returns once the group is durable,
// or with fn's error and nothing of fn kept.
func (s *Store) writeMember(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	s.pushWaiters.Add(1)
	err := s.acquire(ctx)
	s.pushWaiters.Add(-1)
	if err != nil {
		return fmt.Errorf("sqlite: %s: %w", what, err)
	}
	if err := s.beginMember(ctx); err != nil {
		s.unlock()
		return fmt.Errorf("sqlite: %s: %w", what, err)
	}
	wctx := context.WithoutCancel(ctx)
	if err := fn(wctx); err != nil {
		s.abortMember()
		return fmt.Errorf("sqlite: %s: %w", what, err)
	}
	if err := s.execWriter(wctx, "RELEASE ptx"); err != nil {
		s.abortMember()
		return fmt.Errorf("sqlite: %s: %w", what, err)
	}
	return s.endMember(true)
}
