package memory

import (
	"context"
	"fmt"
	"slices"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
)

// pushTx stages writes in overlays; undo holds one closure per write so
// RollbackToSavepoint can revert to undo[:sp].
type pushTx struct {
	s   *Store
	sch *schema.Schema
	p   *part
	// running is the handle's running schema version at BeginPush, the
	// writer version of every commit this transaction appends.
	running int32
	// advances are the staged AdvanceCheckpoint writes, applied on Commit.
	advances []advance
	info     storage.PartitionInfo
	done     bool

	rows map[string]map[string]*storage.RowRecord // table -> id -> row (nil: deleted)
	// tombs overlays the partition's tombstones: table -> id -> seq (0:
	// cleared in this transaction).
	tombs   map[string]map[string]int64
	commits []storage.CommitRecord
	idem    map[idemKey]idemEntry
	undo    []func()
	sp      int // len(undo) at the last Savepoint, -1 if none
	// reactions are the staged PutReactions writes (reactions.go).
	reactions []storage.NewReaction
	// clients are the staged PutClients writes (tx_batch.go).
	clients []storage.ClientRecord

	blobTx // staged blob claims and references (blobs.go)
}

// BeginPush takes the partition's write lock, waiting until it is free or
// ctx ends, and creates the partition if needed (that creation is not
// undone by Rollback). A name storage.CheckPartition refuses is refused.
func (s *Store) BeginPush(ctx context.Context, partition string) (storage.PushTx, error) {
	if err := storage.CheckPartition(partition); err != nil {
		return nil, fmt.Errorf("memory: begin push: %w", err)
	}
	sch, p, err := s.schemaAndPart(partition)
	if err != nil {
		return nil, fmt.Errorf("memory: begin push on %q: %w", partition, err)
	}
	if err := p.acquire(ctx); err != nil {
		return nil, fmt.Errorf("memory: begin push on %q: %w", partition, err)
	}
	p.mu.Lock()
	p.create()
	info := p.info
	p.mu.Unlock()
	return &pushTx{s: s, sch: sch, p: p, running: sch.Version, info: info, rows: map[string]map[string]*storage.RowRecord{},
		idem: map[idemKey]idemEntry{}, sp: -1}, nil
}

func (tx *pushTx) check(ctx context.Context, op string) error {
	if tx.done {
		return fmt.Errorf("memory: %s: %w", op, storage.ErrTxDone)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: %s: %w", op, err)
	}
	return nil
}

// table resolves t against the ensured schema (a nil t is an error, as
// on the other backends, not a panic).
func (tx *pushTx) table(t *schema.Table) (*schema.Table, error) {
	if t == nil {
		return nil, fmt.Errorf("memory: nil table")
	}
	st := tx.sch.Table(t.Name)
	if st == nil {
		return nil, fmt.Errorf("memory: table %q is not in the ensured schema", t.Name)
	}
	return st, nil
}

// Partition returns the entry read under the lock, MaxCommitSeq following
// this transaction's appends.
func (tx *pushTx) Partition() storage.PartitionInfo { return tx.info }

// LookupIdempotency returns a copy of the record staged by this
// transaction or, failing that, the committed one, or nil.
func (tx *pushTx) LookupIdempotency(ctx context.Context, clientID, clientCommitID string) (*storage.IdempotencyRecord, error) {
	if err := tx.check(ctx, "lookup idempotency"); err != nil {
		return nil, err
	}
	k := idemKey{clientID, clientCommitID}
	e, ok := tx.idem[k]
	if !ok {
		tx.p.mu.RLock()
		e, ok = tx.p.idem[k]
		tx.p.mu.RUnlock()
	}
	if !ok {
		return nil, nil
	}
	rec := copyIdem(e.rec)
	return &rec, nil
}

