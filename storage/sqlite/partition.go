package sqlite

import (
	"context"
	"fmt"

	"github.com/synclane/synclane/storage"
)

// scanPartition reads a registry row selected by sysSQL["readPart"]; a
// missing row is returned with Exists false, not as an error.
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

// ReadPartition returns the committed registry entry from a read
// connection; Exists is false for a never-created partition.
func (s *Store) ReadPartition(ctx context.Context, partition string) (storage.PartitionInfo, error) {
	if _, _, _, err := s.current(); err != nil {
		return storage.PartitionInfo{}, fmt.Errorf("sqlite: read partition %q: %w", partition, err)
	}
	p, err := scanPartition(s.readQueryRow(ctx, sysSQL["readPart"], partition), partition)
	if err != nil {
		return p, fmt.Errorf("sqlite: read partition %q: %w", partition, err)
	}
	return p, nil
}

// TouchPartition reads the entry and, only if it is missing, creates it
// under the write lock with a fresh epoch (storage.NewLogEpoch). A name
// storage.CheckPartition refuses is not created.
func (s *Store) TouchPartition(ctx context.Context, partition string, nowMs int64) (storage.PartitionInfo, error) {
	if err := storage.CheckPartition(partition); err != nil {
		return storage.PartitionInfo{}, fmt.Errorf("sqlite: touch partition: %w", err)
	}
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
	ep := storage.NewLogEpoch()
	if _, err := sys.insertPart.ExecContext(ctx, partition, ep, nowMs); err != nil {
		return p, fmt.Errorf("create partition: %w", err)
	}
	return storage.PartitionInfo{Partition: partition, Exists: true, LogEpoch: ep}, nil
}

// RotateLogEpoch, under the write lock and in one transaction, creates the
// partition if needed, gives it a new epoch (storage.NewLogEpoch), marks it
// required and deletes its client records (and with them the clientID
// bindings). A name storage.CheckPartition refuses is refused.
func (s *Store) RotateLogEpoch(ctx context.Context, partition string, nowMs int64) (string, error) {
	if err := storage.CheckPartition(partition); err != nil {
		return "", fmt.Errorf("sqlite: rotate epoch: %w", err)
	}
	if _, _, _, err := s.current(); err != nil {
		return "", fmt.Errorf("sqlite: rotate epoch of %q: %w", partition, err)
	}
	ep := storage.NewLogEpoch()
	if err := s.lock(ctx); err != nil {
		return "", fmt.Errorf("sqlite: rotate epoch of %q: %w", partition, err)
	}
	defer s.unlock()
	err := s.inWriteTx(ctx, "rotate epoch of "+partition, func(ctx context.Context) error {
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
