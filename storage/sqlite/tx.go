package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
)

// pushTx is a BEGIN IMMEDIATE transaction on the writer connection,
// holding the process-wide write lock.
type pushTx struct {
	s      *Store
	sys    *sysStmts
	tables map[string]*tableStmts
	info   storage.PartitionInfo
	// running is the store's running schema version at BeginPush, written
	// as every appended commit's writer_version.
	running int32
	// startMax is MaxCommitSeq when the transaction began; Commit writes
	// info.MaxCommitSeq back when it moved.
	startMax int64
	// ptx reports that the member savepoint "ptx" was set (openMember).
	ptx bool
	// log holds the log records, written for the commit group at its end
	// (log.go flushGroup).
	log pendingLog
	// The savepoint is set lazily: Savepoint records spMax (the
	// MaxCommitSeq to restore) and spMark (the pending log's length) and
	// sets spWanted; the next statement that writes (write) sends
	// SAVEPOINT first and sets spReal. A commit that writes no row (a
	// replay, a rejection before any write) sends no savepoint statement
	// at all.
	spActive, spWanted, spReal bool
	spMax                      int64
	spMark                     logMark
	done                       bool
	// args is a scratch buffer reused across statements.
	args []any
	// grp is the commit group of the transaction's gate read
	// (checkpoint.go).
	grp *commitGroup
	// gen is the file's checkpoint generation of the transaction's gate
	// read (dir_gate.go).
	gen string
}

// BeginPush takes the process-wide write lock (waiting until it is free or
// ctx ends), begins an IMMEDIATE transaction and reads (creating if
// needed) the partition under it. A creation is undone by Rollback. A
// name storage.CheckPartition refuses is refused.
func (s *Store) BeginPush(ctx context.Context, partition string) (storage.PushTx, error) {
	if err := storage.CheckPartition(partition); err != nil {
		return nil, fmt.Errorf("sqlite: begin push: %w", err)
	}
	sch, tables, sys, err := s.current()
	if err != nil {
		return nil, fmt.Errorf("sqlite: begin push on %q: %w", partition, err)
	}
	s.pushWaiters.Add(1)
	err = s.acquire(ctx)
	s.pushWaiters.Add(-1)
	if err != nil {
		return nil, fmt.Errorf("sqlite: begin push on %q: %w", partition, err)
	}
	if g := s.group; g != nil {
		if g.has(partition) {
			// The partition's writes from its earlier push transaction in
			// the group are still deferred (log.go): commit them first, so
			// this one reads them.
			s.finishGroup()
		}
	}
	ptx, err := s.openMember(ctx, true)
	if err != nil {
		s.unlock()
		return nil, fmt.Errorf("sqlite: begin push on %q: %w", partition, err)
	}
	info, err := s.ensurePartition(context.WithoutCancel(ctx), sys, partition, 0)
	if err != nil {
		s.dropMember(ptx)
		return nil, fmt.Errorf("sqlite: begin push on %q: %w", partition, err)
	}
	return &pushTx{s: s, sys: sys, tables: tables, info: info, running: sch.Version, startMax: info.MaxCommitSeq, ptx: ptx}, nil
}