// current returns the row as this transaction sees it (not copied).
func (tx *pushTx) current(table, id string) (storage.RowRecord, bool) {
	if r, staged := tx.rows[table][id]; staged {
		if r == nil {
			return storage.RowRecord{}, false
		}
		return *r, true
	}
	tx.p.mu.RLock()
	defer tx.p.mu.RUnlock()
	r, ok := tx.p.rows[table][id]
	return r, ok
}

// GetRow returns a copy of the row as this transaction sees it (its own
// staged writes first), padded to the ensured schema's columns, or nil.
func (tx *pushTx) GetRow(ctx context.Context, t *schema.Table, rowID string) (*storage.RowRecord, error) {
	if err := tx.check(ctx, "get row"); err != nil {
		return nil, err
	}
	st, err := tx.table(t)
	if err != nil {
		return nil, err
	}
	r, ok := tx.current(st.Name, rowID)
	if !ok {
		return nil, nil
	}
	r = copyRecord(r, len(st.Columns))
	return &r, nil
}

// Savepoint marks the current point of the undo log, replacing any
// previous savepoint.
func (tx *pushTx) Savepoint(ctx context.Context) error {
	if err := tx.check(ctx, "savepoint"); err != nil {
		return err
	}
	tx.sp = len(tx.undo)
	return nil
}

// RollbackToSavepoint undoes, newest first, every staged write since
// Savepoint; the savepoint stays set.
func (tx *pushTx) RollbackToSavepoint(ctx context.Context) error {
	if err := tx.check(ctx, "rollback to savepoint"); err != nil {
		return err
	}
	if tx.sp < 0 {
		return fmt.Errorf("memory: rollback to savepoint: no savepoint")
	}
	for i := len(tx.undo) - 1; i >= tx.sp; i-- {
		tx.undo[i]()
	}
	tx.undo = tx.undo[:tx.sp]
	return nil
}

// ReleaseSavepoint keeps the writes since Savepoint and clears it.
func (tx *pushTx) ReleaseSavepoint(ctx context.Context) error {
	if err := tx.check(ctx, "release savepoint"); err != nil {
		return err
	}
	if tx.sp < 0 {
		return fmt.Errorf("memory: release savepoint: no savepoint")
	}
	tx.sp = -1
	return nil
}

// stage sets the overlay entry for (table, id), recording how to undo it.
func (tx *pushTx) stage(table, id string, r *storage.RowRecord) {
	tx.undo = append(tx.undo, setUndoable(&tx.rows, table, id, r))
}

// setUndoable sets (*overlay)[table][id] = v, creating the maps it needs,
// and returns what undoes it.
func setUndoable[V any](overlay *map[string]map[string]V, table, id string, v V) func() {
	if *overlay == nil {
		*overlay = map[string]map[string]V{}
	}
	m := (*overlay)[table]
	if m == nil {
		m = map[string]V{}
		(*overlay)[table] = m
	}
	prev, had := m[id]
	m[id] = v
	return func() {
		if had {
			m[id] = prev
		} else {
			delete(m, id)
		}
	}
}

// PutRow validates rec against the ensured table (storage.CheckRow; NOT
// NULL and unique indexes fail with storage.ErrConstraint) and stages a
// copy of it.
func (tx *pushTx) PutRow(ctx context.Context, t *schema.Table, rec storage.RowRecord) error {
	if err := tx.check(ctx, "put row"); err != nil {
		return err
	}
	st, err := tx.table(t)
	if err != nil {
		return err
	}
	if err := checkShape(st, rec); err != nil {
		return err
	}
	if err := storage.CheckRow(tx.info.Partition, st, rec); err != nil {
		return fmt.Errorf("memory: put row %s: %w", st.Name, err)
	}
	if err := checkRow(st, rec); err != nil {
		return err
	}
	if err := tx.checkUnique(st, rec); err != nil {
		return err
	}
	r := copyRecord(rec, len(st.Columns))
	tx.stage(st.Name, rec.RowID, &r)
	return nil
}

