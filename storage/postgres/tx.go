package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// BeginPush acquires a connection, starts a READ COMMITTED transaction and
// takes the partition's row lock (SELECT ... FOR UPDATE, creating the
// registry row first if needed) before anything else is read. The lock is
// held until Commit or Rollback; the caller must call one of them. A name
// storage.CheckPartition refuses is refused before anything is sent.
//
// When ctx carries a fence (storage.WithFence), the generation read by the
// lock statement (in the same round trip) must equal it: otherwise
// BeginPush rolls back and fails with an error wrapping
// storage.ErrOwnershipLost, and no PushTx exists. Since the lock is held
// to the end, a PushTx that began is never overtaken by a claim
// (storage.Ownership).
func (s *Store) BeginPush(ctx context.Context, partition string) (storage.PushTx, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	if err := storage.CheckPartition(partition); err != nil {
		return nil, fmt.Errorf("postgres: BeginPush: %w", err)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, classify("BeginPush", err)
	}
	s.mu.RLock()
	running := s.running
	s.mu.RUnlock()
	tx := &pushTx{s: s, conn: conn, partition: partition, running: running}
	if err := tx.begin(ctx); err != nil {
		tx.abandon(ctx)
		return nil, classify("BeginPush", err)
	}
	return tx, nil
}

// pushTx is the PostgreSQL PushTx. Row writes run immediately; the log
// writes are buffered in pending and flushed with COMMIT.
type pushTx struct {
	s         *Store
	conn      *pgxpool.Conn
	partition string
	info      storage.PartitionInfo
	done      bool
	// running is the store's running schema version at BeginPush, written
	// as every appended commit's writer_version.
	running int32

	pending log

	// Savepoints are established lazily: Savepoint only records the log
	// mark and sets spWanted; the next row write sends SAVEPOINT first.
	spSet         bool // Savepoint has been called at least once
	spWanted      bool // SAVEPOINT must precede the next row write
	spEstablished bool // a server-side savepoint "sp" exists
	spMarkState   logMark

	// idemPre and rowPre hold Prefetch's answers (nil: known absent),
	// each handed out once (storage.PushTx.Prefetch).
	idemPre map[storage.IdempotencyKey]*storage.IdempotencyRecord
	rowPre  map[prefetchedRow]*storage.RowRecord

	tombs tombKnowledge // tombstones.go
}

// prefetchedRow keys rowPre: table name and row id.
type prefetchedRow struct{ table, rowID string }

func (tx *pushTx) begin(ctx context.Context) error {
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
	var lockErr error
	var info storage.PartitionInfo
	var gen int64
	b.Queue(tx.s.q.lockPartition, tx.partition).QueryRow(func(row pgx.Row) error {
		info, gen, lockErr = scanLocked(row, tx.partition)
		return nil
	})
	if err := tx.conn.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	switch {
	case errors.Is(lockErr, pgx.ErrNoRows): // lockPartition creates it and checks the fence
		info, lockErr = tx.s.lockPartition(ctx, tx.conn, tx.partition, time.Now().UnixMilli())
	case lockErr == nil:
		lockErr = checkFence(ctx, tx.partition, gen)
	}
	if lockErr != nil {
		return fmt.Errorf("lock partition: %w", lockErr)
	}
	tx.info = info
	return nil
}

// abandon rolls back on the server (or drops the connection when that
// fails) and returns the connection to the pool. It runs even when ctx is
// already cancelled.
func (tx *pushTx) abandon(ctx context.Context) error {
	tx.done = true
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var err error
	if c := tx.conn.Conn(); !c.IsClosed() && c.PgConn().TxStatus() != 'I' {
		if _, err = c.Exec(rctx, "ROLLBACK"); err != nil {
			_ = c.Close(rctx)
		}
	}
	tx.conn.Release() // destroys the connection if it is not idle
	if err != nil && !transient(err) {
		return classify("Rollback", err)
	}
	return nil
}

func (tx *pushTx) check() error {
	if tx.done {
		return fmt.Errorf("postgres: %w", storage.ErrTxDone)
	}
	return nil
}

// Partition returns the registry entry read under the lock, with
// MaxCommitSeq following this transaction's appended commits.
func (tx *pushTx) Partition() storage.PartitionInfo {
	p := tx.info
	p.MaxCommitSeq = tx.pending.maxSeq(tx.info.MaxCommitSeq)
	return p
}

