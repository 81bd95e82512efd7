package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/storage"
)

// Backfill checkpoints and the writer fence (RFC 0007).
//
// sync_backfill_checkpoints holds one row per (partition_id, name);
// sync_writer_fence the partition's required writer version. Every commit
// append writes the store's running schema version into
// sync_commits.writer_version, and the BEFORE INSERT trigger
// sync_commits_writer_fence aborts (RAISE(ABORT), extended result code
// SQLITE_CONSTRAINT_TRIGGER) an append whose writer_version is NULL or
// below the partition's fence. The error is classified from that code,
// never from its text, as storage.ErrWriterFenced. Writers that predate
// the column (NULL) are rejected once a fence exists, without their
// cooperation.

const checkpointDDL = `CREATE TABLE IF NOT EXISTS sync_backfill_checkpoints (
	partition_id TEXT NOT NULL,
	name TEXT NOT NULL,
	schema_version INTEGER NOT NULL,
	state TEXT NOT NULL CHECK (state IN ('declared', 'backfilling', 'activated')),
	watermark INTEGER NOT NULL DEFAULT 0,
	owner_epoch INTEGER NOT NULL DEFAULT 0,
	observed_rows INTEGER NOT NULL DEFAULT 0,
	updated_at_ms INTEGER NOT NULL,
	PRIMARY KEY (partition_id, name)
) WITHOUT ROWID`

const fenceDDL = `CREATE TABLE IF NOT EXISTS sync_writer_fence (
	partition_id TEXT PRIMARY KEY,
	required_writer_version INTEGER NOT NULL
) WITHOUT ROWID`

const fenceTriggerDDL = `CREATE TRIGGER IF NOT EXISTS sync_commits_writer_fence
BEFORE INSERT ON sync_commits
WHEN EXISTS (SELECT 1 FROM sync_writer_fence f WHERE f.partition_id = NEW.partition_id
	AND (NEW.writer_version IS NULL OR NEW.writer_version < f.required_writer_version))
BEGIN
	SELECT RAISE(ABORT, 'sync.storage.writer_fence_rejected');
END`