// checkUnique enforces st's unique indexes over the rows this transaction
// sees; a NULL in any indexed column never conflicts.
func (tx *pushTx) checkUnique(st *schema.Table, rec storage.RowRecord) error {
	for _, ix := range st.Indexes {
		if !ix.Unique || hasNull(rec.Values, ix.Columns) {
			continue
		}
		clash := func(other storage.RowRecord) bool {
			if other.RowID == rec.RowID {
				return false
			}
			for _, c := range ix.Columns {
				if c >= len(other.Values) || !valueEqual(other.Values[c], rec.Values[c]) {
					return false
				}
			}
			return true
		}
		staged := tx.rows[st.Name]
		for _, r := range staged {
			if r != nil && clash(*r) {
				return fmt.Errorf("memory: table %s: unique index %s: %w", st.Name, ix.Name, storage.ErrConstraint)
			}
		}
		tx.p.mu.RLock()
		var found bool
		for id, r := range tx.p.rows[st.Name] {
			if _, over := staged[id]; !over && clash(r) {
				found = true
				break
			}
		}
		tx.p.mu.RUnlock()
		if found {
			return fmt.Errorf("memory: table %s: unique index %s: %w", st.Name, ix.Name, storage.ErrConstraint)
		}
	}
	return nil
}

func hasNull(vals []any, cols []int) bool {
	for _, c := range cols {
		if vals[c] == nil {
			return true
		}
	}
	return false
}

// DeleteRow stages the deletion of the row if this transaction sees it,
// and its tombstone at tombstoneSeq.
func (tx *pushTx) DeleteRow(ctx context.Context, t *schema.Table, rowID string, tombstoneSeq int64) error {
	if err := tx.check(ctx, "delete row"); err != nil {
		return err
	}
	st, err := tx.table(t)
	if err != nil {
		return err
	}
	if tombstoneSeq < 1 {
		return fmt.Errorf("memory: delete row %s/%s: tombstone seq %d must be >= 1", st.Name, rowID, tombstoneSeq)
	}
	if _, ok := tx.current(st.Name, rowID); ok {
		tx.stage(st.Name, rowID, nil)
	}
	if storage.CheckTombstoneOf(tx.info.Partition, st, rowID) != nil {
		return nil // no such row can exist: no tombstone, as on every backend
	}
	tx.stageTomb(st.Name, rowID, tombstoneSeq)
	return nil
}

// stageTomb sets the tombstone overlay entry for (table, id) (0 clears),
// recording how to undo it.
func (tx *pushTx) stageTomb(table, id string, seq int64) {
	tx.undo = append(tx.undo, setUndoable(&tx.tombs, table, id, seq))
}

// Tombstone returns the seq of the row's tombstone as this transaction
// sees it, 0 when none.
func (tx *pushTx) Tombstone(ctx context.Context, t *schema.Table, rowID string) (int64, error) {
	if err := tx.check(ctx, "tombstone"); err != nil {
		return 0, err
	}
	st, err := tx.table(t)
	if err != nil {
		return 0, err
	}
	if storage.CheckTombstoneOf(tx.info.Partition, st, rowID) != nil {
		return 0, nil
	}
	if seq, staged := tx.tombs[st.Name][rowID]; staged {
		return seq, nil
	}
	tx.p.mu.RLock()
	defer tx.p.mu.RUnlock()
	return tx.p.tombs[st.Name][rowID], nil
}

// ClearTombstone stages the removal of the row's tombstone.
func (tx *pushTx) ClearTombstone(ctx context.Context, t *schema.Table, rowID string) error {
	if err := tx.check(ctx, "clear tombstone"); err != nil {
		return err
	}
	st, err := tx.table(t)
	if err != nil {
		return err
	}
	tx.stageTomb(st.Name, rowID, 0)
	return nil
}

