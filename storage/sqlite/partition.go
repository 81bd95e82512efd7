package sqlite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

func newEpoch() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("random epoch: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

type rowScanner interface{ Scan(dest ...any) error }

func scanPartition(r rowScanner, partition string) (storage.PartitionInfo, error) {
	p := storage.PartitionInfo{Partition: partition}
	var req int64
	err := r.Scan(&p.LogEpoch, &req, &p.MaxCommitSeq, &p.HorizonSeq)
	if isNoRows(err) {
		return storage.PartitionInfo{Partition: partition}, nil
	}
	if err != nil {
		return p, err
	}
	p.Exists, p.EpochRequired = true, req != 0
	return p, nil
}

const readPartSQL = `SELECT log_epoch, epoch_required, max_commit_seq, horizon_seq FROM sync_partitions WHERE partition_id = ?`

// ReadPartition returns the committed registry entry from a read
// connection; Exists is false for a never-created partition.
func (s *Store) ReadPartition(ctx context.Context, partition string) (storage.PartitionInfo, error) {
	if _, _, _, err := s.current(); err != nil {
		return storage.PartitionInfo{}, fmt.Errorf("sqlite: read partition %q: %w", partition, err)
	}
	p, err := scanPartition(s.readQueryRow(ctx, readPartSQL, partition), partition)
	if err != nil {
		return p, fmt.Errorf("sqlite: read partition %q: %w", partition, err)
	}
	return p, nil
}

// TouchPartition reads the entry and, only if it is missing, creates it
// under the write lock with a random 128-bit epoch.
func (s *Store) TouchPartition(ctx context.Context, partition string, nowMs int64) (storage.PartitionInfo, error) {
	p, err := s.ReadPartition(ctx, partition)
	if err != nil || p.Exists {
		return p, err
	}
	_, _, sys, err := s.current()
	if err != nil {
		return p, fmt.Errorf("sqlite: touch partition %q: %w", partition, err)
	}
	if err := s.lock(ctx); err != nil {
		return p, fmt.Errorf("sqlite: touch partition %q: %w", partition, err)
	}
	defer s.unlock()
	err = s.inWriteTx(ctx, "touch partition "+partition, func(ctx context.Context) error {
		p, err = s.ensurePartition(ctx, sys, partition, nowMs)
		return err
	})
	return p, err
}

// ensurePartition reads (creating if needed) the entry inside the
// writer's open transaction.
func (s *Store) ensurePartition(ctx context.Context, sys *sysStmts, partition string, nowMs int64) (storage.PartitionInfo, error) {
	p, err := scanPartition(sys.readPart.QueryRowContext(ctx, partition), partition)
	if err != nil || p.Exists {
		return p, err
	}
	ep, err := newEpoch()
	if err != nil {
		return p, err
	}
	if _, err := sys.insertPart.ExecContext(ctx, partition, ep, nowMs); err != nil {
		return p, fmt.Errorf("create partition: %w", err)
	}
	return storage.PartitionInfo{Partition: partition, Exists: true, LogEpoch: ep}, nil
}

// RotateLogEpoch, under the write lock and in one transaction, creates the
// partition if needed, gives it a new random epoch, marks it required and
// deletes its client records.
func (s *Store) RotateLogEpoch(ctx context.Context, partition string, nowMs int64) (string, error) {
	if _, _, _, err := s.current(); err != nil {
		return "", fmt.Errorf("sqlite: rotate epoch of %q: %w", partition, err)
	}
	ep, err := newEpoch()
	if err != nil {
		return "", fmt.Errorf("sqlite: rotate epoch of %q: %w", partition, err)
	}
	if err := s.lock(ctx); err != nil {
		return "", fmt.Errorf("sqlite: rotate epoch of %q: %w", partition, err)
	}
	defer s.unlock()
	err = s.inWriteTx(ctx, "rotate epoch of "+partition, func(ctx context.Context) error {
		if _, err := s.conn.ExecContext(ctx, `INSERT INTO sync_partitions(partition_id, log_epoch, epoch_required, created_at_ms, epoch_rotated_at_ms)
			VALUES(?1, ?2, 1, ?3, ?3)
			ON CONFLICT(partition_id) DO UPDATE SET log_epoch = excluded.log_epoch, epoch_required = 1, epoch_rotated_at_ms = excluded.epoch_rotated_at_ms`,
			partition, ep, nowMs); err != nil {
			return err
		}
		_, err := s.conn.ExecContext(ctx, `DELETE FROM sync_clients WHERE partition_id = ?`, partition)
		return err
	})
	if err != nil {
		return "", err
	}
	return ep, nil
}

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
