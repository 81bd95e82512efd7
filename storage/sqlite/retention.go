package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"

	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// Retention: pruning, the maintenance lease, partition snapshots and
// online backups.
//
// Pruning runs each batch in its own BEGIN IMMEDIATE transaction under the
// process write lock (the one every push holds), so a batch delays pushes
// of every partition by its own duration only. Scope index entries are
// deleted per (table, scope key) of the pruned changes, a range of the
// index's primary key, never by a scan of the partition's whole index.
// Applied idempotency records are found through the pruned commits' keys;
// rejected ones through the partial index sync_idempotency_rejected on
// their log position (the log_seq column).

// installRetention adds sync_idempotency.log_seq to a database created
// before it existed and the partial index on rejected records; inside the
// open transaction on the writer connection.
func (s *Store) installRetention(ctx context.Context) error {
	var n int
	if err := s.conn.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('sync_idempotency') WHERE name = 'log_seq'`).Scan(&n); err != nil {
		return fmt.Errorf("read sync_idempotency columns: %w", err)
	}
	if n == 0 {
		if _, err := s.conn.ExecContext(ctx, `ALTER TABLE sync_idempotency ADD COLUMN log_seq INTEGER NOT NULL DEFAULT 0`); err != nil {
			return fmt.Errorf("add sync_idempotency.log_seq: %w", err)
		}
	}
	_, err := s.conn.ExecContext(ctx, fmt.Sprintf(`CREATE INDEX IF NOT EXISTS sync_idempotency_rejected ON sync_idempotency(partition_id, log_seq) WHERE status = %d`, ssp2.CommitRejected))
	return err
}

// ListPartitions reads the registry from a read connection.
func (s *Store) ListPartitions(ctx context.Context) ([]storage.PartitionInfo, error) {
	if _, _, _, err := s.current(); err != nil {
		return nil, fmt.Errorf("sqlite: list partitions: %w", err)
	}
	rows, err := s.readQuery(ctx, `SELECT partition_id, log_epoch, epoch_required, max_commit_seq, horizon_seq FROM sync_partitions ORDER BY partition_id`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list partitions: %w", err)
	}
	defer rows.Close()
	var out []storage.PartitionInfo
	for rows.Next() {
		p := storage.PartitionInfo{Exists: true}
		var req int64
		if err := rows.Scan(&p.Partition, &p.LogEpoch, &req, &p.MaxCommitSeq, &p.HorizonSeq); err != nil {
			return nil, fmt.Errorf("sqlite: list partitions: %w", err)
		}
		p.EpochRequired = req != 0
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list partitions: %w", err)
	}
	return out, nil
}

// ReadRetentionInputs reads the registry entry, the active clients and the
// checkpoint floor in one read transaction (one WAL snapshot).
func (s *Store) ReadRetentionInputs(ctx context.Context, partition string, activeAfterMs int64) (storage.RetentionInputs, error) {
	if _, _, _, err := s.current(); err != nil {
		return storage.RetentionInputs{}, fmt.Errorf("sqlite: read retention inputs: %w", err)
	}
	in := storage.RetentionInputs{}
	var minCursor, floor, req sql.NullInt64
	var epoch sql.NullString
	var maxSeq, horizon sql.NullInt64
	err := s.readQueryRow(ctx, `SELECT
		(SELECT log_epoch FROM sync_partitions WHERE partition_id = ?1),
		(SELECT epoch_required FROM sync_partitions WHERE partition_id = ?1),
		(SELECT max_commit_seq FROM sync_partitions WHERE partition_id = ?1),
		(SELECT horizon_seq FROM sync_partitions WHERE partition_id = ?1),
		(SELECT count(*) FROM sync_clients WHERE partition_id = ?1 AND updated_at_ms > ?2 AND cursor >= 0),
		(SELECT min(cursor) FROM sync_clients WHERE partition_id = ?1 AND updated_at_ms > ?2 AND cursor >= 0),
		(SELECT min(watermark) FROM sync_backfill_checkpoints WHERE partition_id = ?1 AND state <> 'activated')`,
		partition, activeAfterMs).Scan(&epoch, &req, &maxSeq, &horizon, &in.ActiveClients, &minCursor, &floor)
	if err != nil {
		return in, fmt.Errorf("sqlite: read retention inputs of %q: %w", partition, err)
	}
	in.Partition = storage.PartitionInfo{Partition: partition, Exists: epoch.Valid, LogEpoch: epoch.String,
		EpochRequired: req.Int64 != 0, MaxCommitSeq: maxSeq.Int64, HorizonSeq: horizon.Int64}
	in.MinActiveCursor, in.CheckpointFloor = -1, -1
	if minCursor.Valid {
		in.MinActiveCursor = minCursor.Int64
	}
	if floor.Valid {
		in.CheckpointFloor = floor.Int64
	}
	return in, nil
}

// FirstCommitAfter walks the commits' primary key from afterSeq.
func (s *Store) FirstCommitAfter(ctx context.Context, partition string, afterSeq, upToSeq, createdAfterMs int64) (int64, error) {
	if _, _, _, err := s.current(); err != nil {
		return 0, fmt.Errorf("sqlite: first commit after: %w", err)
	}
	var seq int64
	err := s.readQueryRow(ctx, `SELECT seq FROM sync_commits WHERE partition_id = ? AND seq > ? AND seq <= ? AND created_at_ms > ? ORDER BY seq LIMIT 1`,
		partition, afterSeq, upToSeq, createdAfterMs).Scan(&seq)
	if isNoRows(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sqlite: first commit after %d in %q: %w", afterSeq, partition, err)
	}
	return seq, nil
}

// PruneBatch deletes one batch in one write transaction under the process
// write lock (an open push group is committed first; RotateLogEpoch and
// RestorePartition take the same lock), after verifying the partition's
// log epoch in that transaction.
func (s *Store) PruneBatch(ctx context.Context, partition string, req storage.PruneRequest) (storage.PruneResult, error) {
	if _, _, _, err := s.current(); err != nil {
		return storage.PruneResult{}, fmt.Errorf("sqlite: prune: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return storage.PruneResult{}, fmt.Errorf("sqlite: prune %q: %w", partition, err)
	}
	defer s.unlock()
	// The batch commits without its own fsync (synchronous NORMAL in WAL
	// mode): a batch lost in a crash is lost whole (deletes and horizon
	// together) and the next pass does it again; the next push's fsync
	// makes it durable with it. Pushes never run under NORMAL: they wait
	// for the write lock this batch holds until FULL is back.
	if _, err := s.conn.ExecContext(ctx, "PRAGMA synchronous = NORMAL"); err != nil {
		return storage.PruneResult{}, fmt.Errorf("sqlite: prune %q: %w", partition, err)
	}
	defer s.restoreSynchronous()
	var res storage.PruneResult
	err := s.inWriteTx(ctx, "prune "+partition, func(ctx context.Context) error {
		var maxSeq int64
		var epoch string
		err := s.conn.QueryRowContext(ctx, `SELECT log_epoch, max_commit_seq, horizon_seq FROM sync_partitions WHERE partition_id = ?`, partition).Scan(&epoch, &maxSeq, &res.HorizonSeq)
		if isNoRows(err) {
			return nil
		}
		if err != nil {
			return err
		}
		h := res.HorizonSeq
		res.PreviousHorizonSeq = h
		if epoch != req.LogEpoch {
			return fmt.Errorf("at epoch %q (now %q): %w", req.LogEpoch, epoch, storage.ErrLogEpochChanged)
		}
		if req.MaxCommits < 1 {
			return nil
		}
		upTo := min(req.ThroughSeq, maxSeq, h+int64(req.MaxCommits))
		if upTo <= h {
			return nil
		}
		n, err := s.pruneRange(ctx, partition, h, upTo)
		if err != nil {
			return err
		}
		n.PreviousHorizonSeq, n.HorizonSeq = h, upTo
		res = n
		return nil
	})
	return res, err
}

// countPruneSQL counts what pruning (h, upTo] deletes, upTo =
// min(?2, max_commit_seq), in one statement (one read snapshot).
var countPruneSQL = fmt.Sprintf(`WITH b AS (SELECT horizon_seq AS h, min(?2, max_commit_seq) AS u FROM sync_partitions WHERE partition_id = ?1)
SELECT b.h, b.u,
	(SELECT count(*) FROM sync_commits c WHERE c.partition_id = ?1 AND c.seq > b.h AND c.seq <= b.u),
	(SELECT count(*) FROM sync_changes ch WHERE ch.partition_id = ?1 AND ch.commit_seq > b.h AND ch.commit_seq <= b.u),
	(SELECT count(*) FROM sync_commits c JOIN sync_idempotency i
		ON i.partition_id = c.partition_id AND i.client_id = c.client_id AND i.client_commit_id = c.client_commit_id
		WHERE c.partition_id = ?1 AND c.seq > b.h AND c.seq <= b.u AND i.status = %d AND i.commit_seq = c.seq),
	(SELECT count(*) FROM sync_idempotency i WHERE b.u > b.h AND i.partition_id = ?1 AND i.status = %d AND i.log_seq <= b.u),
	(SELECT count(*) FROM sync_tombstones t WHERE b.u > b.h AND t.partition_id = ?1 AND t.commit_seq <= b.u)
FROM b`, ssp2.CommitApplied, ssp2.CommitRejected)

// CountPrune counts what PruneBatch calls through throughSeq would
// delete, in one statement on a read connection.
func (s *Store) CountPrune(ctx context.Context, partition string, throughSeq int64) (storage.PruneResult, error) {
	if _, _, _, err := s.current(); err != nil {
		return storage.PruneResult{}, fmt.Errorf("sqlite: count prune: %w", err)
	}
	var res storage.PruneResult
	var upTo, applied, rejected int64
	err := s.readQueryRow(ctx, countPruneSQL, partition, throughSeq).Scan(&res.HorizonSeq, &upTo, &res.Commits, &res.Changes, &applied, &rejected, &res.Tombstones)
	if isNoRows(err) {
		return storage.PruneResult{}, nil
	}
	if err != nil {
		return storage.PruneResult{}, fmt.Errorf("sqlite: count prune %q: %w", partition, err)
	}
	res.PreviousHorizonSeq = res.HorizonSeq
	if upTo > res.HorizonSeq {
		res.HorizonSeq = upTo
	}
	res.IdempotencyRecords = applied + rejected
	return res, nil
}

// restoreSynchronous puts the writer connection back to synchronous FULL
// after a write committed without fsync (a pruning batch, a blob claim);
// if that fails the store refuses every later write rather than commit one
// without fsync.
func (s *Store) restoreSynchronous() {
	ctx := context.Background()
	for range 3 {
		if _, err := s.conn.ExecContext(ctx, "PRAGMA synchronous = FULL"); err == nil {
			return
		} else {
			s.log.Error("sqlite: restoring synchronous=FULL after a write without fsync (a pruning batch or a blob claim) failed; retrying", zap.Error(err))
		}
	}
	s.log.Error("sqlite: could not restore synchronous=FULL: closing the store")
	_ = s.Close() // takes no lock; later calls fail with the store closed
}

// pruneSQL are the statements of a pruning batch, each a search of a
// primary key or of the partial index on rejected records (checked by
// TestPruneStatementsSearchIndexes).
var pruneSQL = struct {
	scopeKeys, deleteScopes, commitKeys, deleteApplied, deleteRejected, deleteChanges, deleteCommits, deleteTombstones string
}{
	scopeKeys: `SELECT DISTINCT ch.table_name, j.key, j.value FROM sync_changes ch, json_each(ch.scopes) j
		WHERE ch.partition_id = ? AND ch.commit_seq > ? AND ch.commit_seq <= ?`,
	deleteScopes:   `DELETE FROM sync_change_scopes WHERE partition_id = ? AND table_name = ? AND scope_key = ? AND commit_seq > ? AND commit_seq <= ?`,
	commitKeys:     `SELECT seq, client_id, client_commit_id FROM sync_commits WHERE partition_id = ? AND seq > ? AND seq <= ?`,
	deleteApplied:  `DELETE FROM sync_idempotency WHERE partition_id = ? AND client_id = ? AND client_commit_id = ? AND status = ? AND commit_seq = ?`,
	deleteRejected: `DELETE FROM sync_idempotency WHERE partition_id = ? AND status = ? AND log_seq <= ?`,
	deleteChanges:  `DELETE FROM sync_changes WHERE partition_id = ? AND commit_seq > ? AND commit_seq <= ?`,
	deleteCommits:  `DELETE FROM sync_commits WHERE partition_id = ? AND seq > ? AND seq <= ?`,
	// Every tombstone at or below the new horizon (SPEC §2.2, §4.6).
	deleteTombstones: `DELETE FROM sync_tombstones WHERE partition_id = ? AND commit_seq <= ?`,
}

// pruneRange deletes the log in (h, upTo] and the tombstones at or below
// upTo, and raises the horizon, inside the writer's open transaction.
func (s *Store) pruneRange(ctx context.Context, partition string, h, upTo int64) (storage.PruneResult, error) {
	var res storage.PruneResult
	c := s.conn
	// Scope index: one range delete per distinct (table, scope key).
	rows, err := c.QueryContext(ctx, pruneSQL.scopeKeys, partition, h, upTo)
	if err != nil {
		return res, fmt.Errorf("read pruned scope keys: %w", err)
	}
	type key struct{ table, k string }
	var keys []key
	for rows.Next() {
		var t, v, val string
		if err := rows.Scan(&t, &v, &val); err != nil {
			rows.Close()
			return res, err
		}
		keys = append(keys, key{t, v + "\x00" + val})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, err
	}
	for _, k := range keys {
		if _, err := c.ExecContext(ctx, pruneSQL.deleteScopes,
			partition, k.table, k.k, h, upTo); err != nil {
			return res, fmt.Errorf("delete scope index: %w", err)
		}
	}
	// Applied idempotency records of the pruned commits.
	rows, err = c.QueryContext(ctx, pruneSQL.commitKeys, partition, h, upTo)
	if err != nil {
		return res, fmt.Errorf("read pruned commits: %w", err)
	}
	type idem struct {
		seq        int64
		client, cc string
	}
	var ids []idem
	for rows.Next() {
		var x idem
		if err := rows.Scan(&x.seq, &x.client, &x.cc); err != nil {
			rows.Close()
			return res, err
		}
		ids = append(ids, x)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, err
	}
	del, err := c.PrepareContext(ctx, pruneSQL.deleteApplied)
	if err != nil {
		return res, err
	}
	defer del.Close()
	for _, x := range ids {
		r, err := del.ExecContext(ctx, partition, x.client, x.cc, int64(ssp2.CommitApplied), x.seq)
		if err != nil {
			return res, fmt.Errorf("delete idempotency record: %w", err)
		}
		n, _ := r.RowsAffected()
		res.IdempotencyRecords += n
	}
	count := func(q string, args ...any) (int64, error) {
		r, err := c.ExecContext(ctx, q, args...)
		if err != nil {
			return 0, err
		}
		return r.RowsAffected()
	}
	n, err := count(pruneSQL.deleteRejected, partition, int64(ssp2.CommitRejected), upTo)
	if err != nil {
		return res, fmt.Errorf("delete rejected idempotency records: %w", err)
	}
	res.IdempotencyRecords += n
	if res.Changes, err = count(pruneSQL.deleteChanges, partition, h, upTo); err != nil {
		return res, fmt.Errorf("delete changes: %w", err)
	}
	if res.Commits, err = count(pruneSQL.deleteCommits, partition, h, upTo); err != nil {
		return res, fmt.Errorf("delete commits: %w", err)
	}
	if res.Tombstones, err = count(pruneSQL.deleteTombstones, partition, upTo); err != nil {
		return res, fmt.Errorf("delete tombstones: %w", err)
	}
	if _, err := c.ExecContext(ctx, `UPDATE sync_partitions SET horizon_seq = ? WHERE partition_id = ?`, upTo, partition); err != nil {
		return res, fmt.Errorf("raise horizon: %w", err)
	}
	return res, nil
}

// snapshotTables lists the tables a partition snapshot copies: the log
// tables (with their partition column), the delete tombstones, the blob
// reference index (so it matches the restored rows) and every synced row
// table (with its column versions).
func (s *Store) snapshotTables() []string {
	out := []string{"sync_partitions", "sync_commits", "sync_changes", "sync_change_scopes", "sync_idempotency", "sync_tombstones", "sync_blob_refs"}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, t := range s.sch.Tables {
		out = append(out, t.Name)
	}
	return out
}

// snapName is the temporary table holding table's snapshot rows.
func snapName(table string) string { return "temp." + quote("sync_snapshot__"+table) }

// CapturePartition copies the partition's rows of every log and row table
// into temporary tables of the writer connection, in one write
// transaction under the write lock (replacing an earlier capture of it).
func (s *Store) CapturePartition(ctx context.Context, partition string) error {
	if _, _, _, err := s.current(); err != nil {
		return fmt.Errorf("sqlite: capture: %w", err)
	}
	tables := s.snapshotTables()
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("sqlite: capture %q: %w", partition, err)
	}
	defer s.unlock()
	err := s.inWriteTx(ctx, "capture "+partition, func(ctx context.Context) error {
		for _, t := range tables {
			for _, q := range []string{
				`CREATE TEMP TABLE IF NOT EXISTS ` + quote("sync_snapshot__"+t) + ` AS SELECT * FROM main.` + quote(t) + ` WHERE 0`,
				`DELETE FROM ` + snapName(t) + ` WHERE partition_id = ?1`,
				`INSERT INTO ` + snapName(t) + ` SELECT * FROM main.` + quote(t) + ` WHERE partition_id = ?1`,
			} {
				if _, err := s.conn.ExecContext(ctx, q, partition); err != nil {
					return fmt.Errorf("%s: %w", t, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.snapMu.Lock()
	if s.snaps == nil {
		s.snaps = map[string]bool{}
	}
	s.snaps[partition] = true
	s.snapMu.Unlock()
	return nil
}

// RestorePartition replaces the partition's rows of every log and row
// table with its capture and rotates its epoch, in one write transaction
// under the write lock. Restored commits are written with this store's
// running schema version as their writer version (they were accepted
// once; the writer fence must not refuse them again).
func (s *Store) RestorePartition(ctx context.Context, partition string, nowMs int64) (string, error) {
	sch, _, _, err := s.current()
	if err != nil {
		return "", fmt.Errorf("sqlite: restore: %w", err)
	}
	s.snapMu.Lock()
	captured := s.snaps[partition]
	s.snapMu.Unlock()
	if !captured {
		return "", fmt.Errorf("sqlite: restore %q: %w", partition, storage.ErrNoSnapshot)
	}
	tables := s.snapshotTables()
	ep := storage.NewLogEpoch()
	if err := s.lock(ctx); err != nil {
		return "", fmt.Errorf("sqlite: restore %q: %w", partition, err)
	}
	defer s.unlock()
	err = s.inWriteTx(ctx, "restore "+partition, func(ctx context.Context) error {
		for _, t := range tables {
			ins := `INSERT INTO main.` + quote(t) + ` SELECT * FROM ` + snapName(t) + ` WHERE partition_id = ?1`
			if t == "sync_commits" {
				ins = `INSERT INTO main.sync_commits(partition_id, seq, created_at_ms, actor_id, client_id, client_commit_id, writer_version)
					SELECT partition_id, seq, created_at_ms, actor_id, client_id, client_commit_id, ?2 FROM ` + snapName(t) + ` WHERE partition_id = ?1`
			}
			for _, q := range []string{`DELETE FROM main.` + quote(t) + ` WHERE partition_id = ?1`, ins} {
				if _, err := s.conn.ExecContext(ctx, q, partition, sch.Version); err != nil {
					return fmt.Errorf("%s: %w", t, err)
				}
			}
		}
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

// Backup writes a consistent copy of the whole database to path with
// VACUUM INTO, on a connection of its own: it reads one snapshot (a read
// transaction), so pushes go on meanwhile. path must not exist; the copy
// is a complete database file (no -wal) that synclane restore installs.
func (s *Store) Backup(ctx context.Context, path string) error {
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("sqlite: backup to %s: the file exists", path)
	} else if !os.IsNotExist(err) {
		return fmt.Errorf("sqlite: backup to %s: %w", path, err)
	}
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: s.path}).EscapedPath()+"?_busy_timeout=10000")
	if err != nil {
		return fmt.Errorf("sqlite: backup: %w", err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, path); err != nil {
		return fmt.Errorf("sqlite: backup to %s: %w", path, err)
	}
	return nil
}
