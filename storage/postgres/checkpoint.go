package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/synclane/synclane/storage"
)

// Backfill checkpoints and the writer fence (RFC 0007).
//
// sync_backfill_checkpoints holds one row per (partition, name) and
// sync_writer_fence each partition's required writer version. Every commit
// append writes the store's running schema version (memoized by
// EnsureSchema) into sync_commits.writer_version, and the BEFORE INSERT
// trigger sync_commits_writer_fence (plpgsql function
// sync_writer_fence_check) raises SQLSTATE writerFenceSQLState with message
// sync.storage.writer_fence_rejected when the partition has a fence and
// writer_version is NULL or below it. Errors are classified by that
// SQLSTATE as storage.ErrWriterFenced; since log writes are sent with
// COMMIT, a push sees it from PushTx.Commit.

// writerFenceSQLState is the custom SQLSTATE of the fence trigger (class
// "SL" is unused by PostgreSQL).
const writerFenceSQLState = "SL001"

// ensureFence adds sync_commits.writer_version and creates the trigger
// function and the trigger when missing, so a no-op EnsureSchema takes no
// lock on sync_commits.
func (s *Store) ensureFence(ctx context.Context, tx pgx.Tx) error {
	var hasCol, hasFunc, hasTrigger bool
	err := tx.QueryRow(ctx, `SELECT
	EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'writer_version' AND NOT attisdropped),
	to_regprocedure($2) IS NOT NULL,
	EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgname = 'sync_commits_writer_fence')`,
		s.q.commits, s.q.fenceFunc+"()").Scan(&hasCol, &hasFunc, &hasTrigger)
	if err != nil {
		return err
	}
	var stmts []string
	if !hasCol {
		stmts = append(stmts, `ALTER TABLE `+s.q.commits+` ADD COLUMN IF NOT EXISTS writer_version integer`)
	}
	if !hasFunc {
		stmts = append(stmts, `CREATE OR REPLACE FUNCTION `+s.q.fenceFunc+`() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
	IF EXISTS (SELECT 1 FROM `+s.q.fence+` f WHERE f.partition = NEW.partition
			AND (NEW.writer_version IS NULL OR NEW.writer_version < f.required_writer_version)) THEN
		RAISE EXCEPTION USING ERRCODE = '`+writerFenceSQLState+`', MESSAGE = 'sync.storage.writer_fence_rejected';
	END IF;
	RETURN NEW;
END
$fn$`)
	}
	if !hasTrigger {
		stmts = append(stmts, `CREATE TRIGGER sync_commits_writer_fence BEFORE INSERT ON `+s.q.commits+`
FOR EACH ROW EXECUTE FUNCTION `+s.q.fenceFunc+`()`)
	}
	for _, stmt := range stmts {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return nil
}

const cpCols = `partition, name, schema_version, state, watermark, owner_epoch, observed_rows, updated_at_ms`

func scanCheckpoint(row pgx.Row) (storage.Checkpoint, error) {
	var c storage.Checkpoint
	var state string
	err := row.Scan(&c.Partition, &c.Name, &c.SchemaVersion, &state, &c.Watermark, &c.OwnerEpoch, &c.ObservedRows, &c.UpdatedAtMs)
	c.State = storage.CheckpointState(state)
	return c, err
}

// declareIn inserts the checkpoint if absent and raises the fence to
// max(old, version), inside tx.
func (s *Store) declareIn(ctx context.Context, tx pgx.Tx, d storage.CheckpointDeclaration, nowMs int64) error {
	if _, err := tx.Exec(ctx, `INSERT INTO `+s.q.checkpoints+` (partition, name, schema_version, state, updated_at_ms)
VALUES ($1, $2, $3, 'declared', $4) ON CONFLICT (partition, name) DO NOTHING`, d.Partition, d.Name, d.SchemaVersion, nowMs); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+s.q.fence+` (partition, required_writer_version) VALUES ($1, $2)
ON CONFLICT (partition) DO UPDATE SET required_writer_version = GREATEST(`+s.q.fence+`.required_writer_version, EXCLUDED.required_writer_version)`,
		d.Partition, d.SchemaVersion)
	return err
}

// DeclareCheckpoint inserts the checkpoint (if absent) and raises the
// fence in one transaction, then returns the stored row. It takes neither
// the table lock nor the partition's write lock; when ctx carries an
// ownership fence (storage.WithFence) it first checks it under a share
// lock on the partition's registry row (shareFence) and, when stale,
// fails with storage.ErrOwnershipLost and writes nothing.
func (s *Store) DeclareCheckpoint(ctx context.Context, d storage.CheckpointDeclaration, nowMs int64) (storage.Checkpoint, error) {
	if err := s.ready(); err != nil {
		return storage.Checkpoint{}, err
	}
	if err := d.Validate(); err != nil {
		return storage.Checkpoint{}, fmt.Errorf("postgres: DeclareCheckpoint: %w", err)
	}
	var c storage.Checkpoint
	err := retry(ctx, "DeclareCheckpoint", func() error {
		return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			if err := s.shareFence(ctx, tx, d.Partition); err != nil {
				return err
			}
			if err := s.declareIn(ctx, tx, d, nowMs); err != nil {
				return err
			}
			var err error
			c, err = scanCheckpoint(tx.QueryRow(ctx, `SELECT `+cpCols+` FROM `+s.q.checkpoints+` WHERE partition = $1 AND name = $2`, d.Partition, d.Name))
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("postgres: DeclareCheckpoint %s/%s: %w", d.Partition, d.Name, storage.ErrCheckpointNotDeclared)
			}
			return err
		})
	})
	return c, err
}

