package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/storage"
)

func scanPartition(row pgx.Row, partition string) (storage.PartitionInfo, error) {
	p := storage.PartitionInfo{Partition: partition}
	err := row.Scan(&p.LogEpoch, &p.EpochRequired, &p.MaxCommitSeq, &p.HorizonSeq)
	if err != nil {
		return storage.PartitionInfo{Partition: partition}, err
	}
	p.Exists = true
	return p, nil
}

// TouchPartition returns the partition's registry entry, creating it with a
// fresh log epoch (storage.NewLogEpoch) if needed. Concurrent first
// contacts agree on one epoch (INSERT ... ON CONFLICT DO NOTHING, then a
// read in a new snapshot). A name storage.CheckPartition refuses is
// refused before anything is sent.
func (s *Store) TouchPartition(ctx context.Context, partition string, nowMs int64) (storage.PartitionInfo, error) {
	if err := s.ready(); err != nil {
		return storage.PartitionInfo{}, err
	}
	if err := storage.CheckPartition(partition); err != nil {
		return storage.PartitionInfo{}, fmt.Errorf("postgres: TouchPartition: %w", err)
	}
	var p storage.PartitionInfo
	err := retry(ctx, "TouchPartition", func() error {
		var err error
		p, err = scanPartition(s.pool.QueryRow(ctx, s.q.insertPartition, partition, storage.NewLogEpoch(), nowMs), partition)
		if errors.Is(err, pgx.ErrNoRows) { // it existed
			p, err = scanPartition(s.pool.QueryRow(ctx, s.q.readPartition, partition), partition)
		}
		return err
	})
	return p, err
}

// ReadPartition returns the registry entry, or one with only Partition set
// (Exists false) when the partition was never touched (or its name is not
// storage.Storable, so it cannot have been).
func (s *Store) ReadPartition(ctx context.Context, partition string) (storage.PartitionInfo, error) {
	if err := s.ready(); err != nil {
		return storage.PartitionInfo{}, err
	}
	if !storage.Storable(partition) {
		return storage.PartitionInfo{Partition: partition}, nil
	}
	var p storage.PartitionInfo
	err := retry(ctx, "ReadPartition", func() error {
		var err error
		p, err = scanPartition(s.pool.QueryRow(ctx, s.q.readPartition, partition), partition)
		if errors.Is(err, pgx.ErrNoRows) {
			p, err = storage.PartitionInfo{Partition: partition}, nil
		}
		return err
	})
	return p, err
}

// lockPartition takes the partition's row lock in tx, creating the row
// first if it does not exist, and returns the entry read under the lock.
// When ctx carries a fence (storage.WithFence) that is not the locked
// row's ownership generation it fails with an error wrapping
// storage.ErrOwnershipLost (checkFence) after taking the lock; the caller
// then writes nothing and rolls back.
func (s *Store) lockPartition(ctx context.Context, tx queryer, partition string, nowMs int64) (storage.PartitionInfo, error) {
	p, gen, err := scanLocked(tx.QueryRow(ctx, s.q.lockPartition, partition), partition)
	if errors.Is(err, pgx.ErrNoRows) {
		_, err = scanPartition(tx.QueryRow(ctx, s.q.insertPartition, partition, storage.NewLogEpoch(), nowMs), partition)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return storage.PartitionInfo{Partition: partition}, err
		}
		// Inserted by us (the row is ours until commit) or by a concurrent
		// transaction that has committed by now: lock it either way.
		p, gen, err = scanLocked(tx.QueryRow(ctx, s.q.lockPartition, partition), partition)
	}
	if err != nil {
		return p, err
	}
	return p, checkFence(ctx, partition, gen)
}

// RotateLogEpoch sets a fresh epoch (storage.NewLogEpoch), marks it
// required and deletes the partition's client records, holding the
// partition's write lock. The partition is created if needed. Rows, commits
// and idempotency records are kept; the deleted client records take their
// clientID bindings with them. A name storage.CheckPartition refuses is
// refused before anything is sent. A stale ownership fence in ctx
// (storage.WithFence) fails it with storage.ErrOwnershipLost under the
// lock, before anything is written (the creation of a missing partition
// included: it is rolled back).
func (s *Store) RotateLogEpoch(ctx context.Context, partition string, nowMs int64) (string, error) {
	if err := s.ready(); err != nil {
		return "", err
	}
	if err := storage.CheckPartition(partition); err != nil {
		return "", fmt.Errorf("postgres: RotateLogEpoch: %w", err)
	}
	var epoch string
	err := retry(ctx, "RotateLogEpoch", func() error {
		return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			if _, err := s.lockPartition(ctx, tx, partition, nowMs); err != nil {
				return fmt.Errorf("lock partition: %w", err)
			}
			epoch = storage.NewLogEpoch()
			if _, err := tx.Exec(ctx, s.q.rotate, partition, epoch); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, s.q.deleteClients, partition)
			return err
		})
	})
	if err != nil {
		return "", err
	}
	return epoch, nil
}
