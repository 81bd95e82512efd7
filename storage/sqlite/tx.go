package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
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
	// spActive and spMax track the single savepoint and the MaxCommitSeq
	// to restore on RollbackToSavepoint.
	spActive bool
	spMax    int64
	done     bool
	// scratch buffers reused across statements.
	args []any
	keys map[string]struct{}
	// grp is the commit group of the transaction's gate read
	// (checkpoint.go).
	grp *commitGroup
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
	if err := s.beginMember(ctx); err != nil {
		s.unlock()
		return nil, fmt.Errorf("sqlite: begin push on %q: %w", partition, err)
	}
	info, err := s.ensurePartition(context.WithoutCancel(ctx), sys, partition, 0)
	if err != nil {
		s.abortMember()
		return nil, fmt.Errorf("sqlite: begin push on %q: %w", partition, err)
	}
	return &pushTx{s: s, sys: sys, tables: tables, info: info, running: sch.Version, startMax: info.MaxCommitSeq, keys: map[string]struct{}{}}, nil
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

// LookupIdempotency reads through the transaction, so it sees its own
// PutIdempotency calls.
func (tx *pushTx) LookupIdempotency(ctx context.Context, clientID, clientCommitID string) (*storage.IdempotencyRecord, error) {
	ctx, err := tx.check(ctx, "lookup idempotency")
	if err != nil {
		return nil, err
	}
	rec, err := scanIdem(tx.sys.lookupIdem.QueryRowContext(ctx, tx.info.Partition, clientID, clientCommitID), clientID, clientCommitID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: lookup idempotency: %w", err)
	}
	return rec, nil
}

// GetRow reads the row as this transaction sees it.
func (tx *pushTx) GetRow(ctx context.Context, t *schema.Table, rowID string) (*storage.RowRecord, error) {
	ctx, err := tx.check(ctx, "get row")
	if err != nil {
		return nil, err
	}
	ts, err := tx.table(t)
	if err != nil {
		return nil, err
	}
	rows, err := ts.get.QueryContext(ctx, tx.info.Partition, rowID)
	rec, err := oneRow(rows, err, ts.t)
	if err != nil {
		return nil, fmt.Errorf("sqlite: get row %s/%q: %w", t.Name, rowID, err)
	}
	return rec, nil
}

// oneRow reads the first row of t from the result of a query (rows, err),
// closing rows; nil when the query found none.
func oneRow(rows *sql.Rows, err error, t *schema.Table) (*storage.RowRecord, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if !rows.Next() {
		return nil, rows.Err()
	}
	rec, err := scanRow(rows, t)
	if err != nil {
		return nil, err
	}
	return &rec, nil
}

// Savepoint releases the previous savepoint, if any, and sets a new one.
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
	if _, err := tx.sys.savepoint.ExecContext(ctx); err != nil {
		return fmt.Errorf("sqlite: savepoint: %w", err)
	}
	tx.spActive, tx.spMax = true, tx.info.MaxCommitSeq
	return nil
}

// RollbackToSavepoint undoes the writes since Savepoint; the savepoint
// stays set.
func (tx *pushTx) RollbackToSavepoint(ctx context.Context) error {
	ctx, err := tx.check(ctx, "rollback to savepoint")
	if err != nil {
		return err
	}
	if !tx.spActive {
		return fmt.Errorf("sqlite: rollback to savepoint: no savepoint")
	}
	if _, err := tx.sys.rollbackTo.ExecContext(ctx); err != nil {
		return fmt.Errorf("sqlite: rollback to savepoint: %w", err)
	}
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
	if _, err := tx.sys.release.ExecContext(ctx); err != nil {
		return fmt.Errorf("sqlite: release savepoint: %w", err)
	}
	tx.spActive = false
	return nil
}

// PutRow upserts the row; a violated UNIQUE or NOT NULL constraint wraps
// storage.ErrConstraint, and a row storage.CheckRow refuses is not written
// (storage.ErrUnstorable).
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
	if pk, _ := rec.Values[ts.t.PK].(string); pk != rec.RowID {
		return fmt.Errorf("sqlite: put row %s/%q: primary key value %v differs", t.Name, rec.RowID, rec.Values[ts.t.PK])
	}
	if err := storage.CheckRow(tx.info.Partition, ts.t, rec); err != nil {
		return fmt.Errorf("sqlite: put row %s: %w", t.Name, err)
	}
	args := append(tx.args[:0], tx.info.Partition)
	for i, c := range cols {
		v, err := bindValue(c, rec.Values[i])
		if err != nil {
			return fmt.Errorf("sqlite: put row %s/%q: %w", t.Name, rec.RowID, err)
		}
		args = append(args, v)
	}
	args = append(args, rec.Version)
	tx.args = args
	_, err = ts.upsert.ExecContext(ctx, args...)
	clear(tx.args)
	if err != nil {
		return classify(err, fmt.Sprintf("put row %s/%q", t.Name, rec.RowID))
	}
	return nil
}