// Savepoint marks the point RollbackToSavepoint returns to, replacing any
// previous savepoint.
func (tx *pushTx) Savepoint(ctx context.Context) error {
	if err := tx.check(); err != nil {
		return err
	}
	tx.spSet = true
	tx.spWanted = true
	tx.spMarkState = tx.pending.mark()
	tx.tombs.savepoint()
	return nil
}

// RollbackToSavepoint undoes the row writes and log appends since the last
// Savepoint; the transaction stays usable, also after a failed row write.
func (tx *pushTx) RollbackToSavepoint(ctx context.Context) error {
	if err := tx.check(); err != nil {
		return err
	}
	if !tx.spSet {
		return errors.New("postgres: RollbackToSavepoint without Savepoint")
	}
	if !tx.spWanted { // writes happened since the savepoint
		if _, err := tx.conn.Exec(ctx, "ROLLBACK TO SAVEPOINT sp"); err != nil {
			return classify("RollbackToSavepoint", err)
		}
	}
	tx.pending.reset(tx.spMarkState)
	tx.tombs.rollback()
	return nil
}

// ReleaseSavepoint keeps the writes since the last Savepoint. The
// server-side savepoint is released lazily, by the next SAVEPOINT.
func (tx *pushTx) ReleaseSavepoint(ctx context.Context) error {
	if err := tx.check(); err != nil {
		return err
	}
	if !tx.spSet {
		return errors.New("postgres: ReleaseSavepoint without Savepoint")
	}
	tx.spSet = false
	tx.spWanted = false
	return nil
}

// writePrefix returns the savepoint statements that must precede the next
// row write, and records them as sent.
func (tx *pushTx) writePrefix() []string {
	if !tx.spWanted {
		return nil
	}
	tx.spWanted = false
	if tx.spEstablished {
		return []string{"RELEASE SAVEPOINT sp", "SAVEPOINT sp"}
	}
	tx.spEstablished = true
	return []string{"SAVEPOINT sp"}
}

// exec runs a row write, preceded in the same round trip by a pending
// SAVEPOINT.
func (tx *pushTx) exec(ctx context.Context, sql string, args ...any) error {
	prefix := tx.writePrefix()
	if len(prefix) == 0 {
		_, err := tx.conn.Exec(ctx, sql, args...)
		return err
	}
	b := &pgx.Batch{}
	for _, p := range prefix {
		b.Queue(p)
	}
	b.Queue(sql, args...)
	return tx.conn.SendBatch(ctx, b).Close()
}

// LookupIdempotency returns the record stored for the key in this
// partition, including records put earlier in this transaction, or nil. A
// key that is not storage.Storable is never stored: it is not sent (a
// statement error would abort the transaction).
func (tx *pushTx) LookupIdempotency(ctx context.Context, clientID, clientCommitID string) (*storage.IdempotencyRecord, error) {
	if err := tx.check(); err != nil {
		return nil, err
	}
	if !storage.Storable(clientID) || !storage.Storable(clientCommitID) {
		return nil, nil
	}
	if rec := tx.pending.idempotency(clientID, clientCommitID); rec != nil {
		return rec, nil
	}
	if k := (storage.IdempotencyKey{ClientID: clientID, ClientCommitID: clientCommitID}); tx.idemPre != nil {
		if rec, ok := tx.idemPre[k]; ok {
			delete(tx.idemPre, k)
			return rec, nil
		}
	}
	rec, err := lookupIdempotency(ctx, tx.conn, tx.s.q.getIdem, tx.partition, clientID, clientCommitID)
	return rec, classify("LookupIdempotency", err)
}

