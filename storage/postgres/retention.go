package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// Retention: pruning, the maintenance lock and partition snapshots.
//
// PruneBatch is one READ COMMITTED transaction holding the partition's row
// lock (as pushes take it), so a batch delays that partition's pushes by
// its own duration and no other partition's. Scope index entries are
// deleted per (table, var, value) of the pruned changes (ranges of the
// index's primary key); applied idempotency records through the pruned
// commits' keys, rejected ones through the partial index
// sync_idempotency_rejected on their log position (log_seq).
//
// The maintenance lock is a session-level advisory lock (keyed by the
// store's schema) held on a pooled connection until unlock, so two
// processes sharing the database never run maintenance at once, and a
// process that dies releases it with its session.

// ensureRetention adds sync_idempotency.log_seq to a database created
// before it existed and creates the partial index on rejected records,
// checking the catalog first so a no-op EnsureSchema takes no lock.
func (s *Store) ensureRetention(ctx context.Context, tx pgx.Tx) error {
	idx := qualify(s.schema, "sync_idempotency_rejected")
	var hasCol, hasIdx bool
	err := tx.QueryRow(ctx, `SELECT
	EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'log_seq' AND NOT attisdropped),
	to_regclass($2) IS NOT NULL`, s.q.idempotency, idx).Scan(&hasCol, &hasIdx)
	if err != nil {
		return err
	}
	if !hasCol {
		if _, err := tx.Exec(ctx, `ALTER TABLE `+s.q.idempotency+` ADD COLUMN IF NOT EXISTS log_seq bigint NOT NULL DEFAULT 0`); err != nil {
			return fmt.Errorf("add log_seq: %w", err)
		}
	}
	if !hasIdx {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE INDEX IF NOT EXISTS sync_idempotency_rejected ON %s (partition, log_seq) WHERE status = %d`,
			s.q.idempotency, ssp2.CommitRejected)); err != nil {
			return fmt.Errorf("create sync_idempotency_rejected: %w", err)
		}
	}
	return nil
}

// ListPartitions reads the registry.
func (s *Store) ListPartitions(ctx context.Context) ([]storage.PartitionInfo, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	var out []storage.PartitionInfo
	err := retry(ctx, "ListPartitions", func() error {
		rows, err := s.pool.Query(ctx, s.q.listPartitionInfos)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.PartitionInfo, error) {
			p := storage.PartitionInfo{Exists: true}
			err := r.Scan(&p.Partition, &p.LogEpoch, &p.EpochRequired, &p.MaxCommitSeq, &p.HorizonSeq)
			return p, err
		})
		return err
	})
	return out, err
}

// ReadRetentionInputs reads the entry, the active clients and the
// checkpoint floor in one statement (one snapshot).
func (s *Store) ReadRetentionInputs(ctx context.Context, partition string, activeAfterMs int64) (storage.RetentionInputs, error) {
	if err := s.ready(); err != nil {
		return storage.RetentionInputs{}, err
	}
	in := storage.RetentionInputs{Partition: storage.PartitionInfo{Partition: partition}, MinActiveCursor: -1, CheckpointFloor: -1}
	if !storage.Storable(partition) {
		return in, nil
	}
	err := retry(ctx, "ReadRetentionInputs", func() error {
		var epoch *string
		var req *bool
		var maxSeq, horizon, minCursor, floor *int64
		err := s.pool.QueryRow(ctx, `SELECT p.log_epoch, p.epoch_required, p.max_commit_seq, p.horizon_seq,
	(SELECT count(*) FROM `+s.q.clients+` WHERE partition = $1 AND updated_at_ms > $2 AND cursor >= 0),
	(SELECT min(cursor) FROM `+s.q.clients+` WHERE partition = $1 AND updated_at_ms > $2 AND cursor >= 0),
	(SELECT min(watermark) FROM `+s.q.checkpoints+` WHERE partition = $1 AND state <> 'activated')
FROM (SELECT 1) one LEFT JOIN `+s.q.partitions+` p ON p.partition = $1`, partition, activeAfterMs).
			Scan(&epoch, &req, &maxSeq, &horizon, &in.ActiveClients, &minCursor, &floor)
		if err != nil {
			return err
		}
		if epoch != nil {
			in.Partition = storage.PartitionInfo{Partition: partition, Exists: true, LogEpoch: *epoch,
				EpochRequired: *req, MaxCommitSeq: *maxSeq, HorizonSeq: *horizon}
		}
		if minCursor != nil {
			in.MinActiveCursor = *minCursor
		}
		if floor != nil {
			in.CheckpointFloor = *floor
		}
		return nil
	})
	return in, err
}

// FirstCommitAfter walks the commits' primary key from afterSeq.
func (s *Store) FirstCommitAfter(ctx context.Context, partition string, afterSeq, upToSeq, createdAfterMs int64) (int64, error) {
	if err := s.ready(); err != nil {
		return 0, err
	}
	if !storage.Storable(partition) {
		return 0, nil
	}
	var seq int64
	err := retry(ctx, "FirstCommitAfter", func() error {
		err := s.pool.QueryRow(ctx, `SELECT seq FROM `+s.q.commits+` WHERE partition = $1 AND seq > $2 AND seq <= $3 AND created_at_ms > $4
ORDER BY seq LIMIT 1`, partition, afterSeq, upToSeq, createdAfterMs).Scan(&seq)
		if errors.Is(err, pgx.ErrNoRows) {
			seq, err = 0, nil
		}
		return err
	})
	return seq, err
}

// PruneBatch deletes one batch in one transaction holding the partition's
// row lock, in two round trips: BEGIN, the lock and the reads of the
// batch's scope keys and commit keys (the range computed from the locked
// registry row), then every delete with COMMIT (the tombstones at or
// below the new horizon included). Each delete names its
// index prefix with constants (one per scope key, one per pruned commit's
// idempotency record), so its plan is an index range whatever the table
// statistics say. The transaction commits with synchronous_commit off: a
// batch lost in a crash is lost whole (deletes and horizon together) and
// the next pass does it again, so it need not wait for the WAL flush that
// pushes wait for. An ownership fence in ctx (storage.WithFence) is
// compared with the generation the lock statement reads: a stale one
// fails the batch with storage.ErrOwnershipLost before any delete is sent,
// and so does a log epoch other than req.LogEpoch, read from the locked
// row (storage.ErrLogEpochChanged): RotateLogEpoch and RestorePartition
// take the same row lock, so a batch and a rotation serialize.
func (s *Store) PruneBatch(ctx context.Context, partition string, req storage.PruneRequest) (storage.PruneResult, error) {
	if err := s.ready(); err != nil {
		return storage.PruneResult{}, err
	}
	if !storage.Storable(partition) {
		return storage.PruneResult{}, nil // never created: cannot be pruned
	}
	var res storage.PruneResult
	err := retry(ctx, "PruneBatch", func() error {
		var err error
		res, err = s.pruneBatch(ctx, partition, req.LogEpoch, req.ThroughSeq, int64(req.MaxCommits))
		return err
	})
	return res, err
}

// scopeKey is one (table, var, value) entry prefix of the scope index.
type scopeKey struct{ table, v, val string }

// commitKey is a pruned commit's idempotency key.
type commitKey struct {
	seq        int64
	client, cc string
}

func (s *Store) pruneBatch(ctx context.Context, partition, logEpoch string, throughSeq, maxCommits int64) (storage.PruneResult, error) {
	var res storage.PruneResult
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return res, err
	}
	finished := false
	defer func() {
		if c := conn.Conn(); !finished && !c.IsClosed() && c.PgConn().TxStatus() != 'I' {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if _, err := c.Exec(rctx, "ROLLBACK"); err != nil {
				_ = c.Close(rctx)
			}
			cancel()
		}
		conn.Release() // destroys the connection if it is not idle
	}()
	// The range of the batch, from the locked registry row.
	const rng = `p.partition = $1 AND c.partition = $1 AND c.seq > p.horizon_seq
	AND c.seq <= LEAST($2::bigint, p.max_commit_seq, p.horizon_seq + $3::bigint)`
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
	var info storage.PartitionInfo
	var gen int64
	var lockErr error
	b.Queue(s.q.lockPartition, partition).QueryRow(func(row pgx.Row) error {
		info, gen, lockErr = scanLocked(row, partition)
		return nil
	})
	var keys []scopeKey
	b.Queue(`SELECT DISTINCT c.table_name, kv.key, kv.value FROM `+s.q.partitions+` p, `+s.q.changes+` c,
	jsonb_each_text(CASE WHEN jsonb_typeof(c.scopes::jsonb) = 'object' THEN c.scopes::jsonb ELSE '{}'::jsonb END) kv
WHERE `+rng, partition, throughSeq, maxCommits).Query(func(rows pgx.Rows) error {
		var err error
		keys, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (scopeKey, error) {
			var k scopeKey
			err := r.Scan(&k.table, &k.v, &k.val)
			return k, err
		})
		return err
	})
	var commits []commitKey
	b.Queue(`SELECT c.seq, c.client_id, c.client_commit_id FROM `+s.q.partitions+` p, `+s.q.commits+` c WHERE `+rng,
		partition, throughSeq, maxCommits).Query(func(rows pgx.Rows) error {
		var err error
		commits, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (commitKey, error) {
			var k commitKey
			err := r.Scan(&k.seq, &k.client, &k.cc)
			return k, err
		})
		return err
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return res, err
	}
	if errors.Is(lockErr, pgx.ErrNoRows) {
		// Never created: nothing to prune (the deferred ROLLBACK ends the
		// transaction), and no fence is current (generation 0).
		return res, checkFence(ctx, partition, 0)
	}
	if lockErr != nil {
		return res, lockErr
	}
	if err := checkFence(ctx, partition, gen); err != nil {
		return res, err // nothing deleted yet: the deferred ROLLBACK ends the transaction
	}
	h := info.HorizonSeq
	res.PreviousHorizonSeq, res.HorizonSeq = h, h
	if info.LogEpoch != logEpoch {
		// Rotated or restored since the plan read its inputs (the rotation
		// holds this row lock too): nothing deleted, the deferred ROLLBACK
		// ends the transaction.
		return res, fmt.Errorf("prune %q at epoch %q (now %q): %w", partition, logEpoch, info.LogEpoch, storage.ErrLogEpochChanged)
	}
	upTo := min(throughSeq, info.MaxCommitSeq, h+maxCommits)
	if maxCommits < 1 || upTo <= h {
		return res, nil
	}
	b = &pgx.Batch{}
	b.Queue(`SET LOCAL synchronous_commit = off`)
	for _, k := range keys {
		b.Queue(`DELETE FROM `+s.q.changeScopes+` WHERE partition = $1 AND table_name = $2 AND var = $3 AND value = $4 AND seq > $5 AND seq <= $6`,
			partition, k.table, k.v, k.val, h, upTo)
	}
	var idem int64
	add := func(dst *int64) func(pgconn.CommandTag) error {
		return func(ct pgconn.CommandTag) error {
			*dst += ct.RowsAffected()
			return nil
		}
	}
	for _, k := range commits {
		b.Queue(`DELETE FROM `+s.q.idempotency+` WHERE partition = $1 AND client_id = $2 AND client_commit_id = $3 AND status = $4 AND commit_seq = $5`,
			partition, k.client, k.cc, int16(ssp2.CommitApplied), k.seq).Exec(add(&idem))
	}
	b.Queue(`DELETE FROM `+s.q.idempotency+` WHERE partition = $1 AND status = $2 AND log_seq <= $3`,
		partition, int16(ssp2.CommitRejected), upTo).Exec(add(&idem))
	b.Queue(`DELETE FROM `+s.q.changes+` WHERE partition = $1 AND seq > $2 AND seq <= $3`, partition, h, upTo).Exec(add(&res.Changes))
	b.Queue(`DELETE FROM `+s.q.commits+` WHERE partition = $1 AND seq > $2 AND seq <= $3`, partition, h, upTo).Exec(add(&res.Commits))
	// Every tombstone at or below the new horizon (SPEC §2.2, §4.6), an
	// index range of sync_tombstones_by_seq.
	b.Queue(`DELETE FROM `+s.q.tombstones+` WHERE partition = $1 AND commit_seq <= $2`, partition, upTo).Exec(add(&res.Tombstones))
	b.Queue(`UPDATE `+s.q.partitions+` SET horizon_seq = $2 WHERE partition = $1`, partition, upTo)
	var tag string
	b.Queue("COMMIT").Exec(func(ct pgconn.CommandTag) error {
		tag = ct.String()
		return nil
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return storage.PruneResult{PreviousHorizonSeq: h, HorizonSeq: h}, err
	}
	if tag != "COMMIT" {
		return storage.PruneResult{PreviousHorizonSeq: h, HorizonSeq: h}, fmt.Errorf("prune (%d, %d]: the transaction was rolled back (server answered %q)", h, upTo, tag)
	}
	finished = true
	res.IdempotencyRecords, res.HorizonSeq = idem, upTo
	return res, nil
}

// CountPrune counts what PruneBatch calls through throughSeq would
// delete, in one statement (one snapshot).
func (s *Store) CountPrune(ctx context.Context, partition string, throughSeq int64) (storage.PruneResult, error) {
	if err := s.ready(); err != nil {
		return storage.PruneResult{}, err
	}
	if !storage.Storable(partition) {
		return storage.PruneResult{}, nil
	}
	q := `WITH b AS (SELECT horizon_seq AS h, LEAST($2::bigint, max_commit_seq) AS u FROM ` + s.q.partitions + ` WHERE partition = $1)
SELECT b.h, b.u,
	(SELECT count(*) FROM ` + s.q.commits + ` c WHERE c.partition = $1 AND c.seq > b.h AND c.seq <= b.u),
	(SELECT count(*) FROM ` + s.q.changes + ` ch WHERE ch.partition = $1 AND ch.seq > b.h AND ch.seq <= b.u),
	(SELECT count(*) FROM ` + s.q.commits + ` c JOIN ` + s.q.idempotency + ` i
		ON i.partition = c.partition AND i.client_id = c.client_id AND i.client_commit_id = c.client_commit_id
		WHERE c.partition = $1 AND c.seq > b.h AND c.seq <= b.u AND i.status = $3 AND i.commit_seq = c.seq),
	(SELECT count(*) FROM ` + s.q.idempotency + ` i WHERE b.u > b.h AND i.partition = $1 AND i.status = $4 AND i.log_seq <= b.u),
	(SELECT count(*) FROM ` + s.q.tombstones + ` t WHERE b.u > b.h AND t.partition = $1 AND t.commit_seq <= b.u)
FROM b`
	var res storage.PruneResult
	err := retry(ctx, "CountPrune", func() error {
		var upTo, applied, rejected int64
		res = storage.PruneResult{}
		err := s.pool.QueryRow(ctx, q, partition, throughSeq, int16(ssp2.CommitApplied), int16(ssp2.CommitRejected)).
			Scan(&res.HorizonSeq, &upTo, &res.Commits, &res.Changes, &applied, &rejected, &res.Tombstones)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		res.PreviousHorizonSeq = res.HorizonSeq
		res.HorizonSeq = max(res.HorizonSeq, upTo)
		res.IdempotencyRecords = applied + rejected
		return nil
	})
	return res, err
}

// maintenanceKey is the advisory lock key expression of the store's
// maintenance lock ($1: the schema name, NULL for the search_path's).
const maintenanceKey = `hashtextextended('synclane.maintenance:' || coalesce($1::text, current_schema()::text), 0)`

// MaintenanceHolder reads who holds the maintenance lock from pg_locks and
// pg_stat_activity: Holder describes the holding session (its backend pid,
// client address and application name; PID and Host stay unknown, the
// holding process is the database's client), Since is when that session
// last changed state (about when it took the lock: it idles holding it),
// Expires is zero (the lock lasts as long as the session). ok is false
// when nobody holds it.
func (s *Store) MaintenanceHolder(ctx context.Context) (storage.MaintenanceHolder, bool, error) {
	if err := s.ready(); err != nil {
		return storage.MaintenanceHolder{}, false, err
	}
	var schemaArg any
	if s.schema != "" {
		schemaArg = s.schema
	}
	var pid int64
	var since *time.Time
	var addr, app string
	err := s.pool.QueryRow(ctx, `WITH k AS (SELECT `+maintenanceKey+` AS key)
SELECT l.pid, a.state_change, coalesce(host(a.client_addr), 'local'), coalesce(a.application_name, '')
FROM k, pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
	AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND l.classid::text::bigint = ((k.key >> 32) & 4294967295) AND l.objid::text::bigint = (k.key & 4294967295)
LIMIT 1`, schemaArg).Scan(&pid, &since, &addr, &app)
	if errors.Is(err, pgx.ErrNoRows) {
		return storage.MaintenanceHolder{}, false, nil
	}
	if err != nil {
		return storage.MaintenanceHolder{}, false, classify("MaintenanceHolder", err)
	}
	h := storage.MaintenanceHolder{Holder: fmt.Sprintf("PostgreSQL session (backend pid %d, client %s", pid, addr)}
	if app != "" {
		h.Holder += ", application " + app
	}
	h.Holder += ")"
	if since != nil {
		h.Since = *since
	}
	return h, true, nil
}

// TryLockMaintenance takes the session-level advisory lock on a pooled
// connection it keeps until unlock.
func (s *Store) TryLockMaintenance(ctx context.Context) (func(), bool, error) {
	if err := s.ready(); err != nil {
		return nil, false, err
	}
	var schemaArg any
	if s.schema != "" {
		schemaArg = s.schema
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, false, classify("TryLockMaintenance", err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(`+maintenanceKey+`)`, schemaArg).Scan(&ok); err != nil {
		conn.Release()
		return nil, false, classify("TryLockMaintenance", err)
	}
	if !ok {
		conn.Release()
		return nil, false, nil
	}
	released := false
	return func() {
		if released {
			return
		}
		released = true
		uctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var unlocked bool
		if err := conn.QueryRow(uctx, `SELECT pg_advisory_unlock(`+maintenanceKey+`)`, schemaArg).Scan(&unlocked); err != nil || !unlocked {
			// Ending the session releases the lock.
			_ = conn.Conn().Close(uctx)
		}
		conn.Release()
	}, true, nil
}