// AppendCommit stages a copy of c; c.Seq must be MaxCommitSeq+1, c must
// pass storage.CheckCommit (else storage.ErrUnstorable, nothing staged),
// and the partition's fence must not be above the handle's running
// version (storage.ErrWriterFenced; Commit checks the fence again).
func (tx *pushTx) AppendCommit(ctx context.Context, c storage.CommitRecord) error {
	if err := tx.check(ctx, "append commit"); err != nil {
		return err
	}
	if c.Seq != tx.info.MaxCommitSeq+1 {
		return fmt.Errorf("memory: append commit seq %d to max %d: %w", c.Seq, tx.info.MaxCommitSeq, storage.ErrConflictingSeq)
	}
	if err := storage.CheckCommit(tx.info.Partition, c); err != nil {
		return fmt.Errorf("memory: append commit seq %d: %w", c.Seq, err)
	}
	if err := tx.checkFence(); err != nil {
		return fmt.Errorf("memory: append commit seq %d: %w", c.Seq, err)
	}
	tx.commits = append(tx.commits, copyCommit(c))
	tx.info.MaxCommitSeq = c.Seq
	tx.undo = append(tx.undo, func() {
		tx.commits = tx.commits[:len(tx.commits)-1]
		tx.info.MaxCommitSeq--
	})
	return nil
}

// PutIdempotency stages a copy of rec, replacing a record for the same
// key; a record storage.CheckIdempotency refuses is not staged.
func (tx *pushTx) PutIdempotency(ctx context.Context, rec storage.IdempotencyRecord) error {
	if err := tx.check(ctx, "put idempotency"); err != nil {
		return err
	}
	if err := storage.CheckIdempotency(tx.info.Partition, rec); err != nil {
		return fmt.Errorf("memory: put idempotency: %w", err)
	}
	k := idemKey{rec.ClientID, rec.ClientCommitID}
	prev, had := tx.idem[k]
	tx.idem[k] = idemEntry{rec: copyIdem(rec), pos: tx.info.MaxCommitSeq}
	tx.undo = append(tx.undo, func() {
		if had {
			tx.idem[k] = prev
		} else {
			delete(tx.idem, k)
		}
	})
	return nil
}

// Commit publishes every staged write at once and releases the lock.
func (tx *pushTx) Commit(ctx context.Context) error {
	if err := tx.check(ctx, "commit"); err != nil {
		return err
	}
	p := tx.p
	// The fence is checked again at publication under the database lock,
	// so a bump between AppendCommit and Commit still rejects the commit
	// (as the trigger would on a backend whose append waits for the bump).
	d := tx.s.d
	d.mu.Lock()
	if len(tx.commits) > 0 {
		if f := d.fences[p.info.Partition]; f > tx.running {
			d.mu.Unlock()
			tx.finish()
			return fmt.Errorf("memory: commit: fence %d above writer version %d: %w", f, tx.running, storage.ErrWriterFenced)
		}
	}
	tx.applyAdvances(d)
	p.mu.Lock()
	defer d.mu.Unlock()
	for table, m := range tx.rows {
		rows := p.rows[table]
		if rows == nil {
			rows = map[string]storage.RowRecord{}
			p.rows[table] = rows
		}
		for id, r := range m {
			if r == nil {
				delete(rows, id)
			} else {
				rows[id] = *r
			}
		}
	}
	for table, m := range tx.tombs {
		tombs := p.tombs[table]
		if tombs == nil {
			tombs = map[string]int64{}
			p.tombs[table] = tombs
		}
		for id, seq := range m {
			if seq == 0 {
				delete(tombs, id)
			} else {
				tombs[id] = seq
			}
		}
	}
	for _, c := range tx.commits {
		p.commits = append(p.commits, c) // p.commits[i].Seq == p.info.HorizonSeq+i+1
		p.index(c)
	}
	for k, v := range tx.idem {
		p.idem[k] = v
	}
	p.info.MaxCommitSeq = tx.info.MaxCommitSeq
	tx.publishClients(p)
	p.mu.Unlock()
	d.reactions.publish(p.info.Partition, tx.reactions)
	tx.publishBlobs()
	tx.finish()
	return nil
}