// Prefetch implements storage.PushTx: one round trip reads the
// idempotency records (one statement), the rows (one per table) and the
// rows' tombstones (one statement) of the keys; a key already prefetched
// and not yet asked for is read again. The tombstones answer Tombstone
// for the rows and let ClearTombstone of a row known to have none send
// nothing (tombstones.go), so inserting a new row costs no round trip of
// its own for the tombstone.
func (tx *pushTx) Prefetch(ctx context.Context, idem []storage.IdempotencyKey, rows []storage.RowKey) error {
	if err := tx.check(); err != nil {
		return err
	}
	b := &pgx.Batch{}
	var clients, commits []string
	for _, k := range idem {
		if storage.Storable(k.ClientID) && storage.Storable(k.ClientCommitID) {
			clients, commits = append(clients, k.ClientID), append(commits, k.ClientCommitID)
		}
	}
	idemFound := map[storage.IdempotencyKey]*storage.IdempotencyRecord{}
	if len(clients) > 0 {
		b.Queue(tx.s.q.prefetchIdem, tx.partition, clients, commits).Query(func(rs pgx.Rows) error {
			for rs.Next() {
				var rec storage.IdempotencyRecord
				var status int16
				if err := rs.Scan(&rec.ClientID, &rec.ClientCommitID, &status, &rec.CommitSeq, &rec.Result); err != nil {
					return err
				}
				rec.Status = ssp2.CommitStatus(status)
				idemFound[storage.IdempotencyKey{ClientID: rec.ClientID, ClientCommitID: rec.ClientCommitID}] = &rec
			}
			return rs.Err()
		})
	}
	byTable := map[string][]string{}
	keys := map[string]*keyArray{}
	tables := map[string]*tableSQL{}
	for _, k := range rows {
		if k.Table == nil {
			continue
		}
		if tables[k.Table.Name] == nil {
			ts, err := tx.s.table(k.Table.Name)
			if err != nil {
				return err
			}
			tables[k.Table.Name] = ts
			keys[k.Table.Name] = newKeyArray(ts.t)
		}
		if !keys[k.Table.Name].add(k.RowID) {
			continue // names no row that can exist
		}
		byTable[k.Table.Name] = append(byTable[k.Table.Name], k.RowID)
	}
	rowFound := map[prefetchedRow]*storage.RowRecord{}
	for name := range byTable {
		ts := tables[name]
		b.Queue(ts.txGetMany, tx.partition, keys[name].arg()).Query(func(rs pgx.Rows) error {
			sc := newTxRowScanner(ts.t)
			for rs.Next() {
				if err := rs.Scan(sc.targets...); err != nil {
					return err
				}
				rec := sc.record()
				rowFound[prefetchedRow{name, rec.RowID}] = &rec
			}
			return rs.Err()
		})
	}
	tombs := tx.queueTombstones(b, byTable)
	if b.Len() == 0 {
		return nil
	}
	if err := tx.conn.SendBatch(ctx, b).Close(); err != nil {
		return classify("Prefetch", err)
	}
	tx.tombs.learn(tombs)
	if tx.idemPre == nil {
		tx.idemPre = map[storage.IdempotencyKey]*storage.IdempotencyRecord{}
	}
	for i, c := range clients {
		k := storage.IdempotencyKey{ClientID: c, ClientCommitID: commits[i]}
		tx.idemPre[k] = idemFound[k] // nil: known absent
	}
	if tx.rowPre == nil {
		tx.rowPre = map[prefetchedRow]*storage.RowRecord{}
	}
	for name, ids := range byTable {
		for _, id := range ids {
			k := prefetchedRow{name, id}
			tx.rowPre[k] = rowFound[k]
		}
	}
	return nil
}

// keyArray collects the keys of one table's rows as the array parameter
// of txGetMany, of the key column's type.
type keyArray struct {
	t     *schema.Table
	ints  []int64
	bools []bool
	texts []string
}

func newKeyArray(t *schema.Table) *keyArray { return &keyArray{t: t} }

// add adds the key rowID names and reports whether it names one
// (keyArg).
func (a *keyArray) add(rowID string) bool {
	k, ok := keyArg(a.t, rowID)
	if !ok {
		return false
	}
	switch x := k.(type) {
	case int64:
		a.ints = append(a.ints, x)
	case bool:
		a.bools = append(a.bools, x)
	case string:
		a.texts = append(a.texts, x)
	default:
		return false
	}
	return true
}

// arg is the array parameter.
func (a *keyArray) arg() any {
	switch a.t.Columns[a.t.PK].Type {
	case ssp2.TypeInteger:
		return a.ints
	case ssp2.TypeBoolean:
		return a.bools
	}
	return a.texts
}

// GetRow returns the row as seen by this transaction, or nil. A rowID
// that names no row that can exist (storage.KeyValue: not
// storage.Storable, or no key value of the table renders as it) is not
// sent (a statement error would abort the transaction).
func (tx *pushTx) GetRow(ctx context.Context, t *schema.Table, rowID string) (*storage.RowRecord, error) {
	if err := tx.check(); err != nil {
		return nil, err
	}
	ts, err := tx.s.table(t.Name)
	if err != nil {
		return nil, err
	}
	key, ok := keyArg(ts.t, rowID)
	if !ok {
		return nil, nil
	}
	if k := (prefetchedRow{t.Name, rowID}); tx.rowPre != nil {
		if rec, ok := tx.rowPre[k]; ok {
			delete(tx.rowPre, k)
			return rec, nil
		}
	}
	rs := newTxRowScanner(ts.t)
	err = tx.conn.QueryRow(ctx, ts.txGet, tx.partition, key).Scan(rs.targets...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, classify("GetRow", err)
	}
	rec := rs.record()
	return &rec, nil
}