// ClaimCheckpoint is one UPDATE … RETURNING; the row lock gives concurrent
// claims distinct epochs.
func (s *Store) ClaimCheckpoint(ctx context.Context, d storage.CheckpointDeclaration, nowMs int64) (storage.Checkpoint, error) {
	if err := s.ready(); err != nil {
		return storage.Checkpoint{}, err
	}
	var c storage.Checkpoint
	err := retry(ctx, "ClaimCheckpoint", func() error {
		var err error
		c, err = scanCheckpoint(s.pool.QueryRow(ctx, `UPDATE `+s.q.checkpoints+`
SET owner_epoch = owner_epoch + 1,
	state = CASE WHEN state = 'declared' THEN 'backfilling' ELSE state END,
	schema_version = $3, updated_at_ms = $4
WHERE partition = $1 AND name = $2 AND state <> 'activated'
RETURNING `+cpCols, d.Partition, d.Name, d.SchemaVersion, nowMs))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return storage.Checkpoint{}, fmt.Errorf("postgres: ClaimCheckpoint %s/%s: %w", d.Partition, d.Name, storage.ErrCheckpointNotDeclared)
	}
	return c, err
}

// ActivateCheckpoint runs in a READ COMMITTED transaction holding the
// partition's row lock (SELECT … FOR UPDATE, as BeginPush takes it), so no
// commit of the partition lands between the coverage check and the update.
// A stale ownership fence in ctx fails it with storage.ErrOwnershipLost
// (lockPartition) before anything is written.
func (s *Store) ActivateCheckpoint(ctx context.Context, partition, name string, epoch, watermark int64, sources []string, nowMs int64) (storage.ActivationOutcome, error) {
	if err := s.ready(); err != nil {
		return "", err
	}
	var out storage.ActivationOutcome
	err := retry(ctx, "ActivateCheckpoint", func() error {
		return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			info, err := s.lockPartition(ctx, tx, partition, nowMs)
			if err != nil {
				return fmt.Errorf("lock partition: %w", err)
			}
			var ver int32
			var fence *int32
			err = tx.QueryRow(ctx, `SELECT c.schema_version, f.required_writer_version FROM `+s.q.checkpoints+` c
LEFT JOIN `+s.q.fence+` f ON f.partition = c.partition WHERE c.partition = $1 AND c.name = $2`, partition, name).Scan(&ver, &fence)
			if errors.Is(err, pgx.ErrNoRows) || (err == nil && (fence == nil || *fence < ver)) {
				return fmt.Errorf("postgres: ActivateCheckpoint %s/%s: %w", partition, name, storage.ErrCheckpointFenceMissing)
			}
			if err != nil {
				return err
			}
			if len(sources) > 0 {
				var changed bool
				if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+s.q.changes+`
WHERE partition = $1 AND table_name = ANY($2::text[]) AND seq > $3)`, partition, sources, watermark).Scan(&changed); err != nil {
					return fmt.Errorf("check source changes: %w", err)
				}
				if changed {
					out = storage.Stale
					return nil
				}
				if info.HorizonSeq > watermark {
					out = storage.Unverifiable
					return nil
				}
			}
			tag, err := tx.Exec(ctx, `UPDATE `+s.q.checkpoints+` SET state = 'activated', watermark = $4, updated_at_ms = $5
WHERE partition = $1 AND name = $2 AND owner_epoch = $3 AND state <> 'activated'`, partition, name, epoch, watermark, nowMs)
			if err != nil {
				return err
			}
			out = storage.Stale
			if tag.RowsAffected() == 1 {
				out = storage.Activated
			}
			return nil
		})
	})
	if err != nil {
		return "", err
	}
	return out, nil
}

// ReadCheckpoints returns every checkpoint ordered by (partition, name).
func (s *Store) ReadCheckpoints(ctx context.Context) ([]storage.Checkpoint, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	var out []storage.Checkpoint
	err := retry(ctx, "ReadCheckpoints", func() error {
		rows, err := s.pool.Query(ctx, `SELECT `+cpCols+` FROM `+s.q.checkpoints+` ORDER BY partition, name`)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.Checkpoint, error) { return scanCheckpoint(r) })
		return err
	})
	return out, err
}