// index adds c to the scope index; p.mu must be held for writing.
func (p *part) index(c storage.CommitRecord) {
	for _, ch := range c.Changes {
		m := p.scopeIdx[ch.Table]
		if m == nil {
			m = map[string][]int64{}
			p.scopeIdx[ch.Table] = m
		}
		for v, val := range ch.Scopes {
			k := v + "\x00" + val
			if s := m[k]; len(s) == 0 || s[len(s)-1] != c.Seq {
				m[k] = append(s, c.Seq)
			}
		}
	}
}

// Rollback discards the staged writes and releases the lock; it is a
// no-op once the transaction finished.
func (tx *pushTx) Rollback(ctx context.Context) error {
	if tx.done {
		return nil
	}
	tx.finish()
	return nil
}

func (tx *pushTx) finish() {
	tx.done = true
	tx.releaseBlobs()
	tx.rows, tx.commits, tx.idem, tx.undo, tx.advances, tx.clients = nil, nil, nil, nil, nil, nil
	tx.p.release()
}

// ScanRows answers storage.PushTx: committed rows overlaid with this
// transaction's staged writes, in primary-key order (storage/keys.go).
func (tx *pushTx) ScanRows(ctx context.Context, q storage.RowQuery) ([]storage.RowRecord, error) {
	if err := tx.check(ctx, "scan rows"); err != nil {
		return nil, err
	}
	st, err := tx.table(q.Table)
	if err != nil {
		return nil, err
	}
	return tx.scan(st, q.AfterRowID, q.Limit, func(r storage.RowRecord) bool { return rowMatches(st, r.Values, q.Scopes) }), nil
}

// ScanByColumn returns the rows of q.Table whose column q.Column equals
// q.Value, as this transaction sees them, in primary-key order.
func (tx *pushTx) ScanByColumn(ctx context.Context, q storage.ColumnQuery) ([]storage.RowRecord, error) {
	if err := tx.check(ctx, "scan by column"); err != nil {
		return nil, err
	}
	st, err := tx.table(q.Table)
	if err != nil {
		return nil, err
	}
	if err := q.Check(st); err != nil {
		return nil, fmt.Errorf("memory: %w", err)
	}
	return tx.scan(st, q.AfterRowID, q.Limit, func(r storage.RowRecord) bool {
		return q.Column < len(r.Values) && valueEqual(r.Values[q.Column], q.Value)
	}), nil
}

// scan returns copies of the rows of st this transaction sees that match,
// in primary-key order (st.CompareRowIDs, the key's native order),
// strictly after after (when set), at most limit (0: all).
func (tx *pushTx) scan(st *schema.Table, after *string, limit int, match func(storage.RowRecord) bool) []storage.RowRecord {
	staged := tx.rows[st.Name]
	var out []storage.RowRecord
	keep := func(id string, r storage.RowRecord) {
		if (after == nil || st.CompareRowIDs(id, *after) > 0) && match(r) {
			out = append(out, copyRecord(r, len(st.Columns)))
		}
	}
	tx.p.mu.RLock()
	for id, r := range tx.p.rows[st.Name] {
		if _, over := staged[id]; !over {
			keep(id, r)
		}
	}
	tx.p.mu.RUnlock()
	for id, r := range staged {
		if r != nil {
			keep(id, *r)
		}
	}
	slices.SortFunc(out, func(a, b storage.RowRecord) int { return st.CompareRowIDs(a.RowID, b.RowID) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// Query answers storage.PushTx: the in-memory store runs no SQL, so a
// registered query fails with storage.ErrTxQueryUnsupported (after
// Commit or Rollback, with storage.ErrTxDone).
func (tx *pushTx) Query(ctx context.Context, _ storage.Query) (storage.QueryResult, error) {
	if err := tx.check(ctx, "query"); err != nil {
		return storage.QueryResult{}, err
	}
	return storage.QueryResult{}, fmt.Errorf("memory: query: %w", storage.ErrTxQueryUnsupported)
}