// PutRow inserts or replaces the row with its column versions (NULL for
// nil; an empty, non-nil value is an empty bytea). A row storage.CheckRow refuses is
// not sent and returns an error wrapping storage.ErrUnstorable and
// storage.ErrConstraint (the transaction stays usable). A violated
// constraint (or a value PostgreSQL cannot store after all) returns an
// error wrapping storage.ErrConstraint; the transaction is then unusable
// until RollbackToSavepoint.
func (tx *pushTx) PutRow(ctx context.Context, t *schema.Table, rec storage.RowRecord) error {
	if err := tx.check(); err != nil {
		return err
	}
	ts, err := tx.s.table(t.Name)
	if err != nil {
		return err
	}
	if len(rec.Values) != len(ts.t.Columns) {
		return fmt.Errorf("postgres: PutRow %s: %d values for %d columns", t.Name, len(rec.Values), len(ts.t.Columns))
	}
	if id, ok := ts.t.RowID(rec.Values); !ok || id != rec.RowID {
		return fmt.Errorf("postgres: PutRow %s: primary key value %v does not render as RowID %q", t.Name, rec.Values[ts.t.PK], rec.RowID)
	}
	delete(tx.rowPre, prefetchedRow{t.Name, rec.RowID}) // read again after the write
	if err := storage.CheckRow(tx.partition, ts.t, rec); err != nil {
		return fmt.Errorf("postgres: PutRow %s: %w", t.Name, err)
	}
	args := make([]any, 0, len(rec.Values)+3)
	args = append(args, tx.partition)
	for i, v := range rec.Values {
		a, err := encodeValue(ts.t.Columns[i], v)
		if err != nil {
			return fmt.Errorf("postgres: PutRow %s: %w", t.Name, err)
		}
		args = append(args, a)
	}
	args = append(args, rec.Version, bindColumnVersions(rec.ColumnVersions))
	return classifyRowWrite("PutRow", tx.exec(ctx, ts.upsert, args...))
}

// DeleteRow deletes the row if it exists and records (or replaces) its
// tombstone, in one statement (a rowID that names no row that can exist,
// storage.KeyValue, is not sent; one storage.CheckTombstoneOf refuses
// gets no tombstone).
func (tx *pushTx) DeleteRow(ctx context.Context, t *schema.Table, rowID string, tombstoneSeq int64) error {
	if err := tx.check(); err != nil {
		return err
	}
	ts, err := tx.s.table(t.Name)
	if err != nil {
		return err
	}
	if tombstoneSeq < 1 {
		return fmt.Errorf("postgres: DeleteRow %s: tombstone seq %d must be >= 1", t.Name, tombstoneSeq)
	}
	key, ok := keyArg(ts.t, rowID)
	if !ok {
		return nil
	}
	k := prefetchedRow{t.Name, rowID}
	delete(tx.rowPre, k) // read again after the write
	if storage.CheckTombstoneOf(tx.partition, ts.t, rowID) != nil {
		return classifyRowWrite("DeleteRow", tx.exec(ctx, ts.del, tx.partition, key))
	}
	tx.tombs.write(k)
	if err := tx.exec(ctx, ts.delTomb, tx.partition, key, ts.t.Name, tombstoneSeq, rowID); err != nil {
		return classifyRowWrite("DeleteRow", err)
	}
	tx.tombs.set(k, tombstoneSeq)
	return nil
}

// AppendCommit buffers c for the log; c.Seq must be MaxCommitSeq+1. The
// buffer is written with COMMIT in one batch, where one bad value would
// fail every commit of the transaction, so c is checked here first: a
// commit storage.CheckCommit refuses is not buffered and returns an error
// wrapping storage.ErrUnstorable.
func (tx *pushTx) AppendCommit(ctx context.Context, c storage.CommitRecord) error {
	if err := tx.check(); err != nil {
		return err
	}
	if want := tx.Partition().MaxCommitSeq + 1; c.Seq != want {
		return fmt.Errorf("postgres: AppendCommit seq %d, want %d: %w", c.Seq, want, storage.ErrConflictingSeq)
	}
	if err := storage.CheckCommit(tx.partition, c); err != nil {
		return fmt.Errorf("postgres: AppendCommit seq %d: %w", c.Seq, err)
	}
	return tx.pending.appendCommit(c)
}