// snapshotTable is one table a partition snapshot copies.
type snapshotTable struct {
	src, snap, pcol string
	// cols, for a row table, lists the columns copied (every column of
	// the ensured table, the column versions included), so a snapshot
	// table an older build created without _sync_column_versions (added
	// to it on the next capture) still lines up; "" copies SELECT *.
	cols string
}

// snapshotTables lists the log tables and every synced row table with the
// tables holding their snapshot rows.
func (s *Store) snapshotTables() []snapshotTable {
	snap := func(name string) string {
		n := "sync_snapshot__" + name
		if len(n) > 63 {
			n = indexName("sync_snapshot", "t", name)
		}
		return qualify(s.schema, n)
	}
	out := []snapshotTable{
		{s.q.partitions, snap("sync_partitions"), "partition", ""},
		{s.q.commits, snap("sync_commits"), "partition", ""},
		{s.q.changes, snap("sync_changes"), "partition", ""},
		{s.q.changeScopes, snap("sync_change_scopes"), "partition", ""},
		{s.q.idempotency, snap("sync_idempotency"), "partition", ""},
		{s.q.tombstones, snap("sync_tombstones"), "partition", ""},
		// The blob reference index, so it matches the restored rows.
		{s.q.blobRefs(), snap("sync_blob_refs"), "partition", ""},
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for name, t := range s.tables {
		out = append(out, snapshotTable{src: t.ident, snap: snap(name), pcol: "partition_id", cols: "partition_id, " + t.txSelectList})
	}
	return out
}

// CapturePartition copies the partition's rows of every log and row table
// into snapshot tables of the store's schema, in one transaction holding
// the partition's row lock, and marks the partition captured. A stale
// ownership fence in ctx fails it with storage.ErrOwnershipLost under the
// lock, before anything is written.
func (s *Store) CapturePartition(ctx context.Context, partition string) error {
	if err := s.ready(); err != nil {
		return err
	}
	if err := storage.CheckPartition(partition); err != nil {
		return fmt.Errorf("postgres: CapturePartition: %w", err)
	}
	tables := s.snapshotTables()
	marks := qualify(s.schema, "sync_snapshot_marks")
	return retry(ctx, "CapturePartition", func() error {
		return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			if _, err := s.lockPartition(ctx, tx, partition, time.Now().UnixMilli()); err != nil {
				return fmt.Errorf("lock partition: %w", err)
			}
			stmts := []string{`CREATE TABLE IF NOT EXISTS ` + marks + ` (partition text COLLATE "C" PRIMARY KEY)`,
				`INSERT INTO ` + marks + ` (partition) VALUES ($1) ON CONFLICT DO NOTHING`}
			for _, t := range tables {
				stmts = append(stmts, `CREATE TABLE IF NOT EXISTS `+t.snap+` (LIKE `+t.src+`)`)
				ins := `INSERT INTO ` + t.snap + ` SELECT * FROM ` + t.src + ` WHERE ` + t.pcol + ` = $1`
				if t.cols != "" {
					stmts = append(stmts, `ALTER TABLE `+t.snap+` ADD COLUMN IF NOT EXISTS `+columnVersionsCol+` bytea`)
					ins = `INSERT INTO ` + t.snap + ` (` + t.cols + `) SELECT ` + t.cols + ` FROM ` + t.src + ` WHERE ` + t.pcol + ` = $1`
				}
				stmts = append(stmts, `DELETE FROM `+t.snap+` WHERE `+t.pcol+` = $1`, ins)
			}
			for _, q := range stmts {
				args := []any{partition}
				if !strings.Contains(q, "$1") {
					args = nil
				}
				if _, err := tx.Exec(ctx, q, args...); err != nil {
					return fmt.Errorf("%s: %w", q, err)
				}
			}
			return nil
		})
	})
}