// installFence adds sync_commits.writer_version to a database created
// before it existed and creates the fence trigger; inside the open
// transaction on the writer connection.
func (s *Store) installFence(ctx context.Context) error {
	var n int
	if err := s.conn.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('sync_commits') WHERE name = 'writer_version'`).Scan(&n); err != nil {
		return fmt.Errorf("read sync_commits columns: %w", err)
	}
	if n == 0 {
		if _, err := s.conn.ExecContext(ctx, `ALTER TABLE sync_commits ADD COLUMN writer_version INTEGER`); err != nil {
			return fmt.Errorf("add sync_commits.writer_version: %w", err)
		}
	}
	if _, err := s.conn.ExecContext(ctx, fenceTriggerDDL); err != nil {
		return fmt.Errorf("create writer fence trigger: %w", err)
	}
	return nil
}

const cpCols = `partition_id, name, schema_version, state, watermark, owner_epoch, observed_rows, updated_at_ms`

func scanCheckpoint(r rowScanner) (storage.Checkpoint, error) {
	var c storage.Checkpoint
	var state string
	err := r.Scan(&c.Partition, &c.Name, &c.SchemaVersion, &state, &c.Watermark, &c.OwnerEpoch, &c.ObservedRows, &c.UpdatedAtMs)
	c.State = storage.CheckpointState(state)
	return c, err
}

// declareIn inserts the checkpoint if absent and raises the fence, inside
// the caller's write transaction.
func declareIn(ctx context.Context, q execer, d storage.CheckpointDeclaration, nowMs int64) error {
	if _, err := q.ExecContext(ctx, `INSERT INTO sync_backfill_checkpoints(partition_id, name, schema_version, state, updated_at_ms)
		VALUES(?, ?, ?, 'declared', ?) ON CONFLICT(partition_id, name) DO NOTHING`, d.Partition, d.Name, d.SchemaVersion, nowMs); err != nil {
		return err
	}
	_, err := q.ExecContext(ctx, `INSERT INTO sync_writer_fence(partition_id, required_writer_version) VALUES(?, ?)
		ON CONFLICT(partition_id) DO UPDATE SET required_writer_version = max(required_writer_version, excluded.required_writer_version)`,
		d.Partition, d.SchemaVersion)
	return err
}

// DeclareCheckpoint inserts the checkpoint (if absent) and raises the
// fence in one write transaction, then returns the stored row.
func (s *Store) DeclareCheckpoint(ctx context.Context, d storage.CheckpointDeclaration, nowMs int64) (storage.Checkpoint, error) {
	if _, _, _, err := s.current(); err != nil {
		return storage.Checkpoint{}, fmt.Errorf("sqlite: declare checkpoint: %w", err)
	}
	if err := d.Validate(); err != nil {
		return storage.Checkpoint{}, fmt.Errorf("sqlite: declare checkpoint: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return storage.Checkpoint{}, fmt.Errorf("sqlite: declare checkpoint: %w", err)
	}
	defer s.unlock()
	var c storage.Checkpoint
	err := s.inWriteTx(ctx, "declare checkpoint "+d.Partition+"/"+d.Name, func(ctx context.Context) error {
		if err := declareIn(ctx, s.conn, d, nowMs); err != nil {
			return err
		}
		var err error
		c, err = scanCheckpoint(s.conn.QueryRowContext(ctx, `SELECT `+cpCols+` FROM sync_backfill_checkpoints WHERE partition_id = ? AND name = ?`, d.Partition, d.Name))
		if isNoRows(err) {
			return storage.ErrCheckpointNotDeclared
		}
		return err
	})
	return c, err
}

// ClaimCheckpoint is one UPDATE … RETURNING under the write lock.
func (s *Store) ClaimCheckpoint(ctx context.Context, d storage.CheckpointDeclaration, nowMs int64) (storage.Checkpoint, error) {
	if _, _, _, err := s.current(); err != nil {
		return storage.Checkpoint{}, fmt.Errorf("sqlite: claim checkpoint: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return storage.Checkpoint{}, fmt.Errorf("sqlite: claim checkpoint: %w", err)
	}
	defer s.unlock()
	var c storage.Checkpoint
	err := s.inWriteTx(ctx, "claim checkpoint "+d.Partition+"/"+d.Name, func(ctx context.Context) error {
		var err error
		c, err = scanCheckpoint(s.conn.QueryRowContext(ctx, `UPDATE sync_backfill_checkpoints
			SET owner_epoch = owner_epoch + 1,
				state = CASE WHEN state = 'declared' THEN 'backfilling' ELSE state END,
				schema_version = ?, updated_at_ms = ?
			WHERE partition_id = ? AND name = ? AND state <> 'activated'
			RETURNING `+cpCols, d.SchemaVersion, nowMs, d.Partition, d.Name))
		if isNoRows(err) {
			return storage.ErrCheckpointNotDeclared
		}
		return err
	})
	return c, err
}

// ActivateCheckpoint decides under the process write lock and BEGIN
// IMMEDIATE (the lock every push holds), so no commit lands between the
// coverage check and the update.
func (s *Store) ActivateCheckpoint(ctx context.Context, partition, name string, epoch, watermark int64, sources []string, nowMs int64) (storage.ActivationOutcome, error) {
	if _, _, _, err := s.current(); err != nil {
		return "", fmt.Errorf("sqlite: activate checkpoint: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return "", fmt.Errorf("sqlite: activate checkpoint: %w", err)
	}
	defer s.unlock()
	var out storage.ActivationOutcome
	err := s.inWriteTx(ctx, "activate checkpoint "+partition+"/"+name, func(ctx context.Context) error {
		var err error
		out, err = activateIn(ctx, s.conn, partition, name, epoch, watermark, sources, nowMs)
		return err
	})
	return out, err
}

func activateIn(ctx context.Context, q execer, partition, name string, epoch, watermark int64, sources []string, nowMs int64) (storage.ActivationOutcome, error) {
	var ver int32
	var fence sql.NullInt32
	err := q.QueryRowContext(ctx, `SELECT c.schema_version, f.required_writer_version FROM sync_backfill_checkpoints c
		LEFT JOIN sync_writer_fence f ON f.partition_id = c.partition_id
		WHERE c.partition_id = ? AND c.name = ?`, partition, name).Scan(&ver, &fence)
	if isNoRows(err) || (err == nil && (!fence.Valid || fence.Int32 < ver)) {
		return "", storage.ErrCheckpointFenceMissing
	}
	if err != nil {
		return "", err
	}
	if len(sources) > 0 {
		var horizon int64
		if err := q.QueryRowContext(ctx, `SELECT horizon_seq FROM sync_partitions WHERE partition_id = ?`, partition).Scan(&horizon); err != nil && !isNoRows(err) {
			return "", fmt.Errorf("read horizon: %w", err)
		}
		changed, err := changesAbove(ctx, q, partition, sources, watermark)
		if err != nil {
			return "", err
		}
		if changed {
			return storage.Stale, nil
		}
		if horizon > watermark {
			return storage.Unverifiable, nil
		}
	}
	res, err := q.ExecContext(ctx, `UPDATE sync_backfill_checkpoints SET state = 'activated', watermark = ?, updated_at_ms = ?
		WHERE partition_id = ? AND name = ? AND owner_epoch = ? AND state <> 'activated'`, watermark, nowMs, partition, name, epoch)
	if err != nil {
		return "", err
	}
	if n, err := res.RowsAffected(); err != nil {
		return "", err
	} else if n == 1 {
		return storage.Activated, nil
	}
	return storage.Stale, nil
}

// changesAbove reports whether the partition has a change of a table in
// sources with commit_seq > seq (a range scan of the changes' primary key).
func changesAbove(ctx context.Context, q execer, partition string, sources []string, seq int64) (bool, error) {
	args := []any{partition, seq}
	for _, t := range sources {
		args = append(args, t)
	}
	var found int
	err := q.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM sync_changes WHERE partition_id = ? AND commit_seq > ?
		AND table_name IN (?`+strings.Repeat(", ?", len(sources)-1)+`))`, args...).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("check source changes: %w", err)
	}
	return found != 0, nil
}

