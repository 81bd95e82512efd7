package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/storage"
)

// Partition ownership (storage.Ownership).
//
// sync_partitions.owner and owner_generation record each partition's
// owner and its ownership generation (0 and "" until the first claim).
// ClaimPartition raises the generation under the row lock; every write
// that takes the row lock (lockPartition, the pipelined locks of BeginPush
// and PruneBatch, PruneThrough) reads owner_generation in its lock
// statement and, when its context carries a fence, compares it
// (checkFence) before writing anything. The row lock is held until the
// write commits, and ClaimPartition's update waits for it, so a claim
// that returned has seen every write holding the older generation end,
// and every later write reads the new generation. Writes that take no row
// lock (PutClient, DeclareCheckpoint) take a share lock on the row when
// fenced (shareFence), which the claim's update waits for just the same.

// ownershipTables are the tables that need the ownership columns: the
// registry and its partition snapshot table (which CapturePartition fills
// with SELECT * of the registry), when they exist.
func (s *Store) ownershipTables() []string {
	return []string{s.q.partitions, qualify(s.schema, "sync_snapshot__sync_partitions")}
}

// ownershipAlters returns the ALTER TABLE statements adding the ownership
// columns to the tables of ownershipTables that exist without them (none
// on a current database), from the catalog, taking no lock.
func (s *Store) ownershipAlters(ctx context.Context, tx pgx.Tx) ([]string, error) {
	var stmts []string
	for _, table := range s.ownershipTables() {
		var exists, hasOwner, hasGen bool
		err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL,
	EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'owner' AND NOT attisdropped),
	EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'owner_generation' AND NOT attisdropped)`,
			table).Scan(&exists, &hasOwner, &hasGen)
		if err != nil {
			return nil, err
		}
		if exists && !hasOwner {
			stmts = append(stmts, `ALTER TABLE `+table+` ADD COLUMN IF NOT EXISTS owner text NOT NULL DEFAULT ''`)
		}
		if exists && !hasGen {
			stmts = append(stmts, `ALTER TABLE `+table+` ADD COLUMN IF NOT EXISTS owner_generation bigint NOT NULL DEFAULT 0`)
		}
	}
	return stmts, nil
}

// lockForOwnership takes, when the ownership columns are missing, the
// ACCESS EXCLUSIVE lock on sync_partitions that adding them needs. setup
// calls it before the advisory lock, so it takes the two in the bump's
// order (partitions first) and before any other sync table, the writers'
// order; a current database takes no lock.
func (s *Store) lockForOwnership(ctx context.Context, tx pgx.Tx) error {
	stmts, err := s.ownershipAlters(ctx, tx)
	if err != nil || len(stmts) == 0 {
		return err
	}
	_, err = tx.Exec(ctx, `LOCK TABLE `+s.q.partitions+` IN ACCESS EXCLUSIVE MODE`)
	return err
}

// ensureOwnership adds owner and owner_generation to a registry created
// before they existed, and to its snapshot table when one exists
// (ownershipAlters: a no-op EnsureSchema takes no lock on either).
func (s *Store) ensureOwnership(ctx context.Context, tx pgx.Tx) error {
	stmts, err := s.ownershipAlters(ctx, tx)
	if err != nil {
		return err
	}
	for _, stmt := range stmts {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return nil
}

// scanLocked scans a row of q.lockPartition: the entry and its ownership
// generation.
func scanLocked(row pgx.Row, partition string) (storage.PartitionInfo, int64, error) {
	p := storage.PartitionInfo{Partition: partition}
	var gen int64
	if err := row.Scan(&p.LogEpoch, &p.EpochRequired, &p.MaxCommitSeq, &p.HorizonSeq, &gen); err != nil {
		return storage.PartitionInfo{Partition: partition}, 0, err
	}
	p.Exists = true
	return p, gen, nil
}

// checkFence returns nil when ctx carries no fence or carries current (the
// generation read under the partition's lock), else an error wrapping
// storage.ErrOwnershipLost naming the partition and both generations. A
// fence below 1 is never current: claims start at 1, and an unclaimed
// partition's 0 must not pass for one.
func checkFence(ctx context.Context, partition string, current int64) error {
	held, ok := storage.FenceFrom(ctx)
	if !ok || (held == current && held > 0) {
		return nil
	}
	return fmt.Errorf("partition %s: fence generation %d held, current generation %d: %w",
		storage.QuoteID(partition), held, current, storage.ErrOwnershipLost)
}

// shareFence checks the fence ctx carries (if any) in tx, taking a share
// lock on the partition's registry row that lasts until tx ends. A
// partition without a registry row has generation 0, which no fence
// equals (claims start at 1).
func (s *Store) shareFence(ctx context.Context, tx queryer, partition string) error {
	if _, ok := storage.FenceFrom(ctx); !ok {
		return nil
	}
	var gen int64
	err := tx.QueryRow(ctx, s.q.shareOwner, partition).Scan(&gen)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	return checkFence(ctx, partition, gen)
}

// ClaimPartition implements storage.Ownership in one statement (INSERT …
// ON CONFLICT DO UPDATE … RETURNING, its own transaction): it creates the
// registry entry with a fresh log epoch and generation 1, or raises the
// generation of the existing one under its row lock, waiting for every
// transaction holding that lock (pushes, prunes, rotations) to end.
// Serialization failures and deadlocks are retried; the fence ctx may
// carry is ignored. A partition name storage.CheckPartition refuses, or an
// owner that is empty or not storage.Storable, is refused before anything
// is sent (storage.ErrUnstorable).
func (s *Store) ClaimPartition(ctx context.Context, partition, owner string, nowMs int64) (int64, error) {
	if err := s.ready(); err != nil {
		return 0, err
	}
	if err := storage.CheckPartition(partition); err != nil {
		return 0, fmt.Errorf("postgres: ClaimPartition: %w", err)
	}
	if owner == "" || !storage.Storable(owner) {
		return 0, fmt.Errorf("postgres: ClaimPartition %s: owner %s: %w", storage.QuoteID(partition), storage.QuoteID(owner), storage.ErrUnstorable)
	}
	var gen int64
	err := retry(ctx, "ClaimPartition", func() error {
		return s.pool.QueryRow(ctx, s.q.claimPartition, partition, storage.NewLogEpoch(), nowMs, owner).Scan(&gen)
	})
	if err != nil {
		return 0, err
	}
	return gen, nil
}

// PartitionOwner implements storage.Ownership with one read of the
// registry row (no lock).
func (s *Store) PartitionOwner(ctx context.Context, partition string) (string, int64, error) {
	if err := s.ready(); err != nil {
		return "", 0, err
	}
	if !storage.Storable(partition) {
		return "", 0, nil
	}
	var owner string
	var gen int64
	err := retry(ctx, "PartitionOwner", func() error {
		err := s.pool.QueryRow(ctx, s.q.partitionOwner, partition).Scan(&owner, &gen)
		if errors.Is(err, pgx.ErrNoRows) {
			owner, gen, err = "", 0, nil
		}
		return err
	})
	if err != nil {
		return "", 0, err
	}
	return owner, gen, nil
}