// RestorePartition replaces the partition's rows of every log and row
// table with its capture and rotates its epoch, in one transaction
// holding the partition's row lock. A table without a snapshot table (one
// added after the capture was taken, such as sync_tombstones under an
// older build's capture) is emptied for the partition, as it was then. Restored commits get this store's
// running schema version as their writer version (they were accepted
// once; the writer fence must not refuse them again). A stale ownership
// fence in ctx fails it with storage.ErrOwnershipLost under the lock,
// before anything is written; the owner and generation are not part of a
// capture and are kept.
func (s *Store) RestorePartition(ctx context.Context, partition string, nowMs int64) (string, error) {
	if err := s.ready(); err != nil {
		return "", err
	}
	if err := storage.CheckPartition(partition); err != nil {
		return "", fmt.Errorf("postgres: RestorePartition: %w", err)
	}
	tables := s.snapshotTables()
	marks := qualify(s.schema, "sync_snapshot_marks")
	s.mu.RLock()
	running := s.running
	s.mu.RUnlock()
	var epoch string
	err := retry(ctx, "RestorePartition", func() error {
		return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			if _, err := s.lockPartition(ctx, tx, partition, nowMs); err != nil {
				return fmt.Errorf("lock partition: %w", err)
			}
			var captured bool
			if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, marks).Scan(&captured); err != nil {
				return err
			}
			if captured {
				if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+marks+` WHERE partition = $1)`, partition).Scan(&captured); err != nil {
					return err
				}
			}
			if !captured {
				return storage.ErrNoSnapshot
			}
			for _, t := range tables {
				var stmts []string
				switch t.src {
				case s.q.partitions:
					stmts = []string{`UPDATE ` + t.src + ` p SET
	max_commit_seq = coalesce((SELECT max_commit_seq FROM ` + t.snap + ` WHERE partition = $1), 0),
	horizon_seq = coalesce((SELECT horizon_seq FROM ` + t.snap + ` WHERE partition = $1), 0)
WHERE p.partition = $1`}
				case s.q.commits:
					stmts = []string{`DELETE FROM ` + t.src + ` WHERE partition = $1`,
						`INSERT INTO ` + t.src + ` (partition, seq, created_at_ms, actor_id, client_id, client_commit_id, writer_version)
SELECT partition, seq, created_at_ms, actor_id, client_id, client_commit_id, ` + fmt.Sprint(running) + ` FROM ` + t.snap + ` WHERE partition = $1`}
				default:
					stmts = []string{`DELETE FROM ` + t.src + ` WHERE ` + t.pcol + ` = $1`}
					// A table the capture did not know (sync_tombstones
					// under a capture taken before it existed) held
					// nothing then: its rows are only deleted.
					var captured bool
					if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, t.snap).Scan(&captured); err != nil {
						return err
					}
					switch {
					case !captured:
					case t.cols != "":
						// A row table captured by an older build has no
						// column versions: its rows come back legacy (NULL).
						stmts = append(stmts, `ALTER TABLE `+t.snap+` ADD COLUMN IF NOT EXISTS `+columnVersionsCol+` bytea`,
							`INSERT INTO `+t.src+` (`+t.cols+`) SELECT `+t.cols+` FROM `+t.snap+` WHERE `+t.pcol+` = $1`)
					default:
						stmts = append(stmts, `INSERT INTO `+t.src+` SELECT * FROM `+t.snap+` WHERE `+t.pcol+` = $1`)
					}
				}
				for _, q := range stmts {
					args := []any{partition}
					if !strings.Contains(q, "$1") {
						args = nil
					}
					if _, err := tx.Exec(ctx, q, args...); err != nil {
						return fmt.Errorf("%s: %w", q, err)
					}
				}
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
		return "", fmt.Errorf("postgres: RestorePartition %q: %w", partition, err)
	}
	return epoch, nil
}