// ReadCheckpoints reads every checkpoint from a read connection.
func (s *Store) ReadCheckpoints(ctx context.Context) ([]storage.Checkpoint, error) {
	if _, _, _, err := s.current(); err != nil {
		return nil, fmt.Errorf("sqlite: read checkpoints: %w", err)
	}
	rows, err := s.readQuery(ctx, `SELECT `+cpCols+` FROM sync_backfill_checkpoints ORDER BY partition_id, name`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: read checkpoints: %w", err)
	}
	defer rows.Close()
	var out []storage.Checkpoint
	for rows.Next() {
		c, err := scanCheckpoint(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: read checkpoints: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: read checkpoints: %w", err)
	}
	return out, nil
}

// gateSQL reads the whole serve gate in one statement (one WAL snapshot):
// the schema marker, the partition's epoch and the pending checkpoints at
// the running version as a JSON array of [partition, name], ordered, the
// partition's horizon, and the file's checkpoint generation (dir_gate.go).
const gateSQL = `SELECT
	(SELECT value FROM sync_meta WHERE key = 'schema_version'),
	(SELECT log_epoch FROM sync_partitions WHERE partition_id = ?1),
	(SELECT horizon_seq FROM sync_partitions WHERE partition_id = ?1),
	(SELECT json_group_array(json_array(partition_id, name)) FROM
		(SELECT partition_id, name FROM sync_backfill_checkpoints
		 WHERE schema_version = ?2 AND state <> 'activated' ORDER BY partition_id, name)),
	(SELECT value FROM sync_meta WHERE key = 'checkpoint_gen')`

// ReadServeGate reads marker, epoch and pending checkpoints in one
// statement on a read connection (prepared once per connection).
func (s *Store) ReadServeGate(ctx context.Context, partition string, running int32) (storage.ServeGate, error) {
	g, _, err := s.readServeGate(ctx, partition, running)
	return g, err
}

// readServeGate is ReadServeGate with the file's checkpoint generation
// read in the same statement.
func (s *Store) readServeGate(ctx context.Context, partition string, running int32) (storage.ServeGate, string, error) {
	if _, _, _, err := s.current(); err != nil {
		return storage.ServeGate{}, "", fmt.Errorf("sqlite: read serve gate: %w", err)
	}
	s.gateOnce.Do(func() { s.gateStmt, s.gateErr = s.rdb.PrepareContext(context.Background(), gateSQL) })
	if s.gateErr != nil {
		return storage.ServeGate{}, "", fmt.Errorf("sqlite: read serve gate: %w", s.gateErr)
	}
	g, gen, err := scanGate(s.gateStmt.QueryRowContext(ctx, partition, running))
	if err != nil {
		return g, "", fmt.Errorf("sqlite: read serve gate: %w", err)
	}
	return g, gen, nil
}

// scanGate reads a gateSQL row: the gate and the checkpoint generation.
func scanGate(row *sql.Row) (storage.ServeGate, string, error) {
	var g storage.ServeGate
	var marker, epoch, pending, gen sql.NullString
	var horizon sql.NullInt64
	if err := row.Scan(&marker, &epoch, &horizon, &pending, &gen); err != nil {
		return g, "", err
	}
	g.HorizonSeq = horizon.Int64
	if marker.Valid {
		v, err := parseMarker(marker.String)
		if err != nil {
			return g, "", err
		}
		g.StoredSchemaVersion = v
	}
	g.LogEpoch = epoch.String
	if pending.Valid && pending.String != "[]" {
		var pairs [][2]string
		if err := json.Unmarshal([]byte(pending.String), &pairs); err != nil {
			return g, "", fmt.Errorf("pending checkpoints: %w", err)
		}
		for _, p := range pairs {
			g.Pending = append(g.Pending, storage.CheckpointRef{Partition: p[0], Name: p[1]})
		}
	}
	return g, gen.String, nil
}

// parseMarker reads the stored schema version of sync_meta.
func parseMarker(m string) (int32, error) {
	v, err := strconv.ParseInt(m, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("stored schema version %q: %w", m, err)
	}
	return int32(v), nil
}

// PruneThrough deletes commits, changes, scope index entries and
// tombstones with seq <= min(seq, max commit seq) and raises the horizon,
// under the write lock.
func (s *Store) PruneThrough(ctx context.Context, partition string, seq int64) error {
	if _, _, _, err := s.current(); err != nil {
		return fmt.Errorf("sqlite: prune: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("sqlite: prune %q: %w", partition, err)
	}
	defer s.unlock()
	return s.inWriteTx(ctx, "prune "+partition, func(ctx context.Context) error {
		var maxSeq, horizon int64
		err := s.conn.QueryRowContext(ctx, `SELECT max_commit_seq, horizon_seq FROM sync_partitions WHERE partition_id = ?`, partition).Scan(&maxSeq, &horizon)
		if isNoRows(err) {
			return nil
		}
		if err != nil {
			return err
		}
		seq = min(seq, maxSeq)
		if seq <= horizon {
			return nil
		}
		for _, q := range []string{
			`DELETE FROM sync_change_scopes WHERE partition_id = ? AND commit_seq <= ?`,
			`DELETE FROM sync_changes WHERE partition_id = ? AND commit_seq <= ?`,
			`DELETE FROM sync_commits WHERE partition_id = ? AND seq <= ?`,
			`DELETE FROM sync_tombstones WHERE partition_id = ? AND commit_seq <= ?`,
			`UPDATE sync_partitions SET horizon_seq = ?2 WHERE partition_id = ?1`,
		} {
			if _, err := s.conn.ExecContext(ctx, q, partition, seq); err != nil {
				return err
			}
		}
		return nil
	})
}

// AdvanceCheckpoint compares-and-sets on owner_epoch inside the push
// transaction.
func (tx *pushTx) AdvanceCheckpoint(ctx context.Context, name string, epoch, watermark, observedRows int64) (bool, error) {
	ctx, err := tx.check(ctx, "advance checkpoint")
	if err != nil {
		return false, err
	}
	if err := tx.write(ctx); err != nil {
		return false, err
	}
	res, err := tx.s.conn.ExecContext(ctx, `UPDATE sync_backfill_checkpoints SET watermark = ?, observed_rows = ?, updated_at_ms = ?
		WHERE partition_id = ? AND name = ? AND owner_epoch = ?`, watermark, observedRows, time.Now().UnixMilli(), tx.info.Partition, name, epoch)
	if err != nil {
		return false, fmt.Errorf("sqlite: advance checkpoint %s: %w", name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("sqlite: advance checkpoint %s: %w", name, err)
	}
	return n == 1, nil
}

// groupGate is the part of the serve gate that no member of a commit
// group can change: the stored schema version and the pending checkpoints
// at a running version. Both change only in transactions of their own
// (EnsureSchema, DeclareCheckpoint, ClaimCheckpoint, ActivateCheckpoint
// take the lock, which finishes an open group first; AdvanceCheckpoint in
// a push transaction moves a watermark, not a state), and the group's
// BEGIN IMMEDIATE keeps other processes from writing until its COMMIT.
type groupGate struct {
	running int32
	stored  int32
	pending []storage.CheckpointRef
	// gen is the file's checkpoint generation in the same read.
	gen string
}

// ReadServeGate reads the gate on the transaction's connection. The first
// member of a commit group to read it runs gateSQL and keeps the shared
// part in the group (groupGate); later members read it from there, with
// the partition's epoch and horizon as BeginPush read them in the same
// transaction, so a push transaction of another partition costs no gate
// statement.
func (tx *pushTx) ReadServeGate(ctx context.Context, running int32) (storage.ServeGate, error) {
	ctx, err := tx.check(ctx, "read serve gate")
	if err != nil {
		return storage.ServeGate{}, err
	}
	grp := tx.s.group
	tx.grp = grp
	if c := grp.gate; c != nil && c.running == running {
		grp.wantAfter(tx.info.Partition)
		tx.gen = c.gen
		return storage.ServeGate{StoredSchemaVersion: c.stored, LogEpoch: tx.info.LogEpoch, HorizonSeq: tx.info.HorizonSeq,
			Pending: slices.Clone(c.pending)}, nil
	}
	if tx.s.txGateStmt == nil { // prepared once on the writer connection (we hold the lock)
		if tx.s.txGateStmt, err = tx.s.conn.PrepareContext(ctx, gateSQL); err != nil {
			return storage.ServeGate{}, fmt.Errorf("sqlite: read serve gate: %w", err)
		}
	}
	g, gen, err := scanGate(tx.s.txGateStmt.QueryRowContext(ctx, tx.info.Partition, running))
	if err != nil {
		return g, fmt.Errorf("sqlite: read serve gate: %w", err)
	}
	tx.gen = gen
	if grp.gate == nil {
		grp.gate = &groupGate{running: running, stored: g.StoredSchemaVersion, pending: slices.Clone(g.Pending), gen: gen}
		grp.wantAfter(tx.info.Partition)
	}
	return g, nil
}

// wantAfter asks for partition's gate to be read again after the group's
// COMMIT (readAfterCommit), at the running version of the group's gate.
func (g *commitGroup) wantAfter(partition string) {
	if g.after == nil {
		g.after = map[string]*storage.ServeGate{}
	}
	g.after[partition] = nil
}

// gateAfterSQL is gateSQL for many partitions in one statement (one
// snapshot): kind 0 is the schema marker, kind 1 the pending checkpoints
// at the running version ?2 in gateSQL's order, kind 2 the epoch and
// horizon of each partition named in the JSON array ?1.
const gateAfterSQL = `SELECT 0, NULL, value, NULL FROM sync_meta WHERE key = 'schema_version'
UNION ALL SELECT 1, partition_id, name, NULL FROM sync_backfill_checkpoints WHERE schema_version = ?2 AND state <> 'activated'
UNION ALL SELECT 2, partition_id, log_epoch, horizon_seq FROM sync_partitions WHERE partition_id IN (SELECT value FROM json_each(?1))
UNION ALL SELECT 3, NULL, value, NULL FROM sync_meta WHERE key = 'checkpoint_gen'
ORDER BY 1, 2, 3`

// readAfterCommit reads the serve gate of every member partition that
// read it in the group, right after the group's COMMIT and before any
// member is woken, in one statement on the writer connection (outside any
// transaction: the newest committed state, other processes' included).
// A member verifies its push-only replies against it (pushTx.CommittedGate)
// instead of reading the gate again on its own. A failed read leaves the
// members to read it themselves. The caller holds the lock.
func (s *Store) readAfterCommit(g *commitGroup) {
	if g.gate == nil || len(g.after) == 0 {
		return
	}
	if err := s.scanAfterCommit(g); err != nil {
		clear(g.after)
		s.log.Debug("sqlite: gate read after commit failed; members read it again", zap.Error(err))
	}
}

func (s *Store) scanAfterCommit(g *commitGroup) error {
	ctx := context.Background()
	names := make([]string, 0, len(g.after))
	for p := range g.after {
		names = append(names, p)
	}
	ids, err := json.Marshal(names)
	if err != nil {
		return err
	}
	st, err := s.writerStmt(ctx, gateAfterSQL)
	if err != nil {
		return err
	}
	rows, err := st.QueryContext(ctx, string(ids), g.gate.running)
	if err != nil {
		return err
	}
	defer rows.Close()
	var shared storage.ServeGate
	for rows.Next() {
		var kind int
		var a, b sql.NullString
		var horizon sql.NullInt64
		if err := rows.Scan(&kind, &a, &b, &horizon); err != nil {
			return err
		}
		switch kind {
		case 0:
			if shared.StoredSchemaVersion, err = parseMarker(b.String); err != nil {
				return err
			}
		case 1:
			shared.Pending = append(shared.Pending, storage.CheckpointRef{Partition: a.String, Name: b.String})
		case 3:
			g.afterGen = b.String
		default:
			g.after[a.String] = &storage.ServeGate{LogEpoch: b.String, HorizonSeq: horizon.Int64}
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for p, pg := range g.after {
		if pg == nil { // no row: the partition is gone, as gateSQL would read it
			pg = &storage.ServeGate{}
			g.after[p] = pg
		}
		pg.StoredSchemaVersion, pg.Pending = shared.StoredSchemaVersion, shared.Pending
	}
	return nil
}

// CommittedGate answers storage.PushTx.
func (tx *pushTx) CommittedGate() (storage.ServeGate, bool) {
	if tx.grp == nil || !tx.done {
		return storage.ServeGate{}, false
	}
	select {
	case <-tx.grp.done:
	default:
		return storage.ServeGate{}, false
	}
	g := tx.grp.after[tx.info.Partition]
	if g == nil {
		return storage.ServeGate{}, false
	}
	out := *g
	out.Pending = slices.Clone(g.Pending)
	return out, true
}
