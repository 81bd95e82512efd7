package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
)

// Delete tombstones (SPEC §2.2) and column versions.
//
// sync_tombstones holds one row per deleted row: (partition, table_name,
// row_id) -> the commit seq of the delete. DeleteRow writes it in the
// statement that deletes the row (delTomb), ClearTombstone deletes it,
// pruning deletes those at or below the new horizon through
// sync_tombstones_by_seq (partition, commit_seq), and partition snapshots
// copy them. All of it runs in the push transaction, so savepoints and
// rollback undo it with the row writes.

// ensureTombstones creates sync_tombstones and its pruning index when
// missing, checking the catalog first so a no-op EnsureSchema takes no
// lock on the table.
func (s *Store) ensureTombstones(ctx context.Context, tx pgx.Tx) error {
	idx := qualify(s.schema, "sync_tombstones_by_seq")
	var hasTable, hasIdx bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL`, s.q.tombstones, idx).Scan(&hasTable, &hasIdx); err != nil {
		return err
	}
	if !hasTable {
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.q.tombstones+` (
	partition text COLLATE "C" NOT NULL,
	table_name text COLLATE "C" NOT NULL,
	row_id text COLLATE "C" NOT NULL,
	commit_seq bigint NOT NULL,
	PRIMARY KEY (partition, table_name, row_id)
)`); err != nil {
			return fmt.Errorf("create sync_tombstones: %w", err)
		}
	}
	if !hasIdx {
		if _, err := tx.Exec(ctx, `CREATE INDEX IF NOT EXISTS sync_tombstones_by_seq ON `+s.q.tombstones+` (partition, commit_seq)`); err != nil {
			return fmt.Errorf("create sync_tombstones_by_seq: %w", err)
		}
	}
	return nil
}

// bindColumnVersions is the bytea argument of a row's column versions:
// NULL for nil, else their bytes (pgx sends a non-nil empty slice as an
// empty bytea, which reads back non-nil).
func bindColumnVersions(cv storage.ColumnVersions) any {
	if cv == nil {
		return nil
	}
	return []byte(cv)
}

// tombKnowledge is what a push transaction knows about tombstones without
// asking the database: facts read by Prefetch or Tombstone, and the
// absence ClearTombstone leaves. A fact holds until a write of its row's
// tombstone (DeleteRow drops it) or a RollbackToSavepoint that could undo
// a tombstone write made before the fact was learnt (rollback drops those:
// a fact learnt after writes sent since the savepoint may describe a
// state the rollback undoes). So Tombstone answers from it and
// ClearTombstone of a row known to have none sends nothing: an insert of
// a new row after Prefetch costs no round trip for its tombstone.
type tombKnowledge struct {
	facts map[prefetchedRow]tombFact
	// writes counts the tombstone writes sent (DeleteRow, ClearTombstone);
	// spWrites is its value at the last Savepoint.
	writes, spWrites int64
}

// tombFact is one known tombstone state.
type tombFact struct {
	seq    int64 // commit seq of the tombstone, 0 for none
	writes int64 // tombKnowledge.writes when it was learnt
}

// get returns the known state of k.
func (kn *tombKnowledge) get(k prefetchedRow) (int64, bool) {
	f, ok := kn.facts[k]
	return f.seq, ok
}

// set records that k's tombstone is seq (0: none) now.
func (kn *tombKnowledge) set(k prefetchedRow, seq int64) {
	if kn.facts == nil {
		kn.facts = map[prefetchedRow]tombFact{}
	}
	kn.facts[k] = tombFact{seq: seq, writes: kn.writes}
}

// learn records Prefetch's answers.
func (kn *tombKnowledge) learn(found map[prefetchedRow]int64) {
	for k, seq := range found {
		kn.set(k, seq)
	}
}

// write forgets k before a statement that writes its tombstone is sent.
func (kn *tombKnowledge) write(k prefetchedRow) {
	delete(kn.facts, k)
	kn.writes++
}

func (kn *tombKnowledge) savepoint() { kn.spWrites = kn.writes }

// rollback forgets every fact learnt after a tombstone write that
// RollbackToSavepoint undid.
func (kn *tombKnowledge) rollback() {
	for k, f := range kn.facts {
		if f.writes > kn.spWrites {
			delete(kn.facts, k)
		}
	}
}

// queueTombstones queues on b the read of the tombstones of the rows in
// byTable (table name -> row ids, Storable), for Prefetch; the returned
// map is filled when b has run: every queried row, 0 when it has none.
func (tx *pushTx) queueTombstones(b *pgx.Batch, byTable map[string][]string) map[prefetchedRow]int64 {
	var tables, ids []string
	found := map[prefetchedRow]int64{}
	for name, rows := range byTable {
		for _, id := range rows {
			if storage.CheckTombstone(tx.partition, name, id) != nil {
				continue
			}
			tables, ids = append(tables, name), append(ids, id)
			found[prefetchedRow{name, id}] = 0
		}
	}
	if len(ids) == 0 {
		return nil
	}
	b.Queue(tx.s.q.prefetchTombs, tx.partition, tables, ids).Query(func(rs pgx.Rows) error {
		for rs.Next() {
			var k prefetchedRow
			var seq int64
			if err := rs.Scan(&k.table, &k.rowID, &seq); err != nil {
				return err
			}
			found[k] = seq
		}
		return rs.Err()
	})
	return found
}

// Tombstone returns the row's tombstone seq as this transaction sees it:
// from what the transaction knows (Prefetch, an earlier read, its own
// ClearTombstone), else from one primary-key read.
func (tx *pushTx) Tombstone(ctx context.Context, t *schema.Table, rowID string) (int64, error) {
	if err := tx.check(); err != nil {
		return 0, err
	}
	ts, err := tx.s.table(t.Name)
	if err != nil {
		return 0, err
	}
	if storage.CheckTombstoneOf(tx.partition, ts.t, rowID) != nil {
		return 0, nil
	}
	k := prefetchedRow{t.Name, rowID}
	if seq, ok := tx.tombs.get(k); ok {
		return seq, nil
	}
	var seq int64
	err = tx.conn.QueryRow(ctx, tx.s.q.getTomb, tx.partition, ts.t.Name, rowID).Scan(&seq)
	if errors.Is(err, pgx.ErrNoRows) {
		seq, err = 0, nil
	}
	if err != nil {
		return 0, classify("Tombstone", err)
	}
	tx.tombs.set(k, seq)
	return seq, nil
}

// ClearTombstone deletes the row's tombstone, after a pending savepoint;
// when the transaction knows the row has none it sends nothing.
func (tx *pushTx) ClearTombstone(ctx context.Context, t *schema.Table, rowID string) error {
	if err := tx.check(); err != nil {
		return err
	}
	ts, err := tx.s.table(t.Name)
	if err != nil {
		return err
	}
	if storage.CheckTombstoneOf(tx.partition, ts.t, rowID) != nil {
		return nil
	}
	k := prefetchedRow{t.Name, rowID}
	if seq, ok := tx.tombs.get(k); ok && seq == 0 {
		return nil
	}
	tx.tombs.write(k)
	if err := tx.exec(ctx, tx.s.q.clearTomb, tx.partition, ts.t.Name, rowID); err != nil {
		return classify("ClearTombstone", err)
	}
	tx.tombs.set(k, 0)
	return nil
}