// gateSQL reads the whole gate in one statement (one snapshot).
func (s *Store) gateSQL() string {
	return `SELECT
	coalesce((SELECT schema_version FROM ` + s.q.meta + ` WHERE id = 1), 0),
	coalesce((SELECT log_epoch FROM ` + s.q.partitions + ` WHERE partition = $1), ''),
	coalesce((SELECT horizon_seq FROM ` + s.q.partitions + ` WHERE partition = $1), 0),
	coalesce((SELECT owner_generation FROM ` + s.q.partitions + ` WHERE partition = $1), 0),
	coalesce(array_agg(c.partition ORDER BY c.partition, c.name), '{}'),
	coalesce(array_agg(c.name ORDER BY c.partition, c.name), '{}')
FROM (SELECT partition, name FROM ` + s.q.checkpoints + ` WHERE schema_version = $2 AND state <> 'activated') c`
}

func (s *Store) readGate(ctx context.Context, q queryer, partition string, running int32) (storage.ServeGate, error) {
	var g storage.ServeGate
	var parts, names []string
	if err := q.QueryRow(ctx, s.gateSQL(), partition, running).Scan(&g.StoredSchemaVersion, &g.LogEpoch, &g.HorizonSeq, &g.OwnerGeneration, &parts, &names); err != nil {
		return g, err
	}
	for i := range parts {
		g.Pending = append(g.Pending, storage.CheckpointRef{Partition: parts[i], Name: names[i]})
	}
	return g, nil
}

// ReadServeGate reads the gate in one statement.
func (s *Store) ReadServeGate(ctx context.Context, partition string, running int32) (storage.ServeGate, error) {
	if err := s.ready(); err != nil {
		return storage.ServeGate{}, err
	}
	var g storage.ServeGate
	err := retry(ctx, "ReadServeGate", func() error {
		var err error
		g, err = s.readGate(ctx, s.pool, partition, running)
		return err
	})
	return g, err
}

// PruneThrough deletes the partition's scope index entries, changes,
// commits and tombstones with seq <= min(seq, max_commit_seq) and raises horizon_seq,
// holding the partition's row lock. A partition without a registry row has
// nothing to prune. A fence ctx carries (storage.WithFence) is checked
// under the lock: a stale one fails with storage.ErrOwnershipLost and
// prunes nothing.
func (s *Store) PruneThrough(ctx context.Context, partition string, seq int64) error {
	if err := s.ready(); err != nil {
		return err
	}
	return retry(ctx, "PruneThrough", func() error {
		return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			info, gen, err := scanLocked(tx.QueryRow(ctx, s.q.lockPartition, partition), partition)
			if errors.Is(err, pgx.ErrNoRows) {
				return checkFence(ctx, partition, 0) // nothing to prune, and no fence is current
			}
			if err != nil {
				return err
			}
			if err := checkFence(ctx, partition, gen); err != nil {
				return err
			}
			upTo := min(seq, info.MaxCommitSeq)
			if upTo <= info.HorizonSeq {
				return nil
			}
			for _, q := range []string{
				`DELETE FROM ` + s.q.changeScopes + ` WHERE partition = $1 AND seq <= $2`,
				`DELETE FROM ` + s.q.changes + ` WHERE partition = $1 AND seq <= $2`,
				`DELETE FROM ` + s.q.commits + ` WHERE partition = $1 AND seq <= $2`,
				`DELETE FROM ` + s.q.tombstones + ` WHERE partition = $1 AND commit_seq <= $2`,
				`UPDATE ` + s.q.partitions + ` SET horizon_seq = $2 WHERE partition = $1`,
			} {
				if _, err := tx.Exec(ctx, q, partition, upTo); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// AdvanceCheckpoint compares-and-sets on owner_epoch on the transaction's
// connection (after a pending savepoint, so RollbackToSavepoint undoes it).
func (tx *pushTx) AdvanceCheckpoint(ctx context.Context, name string, epoch, watermark, observedRows int64) (bool, error) {
	if err := tx.check(); err != nil {
		return false, err
	}
	b := &pgx.Batch{}
	for _, p := range tx.writePrefix() {
		b.Queue(p)
	}
	var n int64
	b.Queue(`UPDATE `+tx.s.q.checkpoints+` SET watermark = $4, observed_rows = $5, updated_at_ms = $6
WHERE partition = $1 AND name = $2 AND owner_epoch = $3`, tx.partition, name, epoch, watermark, observedRows, time.Now().UnixMilli()).
		Exec(func(ct pgconn.CommandTag) error {
			n = ct.RowsAffected()
			return nil
		})
	if err := tx.conn.SendBatch(ctx, b).Close(); err != nil {
		return false, classify("AdvanceCheckpoint", err)
	}
	return n == 1, nil
}

// ReadServeGate reads the gate on the transaction's connection, under the
// partition lock.
func (tx *pushTx) ReadServeGate(ctx context.Context, running int32) (storage.ServeGate, error) {
	if err := tx.check(); err != nil {
		return storage.ServeGate{}, err
	}
	g, err := tx.s.readGate(ctx, tx.conn, tx.partition, running)
	return g, classify("ReadServeGate", err)
}