// DeleteRow deletes the row if it exists.
func (tx *pushTx) DeleteRow(ctx context.Context, t *schema.Table, rowID string) error {
	ctx, err := tx.check(ctx, "delete row")
	if err != nil {
		return err
	}
	ts, err := tx.table(t)
	if err != nil {
		return err
	}
	if _, err := ts.drop.ExecContext(ctx, tx.info.Partition, rowID); err != nil {
		return classify(err, fmt.Sprintf("delete row %s/%q", t.Name, rowID))
	}
	return nil
}

// AppendCommit inserts the commit, its changes (scopes as JSON) and one
// scope-index entry per distinct (table, var, value) of the commit. A
// commit storage.CheckCommit refuses is not written (storage.ErrUnstorable).
func (tx *pushTx) AppendCommit(ctx context.Context, c storage.CommitRecord) error {
	ctx, err := tx.check(ctx, "append commit")
	if err != nil {
		return err
	}
	p := tx.info.Partition
	if c.Seq != tx.info.MaxCommitSeq+1 {
		return fmt.Errorf("sqlite: append commit seq %d to max %d: %w", c.Seq, tx.info.MaxCommitSeq, storage.ErrConflictingSeq)
	}
	if err := storage.CheckCommit(p, c); err != nil {
		return fmt.Errorf("sqlite: append commit %d: %w", c.Seq, err)
	}
	if _, err := tx.sys.insCommit.ExecContext(ctx, p, c.Seq, c.CreatedAtMs, c.ActorID, c.ClientID, c.ClientCommitID, tx.running); err != nil {
		return classifyAppend(err, c.Seq)
	}
	clear(tx.keys)
	for i, ch := range c.Changes {
		scopes, err := json.Marshal(ch.Scopes)
		if err != nil {
			return fmt.Errorf("sqlite: append commit %d: scopes: %w", c.Seq, err)
		}
		var row any
		if ch.Op == ssp2.OpUpsert || ch.Row != nil {
			row = ch.Row
		}
		if _, err := tx.sys.insChange.ExecContext(ctx, p, c.Seq, i, ch.Table, ch.RowID, int64(ch.Op), ch.RowVersion, string(scopes), row); err != nil {
			return fmt.Errorf("sqlite: append commit %d change %d: %w", c.Seq, i, err)
		}
		for v, val := range ch.Scopes {
			k := ch.Table + "\x00" + v + "\x00" + val
			if _, dup := tx.keys[k]; dup {
				continue
			}
			tx.keys[k] = struct{}{}
			if _, err := tx.sys.insScopeIx.ExecContext(ctx, p, ch.Table, v+"\x00"+val, c.Seq); err != nil {
				return fmt.Errorf("sqlite: append commit %d scope index: %w", c.Seq, err)
			}
		}
	}
	tx.info.MaxCommitSeq = c.Seq
	return nil
}

// PutIdempotency stores (or replaces) the outcome record; a record
// storage.CheckIdempotency refuses is not written.
func (tx *pushTx) PutIdempotency(ctx context.Context, rec storage.IdempotencyRecord) error {
	ctx, err := tx.check(ctx, "put idempotency")
	if err != nil {
		return err
	}
	if err := storage.CheckIdempotency(tx.info.Partition, rec); err != nil {
		return fmt.Errorf("sqlite: put idempotency: %w", err)
	}
	if _, err := tx.sys.putIdem.ExecContext(ctx, tx.info.Partition, rec.ClientID, rec.ClientCommitID, int64(rec.Status), rec.CommitSeq, rec.Result, tx.info.MaxCommitSeq); err != nil {
		return fmt.Errorf("sqlite: put idempotency: %w", err)
	}
	return nil
}

// Commit records the new MaxCommitSeq and returns once the transaction is
// durable: its writes commit in one fsync'd COMMIT together with the push
// transactions of other partitions that were waiting for the writer
// (group.go). On failure nothing of it is kept.
func (tx *pushTx) Commit(ctx context.Context) error {
	ctx, err := tx.check(ctx, "commit")
	if err != nil {
		return err
	}
	tx.done = true
	if tx.info.MaxCommitSeq != tx.startMax {
		if _, err := tx.sys.setMax.ExecContext(ctx, tx.info.MaxCommitSeq, tx.info.Partition); err != nil {
			tx.s.abortMember()
			return fmt.Errorf("sqlite: commit: record max seq: %w", err)
		}
	}
	if _, err := tx.s.conn.ExecContext(ctx, "RELEASE ptx"); err != nil {
		tx.s.abortMember()
		return fmt.Errorf("sqlite: commit: %w", err)
	}
	return tx.s.endMember(true)
}

// Rollback discards the transaction and releases the lock; a no-op once
// finished.
func (tx *pushTx) Rollback(ctx context.Context) error {
	if tx.done {
		return nil
	}
	tx.done = true
	tx.s.abortMember()
	return nil
}

// ScanRows answers storage.TxRowScanner: Store.ScanRows' query run on the
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
	query, args, none, err := rowsQuery(ts, tx.info.Partition, q)
	if err != nil || none {
		return nil, err
	}
	rows, err := tx.s.conn.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: scan rows of %s: %w", ts.t.Name, err)
	}
	defer rows.Close()
	var out []storage.RowRecord
	sc := newRowBuf(ts.t)
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