// PutIdempotency buffers the record; it is written with the commit and
// replaces an existing record for the same key. A record
// storage.CheckIdempotency refuses is not buffered (storage.ErrUnstorable).
func (tx *pushTx) PutIdempotency(ctx context.Context, rec storage.IdempotencyRecord) error {
	if err := tx.check(); err != nil {
		return err
	}
	if err := storage.CheckIdempotency(tx.partition, rec); err != nil {
		return fmt.Errorf("postgres: PutIdempotency: %w", err)
	}
	tx.pending.putIdempotency(rec, tx.Partition().MaxCommitSeq)
	return nil
}

// Commit writes the buffered log (commits, changes, scope index,
// idempotency records, max_commit_seq) and the change notification and
// commits, all in one round trip, then releases the connection. A failed
// Commit leaves nothing written; its error reports IsRetryable for
// transient failures (the caller re-runs the whole push). Because the log
// is written here, a commit rejected by the writer fence fails here (not
// in AppendCommit) with an error wrapping storage.ErrWriterFenced. A
// commit's unstorable data never fails it: AppendCommit and
// PutIdempotency refuse such data before buffering it.
func (tx *pushTx) Commit(ctx context.Context) error {
	if err := tx.check(); err != nil {
		return err
	}
	b := &pgx.Batch{}
	tx.pending.queue(b, tx.s, tx.partition, tx.running)
	var tag string
	b.Queue("COMMIT").Exec(func(ct pgconn.CommandTag) error {
		tag = ct.String()
		return nil
	})
	err := tx.conn.SendBatch(ctx, b).Close()
	if err == nil && tag != "COMMIT" {
		err = fmt.Errorf("transaction was aborted by an earlier failed statement (server answered %q)", tag)
	}
	if err != nil {
		_ = tx.abandon(ctx)
		return classify("Commit", err)
	}
	tx.done = true
	tx.conn.Release()
	return nil
}

// Rollback discards the transaction and releases the lock; it is a no-op
// after Commit or Rollback. When the connection is already gone the server
// has rolled back by itself and Rollback returns nil.
func (tx *pushTx) Rollback(ctx context.Context) error {
	if tx.done {
		return nil
	}
	return tx.abandon(ctx)
}

// ScanRows answers storage.PushTx: Store.ScanRows' statement run on
// this transaction's connection, so it sees the transaction's own row
// writes. Values that are not storage.Storable are never sent (a statement
// error would abort the transaction).
func (tx *pushTx) ScanRows(ctx context.Context, q storage.RowQuery) ([]storage.RowRecord, error) {
	if err := tx.check(); err != nil {
		return nil, err
	}
	if q.Table == nil {
		return nil, fmt.Errorf("postgres: ScanRows: nil table")
	}
	ts, err := tx.s.table(q.Table.Name)
	if err != nil {
		return nil, err
	}
	if q.Limit <= 0 {
		return nil, nil
	}
	query, args, none := rowsSQL(ts, tx.partition, q)
	if none {
		return nil, nil
	}
	// The same statement selecting the column versions too.
	committed := "SELECT " + ts.selectList + " FROM "
	if !strings.HasPrefix(query, committed) {
		return nil, fmt.Errorf("postgres: ScanRows: row query %.40q does not select %q", query, committed)
	}
	query = "SELECT " + ts.txSelectList + " FROM " + query[len(committed):]
	rows, err := tx.conn.Query(ctx, query, args...)
	if err != nil {
		return nil, classify("ScanRows", err)
	}
	defer rows.Close()
	var out []storage.RowRecord
	rs := newTxRowScanner(ts.t)
	for rows.Next() {
		if err := rows.Scan(rs.targets...); err != nil {
			return nil, classify("ScanRows", err)
		}
		out = append(out, rs.record())
	}
	if err := rows.Err(); err != nil {
		return nil, classify("ScanRows", err)
	}
	return out, nil
}

// CommittedGate answers storage.PushTx: the PostgreSQL store reads no
// gate after its COMMIT (each transaction commits alone), so there is
// none (ok false) and replies verify the gate with a read of their own.
func (tx *pushTx) CommittedGate() (storage.ServeGate, bool) { return storage.ServeGate{}, false }