// check fails once the transaction finished or ctx ended. Statements then
// run without ctx's cancellation: interrupting a write inside an explicit
// SQLite transaction rolls the whole transaction back behind our back, so
// cancellation is honoured only between statements.
func (tx *pushTx) check(ctx context.Context, op string) (context.Context, error) {
	if tx.done {
		return ctx, fmt.Errorf("sqlite: %s: %w", op, storage.ErrTxDone)
	}
	if err := ctx.Err(); err != nil {
		return ctx, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	return context.WithoutCancel(ctx), nil
}

func (tx *pushTx) table(t *schema.Table) (*tableStmts, error) {
	ts := tx.tables[t.Name]
	if ts == nil {
		return nil, fmt.Errorf("sqlite: table %q is not in the ensured schema", t.Name)
	}
	return ts, nil
}

// Partition returns the entry read under the lock, MaxCommitSeq following
// this transaction's appends.
func (tx *pushTx) Partition() storage.PartitionInfo { return tx.info }

// LookupIdempotency sees this transaction's own PutIdempotency calls
// (still pending, log.go) before the stored records.
func (tx *pushTx) LookupIdempotency(ctx context.Context, clientID, clientCommitID string) (*storage.IdempotencyRecord, error) {
	ctx, err := tx.check(ctx, "lookup idempotency")
	if err != nil {
		return nil, err
	}
	if rec := tx.log.idempotency(clientID, clientCommitID); rec != nil {
		return rec, nil
	}
	rec, err := scanIdem(tx.sys.lookupIdem.QueryRowContext(ctx, tx.info.Partition, clientID, clientCommitID), clientID, clientCommitID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: lookup idempotency: %w", err)
	}
	return rec, nil
}

// GetRow reads the row as this transaction sees it; a rowID that names
// no key (storage.KeyValue) is absent, without a read.
func (tx *pushTx) GetRow(ctx context.Context, t *schema.Table, rowID string) (*storage.RowRecord, error) {
	ctx, err := tx.check(ctx, "get row")
	if err != nil {
		return nil, err
	}
	ts, err := tx.table(t)
	if err != nil {
		return nil, err
	}
	key, ok := keyArg(ts.t, rowID)
	if !ok {
		return nil, nil // names no row that can exist
	}
	rows, err := ts.get.QueryContext(ctx, tx.info.Partition, key)
	rec, err := oneRow(rows, err, newTxRowBuf(ts.t))
	if err != nil {
		return nil, fmt.Errorf("sqlite: get row %s/%q: %w", t.Name, rowID, err)
	}
	return rec, nil
}

// oneRow reads the first row from the result of a query (rows, err) with
// sc, closing rows; nil when the query found none.
func oneRow(rows *sql.Rows, err error, sc *rowBuf) (*storage.RowRecord, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if !rows.Next() {
		return nil, rows.Err()
	}
	rec, err := sc.scan(rows)
	if err != nil {
		return nil, err
	}
	return &rec, nil
}

// Savepoint releases the previous savepoint, if any, and sets a new one,
// lazily: the SAVEPOINT statement goes out before the next write.
func (tx *pushTx) Savepoint(ctx context.Context) error {
	ctx, err := tx.check(ctx, "savepoint")
	if err != nil {
		return err
	}
	if tx.spActive {
		if err := tx.ReleaseSavepoint(ctx); err != nil {
			return err
		}
	}
	tx.spActive, tx.spWanted, tx.spMax, tx.spMark = true, true, tx.info.MaxCommitSeq, tx.log.mark()
	return nil
}

// write sends the SAVEPOINT a Savepoint call deferred; every statement
// that writes in the transaction calls it first.
func (tx *pushTx) write(ctx context.Context) error {
	if !tx.spWanted {
		return nil
	}
	if _, err := tx.sys.savepoint.ExecContext(ctx); err != nil {
		return fmt.Errorf("sqlite: savepoint: %w", err)
	}
	tx.spWanted, tx.spReal = false, true
	return nil
}

// RollbackToSavepoint undoes the writes since Savepoint and drops the log
// records added since; the savepoint stays set.
func (tx *pushTx) RollbackToSavepoint(ctx context.Context) error {
	ctx, err := tx.check(ctx, "rollback to savepoint")
	if err != nil {
		return err
	}
	if !tx.spActive {
		return fmt.Errorf("sqlite: rollback to savepoint: no savepoint")
	}
	if tx.spReal {
		if _, err := tx.sys.rollbackTo.ExecContext(ctx); err != nil {
			return fmt.Errorf("sqlite: rollback to savepoint: %w", err)
		}
	}
	tx.log.reset(tx.spMark)
	tx.info.MaxCommitSeq = tx.spMax
	return nil
}

// ReleaseSavepoint keeps the writes since Savepoint.
func (tx *pushTx) ReleaseSavepoint(ctx context.Context) error {
	ctx, err := tx.check(ctx, "release savepoint")
	if err != nil {
		return err
	}
	if !tx.spActive {
		return fmt.Errorf("sqlite: release savepoint: no savepoint")
	}
	if tx.spReal {
		if _, err := tx.sys.release.ExecContext(ctx); err != nil {
			return fmt.Errorf("sqlite: release savepoint: %w", err)
		}
	}
	tx.spActive, tx.spWanted, tx.spReal = false, false, false
	return nil
}

// PutRow upserts the row with its column versions (NULL for nil); a
// violated UNIQUE or NOT NULL constraint wraps storage.ErrConstraint, and a
// row storage.CheckRow refuses is not written (storage.ErrUnstorable).
func (tx *pushTx) PutRow(ctx context.Context, t *schema.Table, rec storage.RowRecord) error {
	ctx, err := tx.check(ctx, "put row")
	if err != nil {
		return err
	}
	ts, err := tx.table(t)
	if err != nil {
		return err
	}
	cols := ts.t.Columns
	if len(rec.Values) != len(cols) {
		return fmt.Errorf("sqlite: put row %s/%q: %d values for %d columns", t.Name, rec.RowID, len(rec.Values), len(cols))
	}
	if id, ok := ts.t.RowID(rec.Values); !ok || id != rec.RowID {
		return fmt.Errorf("sqlite: put row %s/%q: primary key value %v does not render as the row id", t.Name, rec.RowID, rec.Values[ts.t.PK])
	}
	if err := storage.CheckRow(tx.info.Partition, ts.t, rec); err != nil {
		return fmt.Errorf("sqlite: put row %s: %w", t.Name, err)
	}
	if err := tx.write(ctx); err != nil {
		return err
	}
	args := append(tx.args[:0], tx.info.Partition)
	for i, c := range cols {
		v, err := bindValue(c, rec.Values[i])
		if err != nil {
			return fmt.Errorf("sqlite: put row %s/%q: %w", t.Name, rec.RowID, err)
		}
		args = append(args, v)
	}
	args = append(args, rec.Version, bindColumnVersions(rec.ColumnVersions))
	tx.args = args
	_, err = ts.upsert.ExecContext(ctx, args...)
	clear(tx.args)
	if err != nil {
		return classify(err, fmt.Sprintf("put row %s/%q", t.Name, rec.RowID))
	}
	return nil
}

// DeleteRow deletes the row if it exists and records (or replaces) its
// tombstone in sync_tombstones, both in the transaction (a savepoint
// covers them). A rowID storage.CheckTombstoneOf refuses gets none (one
// that names no key, storage.KeyValue, is not even sent).
func (tx *pushTx) DeleteRow(ctx context.Context, t *schema.Table, rowID string, tombstoneSeq int64) error {
	ctx, err := tx.check(ctx, "delete row")
	if err != nil {
		return err
	}
	ts, err := tx.table(t)
	if err != nil {
		return err
	}
	if tombstoneSeq < 1 {
		return fmt.Errorf("sqlite: delete row %s/%q: tombstone seq %d must be >= 1", t.Name, rowID, tombstoneSeq)
	}
	key, ok := keyArg(ts.t, rowID)
	if !ok {
		return nil // names no row that can exist: nothing to delete, no tombstone
	}
	if err := tx.write(ctx); err != nil {
		return err
	}
	if _, err := ts.drop.ExecContext(ctx, tx.info.Partition, key); err != nil {
		return classify(err, fmt.Sprintf("delete row %s/%q", t.Name, rowID))
	}
	if storage.CheckTombstoneOf(tx.info.Partition, ts.t, rowID) != nil {
		return nil
	}
	if _, err := tx.sys.putTomb.ExecContext(ctx, tx.info.Partition, ts.t.Name, rowID, tombstoneSeq); err != nil {
		return fmt.Errorf("sqlite: record tombstone %s/%q: %w", t.Name, rowID, err)
	}
	return nil
}

// Tombstone reads the row's tombstone on the writer connection inside
// the transaction (its own DeleteRow and ClearTombstone calls included).
func (tx *pushTx) Tombstone(ctx context.Context, t *schema.Table, rowID string) (int64, error) {
	ctx, err := tx.check(ctx, "tombstone")
	if err != nil {
		return 0, err
	}
	ts, err := tx.table(t)
	if err != nil {
		return 0, err
	}
	if storage.CheckTombstoneOf(tx.info.Partition, ts.t, rowID) != nil {
		return 0, nil
	}
	var seq int64
	err = tx.sys.getTomb.QueryRowContext(ctx, tx.info.Partition, ts.t.Name, rowID).Scan(&seq)
	if isNoRows(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sqlite: tombstone %s/%q: %w", t.Name, rowID, err)
	}
	return seq, nil
}

// ClearTombstone deletes the row's tombstone inside the transaction.
func (tx *pushTx) ClearTombstone(ctx context.Context, t *schema.Table, rowID string) error {
	ctx, err := tx.check(ctx, "clear tombstone")
	if err != nil {
		return err
	}
	ts, err := tx.table(t)
	if err != nil {
		return err
	}
	if storage.CheckTombstoneOf(tx.info.Partition, ts.t, rowID) != nil {
		return nil
	}
	if err := tx.write(ctx); err != nil {
		return err
	}
	if _, err := tx.sys.clearTomb.ExecContext(ctx, tx.info.Partition, ts.t.Name, rowID); err != nil {
		return fmt.Errorf("sqlite: clear tombstone %s/%q: %w", t.Name, rowID, err)
	}
	return nil
}

// AppendCommit adds the commit, its changes (scopes as JSON) and one
// scope-index entry per distinct (table, var, value) of the commit to the
// log records written when the transaction's commit group ends (log.go).
// A commit storage.CheckCommit refuses is not added
// (storage.ErrUnstorable); a commit the writer fence refuses fails Commit
// (storage.ErrWriterFenced).
func (tx *pushTx) AppendCommit(ctx context.Context, c storage.CommitRecord) error {
	if _, err := tx.check(ctx, "append commit"); err != nil {
		return err
	}
	if c.Seq != tx.info.MaxCommitSeq+1 {
		return fmt.Errorf("sqlite: append commit seq %d to max %d: %w", c.Seq, tx.info.MaxCommitSeq, storage.ErrConflictingSeq)
	}
	if err := storage.CheckCommit(tx.info.Partition, c); err != nil {
		return fmt.Errorf("sqlite: append commit %d: %w", c.Seq, err)
	}
	if err := tx.log.appendCommit(c); err != nil {
		return err
	}
	tx.info.MaxCommitSeq = c.Seq
	return nil
}

// PutIdempotency adds (or replaces) the outcome record, written when the
// transaction's commit group ends (log.go); a record
// storage.CheckIdempotency refuses is not added.
func (tx *pushTx) PutIdempotency(ctx context.Context, rec storage.IdempotencyRecord) error {
	if _, err := tx.check(ctx, "put idempotency"); err != nil {
		return err
	}
	if err := storage.CheckIdempotency(tx.info.Partition, rec); err != nil {
		return fmt.Errorf("sqlite: put idempotency: %w", err)
	}
	tx.log.putIdempotency(rec, tx.info.MaxCommitSeq)
	return nil
}

// Commit returns once the transaction is durable: its writes, its log
// records and its new MaxCommitSeq (the last two written for the whole
// group, group.go flushGroup) commit in one fsync'd COMMIT together with
// the push transactions of other partitions that were waiting for the
// writer. A transaction with commits that the writer fence refuses fails
// alone (storage.ErrWriterFenced) and nothing of it is kept; so does one
// that fails otherwise before joining the group. A failure of the group's
// flush or COMMIT fails every member.
func (tx *pushTx) Commit(ctx context.Context) error {
	ctx, err := tx.check(ctx, "commit")
	if err != nil {
		return err
	}
	tx.done = true
	if len(tx.log.commits) > 0 {
		fenced, err := tx.s.fencedIn(ctx, tx.info.Partition, tx.running)
		if err != nil {
			tx.s.dropMember(tx.ptx)
			return fmt.Errorf("sqlite: commit: read writer fence: %w", err)
		}
		if fenced {
			tx.s.dropMember(tx.ptx)
			return fmt.Errorf("sqlite: commit: append commit %d: %w", tx.log.commits[0].c.Seq, storage.ErrWriterFenced)
		}
	}
	if tx.ptx {
		if err := tx.s.execWriter(ctx, "RELEASE ptx"); err != nil {
			tx.s.dropMember(tx.ptx)
			return fmt.Errorf("sqlite: commit: %w", err)
		}
	}
	tx.s.group.join(tx)
	return tx.s.endMember(true)
}

// Rollback discards the transaction and releases the lock; a no-op once
// finished.
func (tx *pushTx) Rollback(ctx context.Context) error {
	if tx.done {
		return nil
	}
	tx.done = true
	tx.s.dropMember(tx.ptx)
	return nil
}

// ScanRows answers storage.PushTx: Store.ScanRows' query run on the
// writer connection inside this transaction, so it sees its own writes.
func (tx *pushTx) ScanRows(ctx context.Context, q storage.RowQuery) ([]storage.RowRecord, error) {
	ctx, err := tx.check(ctx, "scan rows")
	if err != nil {
		return nil, err
	}
	if q.Table == nil {
		return nil, fmt.Errorf("sqlite: scan rows: nil table")
	}
	ts, err := tx.table(q.Table)
	if err != nil {
		return nil, err
	}
	query, args, none, err := rowsQueryFrom(ts, "", ts.txSelectCols, tx.info.Partition, q)
	if err != nil || none {
		return nil, err
	}
	rows, err := tx.s.conn.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: scan rows of %s: %w", ts.t.Name, err)
	}
	defer rows.Close()
	var out []storage.RowRecord
	sc := newTxRowBuf(ts.t)
	for rows.Next() {
		rec, err := sc.scan(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: scan rows of %s: %w", ts.t.Name, err)
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: scan rows of %s: %w", ts.t.Name, err)
	}
	return out, nil
}

// Prefetch answers storage.PushTx: lookups are local reads on the writer
// connection already, so there is nothing to read ahead; it fails only
// after Commit or Rollback.
func (tx *pushTx) Prefetch(context.Context, []storage.IdempotencyKey, []storage.RowKey) error {
	if tx.done {
		return fmt.Errorf("sqlite: prefetch: %w", storage.ErrTxDone)
	}
	return nil
}
