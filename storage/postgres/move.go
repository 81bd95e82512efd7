package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/storage"
)

// Moving a partition between stores (storage/postgres/homes, "Past one
// PostgreSQL" in docs/cluster.md).
//
// The move guard. Trigger sync_move_guard refuses an INSERT, UPDATE or
// DELETE of a partition named in table sync_home_moved (the partition's
// move marker: it is moving out of this store, moving in and not
// switched yet, or gone) with SQLSTATE movedSQLState, classified as
// storage.ErrPartitionMoved. SetMoveMarker inserts the marker under the
// partition's registry row lock (FOR UPDATE), so the marker splits the
// partition's writes in two: those that held a lock on that row when it
// came committed before it (the mover waited for them), and every later
// one sees the marker and is refused, in the transaction of the write: no
// write reaches a store after its marker (the fence a stale cached
// directory entry meets). The mover's own transactions pass
// (SET LOCAL synclane.mover = 'on').
//
// The trigger is on the tables some write of which every writing
// transaction makes (moveTable.guard): the registry, and the tables
// written outside push transactions (clients, checkpoints, writer fence,
// leases), where the trigger first takes a KEY SHARE lock on the registry
// row (held to the end of the write's transaction: SetMoveMarker's FOR
// UPDATE waits for it). Every push writes the registry row under the row
// lock its BeginPush took (max_commit_seq when it appends, an update that
// changes nothing when it only records rejections: log.go), and so do
// claims, rotations and prunes. The log, scope index, idempotency
// records, tombstones, blob references and row tables, written only by
// those transactions, carry no trigger: their refusal comes from the
// registry write, which rolls the whole transaction back. (A trigger on
// every row of them cost 190 µs of database CPU per commit, on the
// idempotency records alone 31 µs: BenchmarkPushTxMoveGuard.)
//
// Reactions are copied but not guarded: their delivery claims span
// partitions, and a claim of the source's copy after the switch only
// delivers a reaction again (delivery is at least once).

// movedSQLState is the custom SQLSTATE of the move guard.
const movedSQLState = "SL002"

// MovedTable is the move markers' table, in every home's schema.
const MovedTable = "sync_home_moved"

// Move marker states (sync_home_moved.state).
const (
	// MarkIncoming marks the target's copy of a partition being moved in.
	MarkIncoming = "incoming"
	// MarkMoved marks a partition that left (or is leaving) the store.
	MarkMoved = "moved"
)

type moveKind int

const (
	kindWhole moveKind = iota // copied whole at the switch
	kindSeq                   // log rows: copied by seq
	kindIdem                  // idempotency records
	kindKeyed                 // (table_name, row_id) keyed: tombstones, blob references
	kindRow                   // a row table
)

// moveTable is one table a move copies.
type moveTable struct {
	name  string // unqualified
	ident string // qualified, quoted
	pcol  string // the partition column
	kind  moveKind
	ts    *tableSQL // kindRow
	// guard is the table's move guard: "" none, "lock" (KEY SHARE on the
	// registry row first) or "nolock" (written under the row lock only).
	guard string
}

func (t moveTable) copyIdent() pgx.Identifier {
	parts := strings.Split(t.ident, ".")
	out := make(pgx.Identifier, len(parts))
	for i, p := range parts {
		out[i] = strings.ReplaceAll(strings.Trim(p, `"`), `""`, `"`)
	}
	return out
}

// moveTables lists every table keyed by partition: the system tables of
// schema.go, tombstones, blob references, leases, reactions, and one per
// row table ensured by EnsureSchema.
func (s *Store) moveTables() []moveTable {
	out := []moveTable{
		{name: "sync_partitions", ident: s.q.partitions, pcol: "partition", kind: kindWhole, guard: "nolock"},
		{name: "sync_commits", ident: s.q.commits, pcol: "partition", kind: kindSeq},
		{name: "sync_changes", ident: s.q.changes, pcol: "partition", kind: kindSeq},
		{name: "sync_change_scopes", ident: s.q.changeScopes, pcol: "partition", kind: kindSeq},
		{name: "sync_idempotency", ident: s.q.idempotency, pcol: "partition", kind: kindIdem},
		{name: "sync_clients", ident: s.q.clients, pcol: "partition", kind: kindWhole, guard: "lock"},
		{name: "sync_backfill_checkpoints", ident: s.q.checkpoints, pcol: "partition", kind: kindWhole, guard: "lock"},
		{name: "sync_writer_fence", ident: s.q.fence, pcol: "partition", kind: kindWhole, guard: "lock"},
		{name: "sync_tombstones", ident: s.q.tombstones, pcol: "partition", kind: kindKeyed},
		{name: "sync_blob_refs", ident: s.q.blobRefs(), pcol: "partition", kind: kindKeyed},
		{name: "sync_leases", ident: s.leaseTable(), pcol: "partition", kind: kindWhole, guard: "lock"},
		{name: "sync_reactions", ident: s.reactionsTable(), pcol: "partition", kind: kindWhole},
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for name, t := range s.tables {
		out = append(out, moveTable{name: name, ident: t.ident, pcol: "partition_id", kind: kindRow, ts: t})
	}
	return out
}

func (s *Store) movedTable() string { return qualify(s.schema, MovedTable) }

// EnsureMoveGuard creates the move markers' table, the guard functions
// and the guard trigger of every guarded table of moveTables that lacks
// it. It
// runs after EnsureSchema; processes calling it at once take turns (an
// advisory lock). Creating a trigger briefly blocks the table's writers.
func (s *Store) EnsureMoveGuard(ctx context.Context) error {
	if err := s.ready(); err != nil {
		return err
	}
	moved := s.movedTable()
	fn := func(col string) string { return qualify(s.schema, "sync_move_guard_"+col) }
	body := func(col string) string {
		return `CREATE OR REPLACE FUNCTION ` + fn(col) + `() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE p text;
BEGIN
	IF current_setting('synclane.mover', true) = 'on' THEN
		IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
		RETURN NEW;
	END IF;
	IF TG_OP = 'DELETE' THEN p := OLD.` + col + `; ELSE p := NEW.` + col + `; END IF;
	IF TG_ARGV[0] = 'lock' THEN
		PERFORM 1 FROM ` + s.q.partitions + ` WHERE partition = p FOR KEY SHARE;
	END IF;
	IF EXISTS (SELECT 1 FROM ` + moved + ` m WHERE m.partition = p) THEN
		RAISE EXCEPTION USING ERRCODE = '` + movedSQLState + `', MESSAGE = 'sync.storage.partition_moved';
	END IF;
	IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
	RETURN NEW;
END $fn$`
	}
	tables := s.moveTables()
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('synclane.move_guard:' || $1, 0))`, moved); err != nil {
			return err
		}
		var have bool
		if err := tx.QueryRow(ctx, `SELECT to_regprocedure($1) IS NOT NULL AND to_regprocedure($2) IS NOT NULL AND to_regclass($3) IS NOT NULL`,
			fn("partition")+"()", fn("partition_id")+"()", moved).Scan(&have); err != nil {
			return err
		}
		if !have {
			for _, stmt := range []string{`CREATE TABLE IF NOT EXISTS ` + moved + ` (
	partition text COLLATE "C" PRIMARY KEY,
	state text NOT NULL,
	peer text NOT NULL,
	updated_at_ms bigint NOT NULL
)`, body("partition"), body("partition_id")} {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return fmt.Errorf("%s: %w", stmt, err)
				}
			}
		}
		for _, t := range tables {
			var has bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgname = 'sync_move_guard')`, t.ident).Scan(&has); err != nil {
				return err
			}
			if has || t.guard == "" {
				continue
			}
			stmt := `CREATE TRIGGER sync_move_guard BEFORE INSERT OR UPDATE OR DELETE ON ` + t.ident +
				` FOR EACH ROW EXECUTE FUNCTION ` + fn(t.pcol) + `('` + t.guard + `')`
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("%s: %w", stmt, err)
			}
		}
		return nil
	})
	return classify("EnsureMoveGuard", err)
}

// SetMoveMarker marks partition (state MarkIncoming or MarkMoved, peer the
// other home's name) in one transaction that first takes the partition's
// registry row FOR UPDATE: it waits for every write holding the row or
// the guard's share lock, and every later write of the partition is
// refused (storage.ErrPartitionMoved).
func (s *Store) SetMoveMarker(ctx context.Context, partition, state, peer string) error {
	if err := s.ready(); err != nil {
		return err
	}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM `+s.q.partitions+` WHERE partition = $1 FOR UPDATE`, partition); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+s.movedTable()+` (partition, state, peer, updated_at_ms) VALUES ($1, $2, $3, $4)
ON CONFLICT (partition) DO UPDATE SET state = EXCLUDED.state, peer = EXCLUDED.peer, updated_at_ms = EXCLUDED.updated_at_ms`,
			partition, state, peer, time.Now().UnixMilli())
		return err
	})
	return classify("SetMoveMarker", err)
}

// ClearMoveMarker removes partition's move marker: its writes are taken
// again.
func (s *Store) ClearMoveMarker(ctx context.Context, partition string) error {
	if err := s.ready(); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `DELETE FROM `+s.movedTable()+` WHERE partition = $1`, partition)
	return classify("ClearMoveMarker", err)
}

// MoveMarker returns partition's move marker (ok false: none).
func (s *Store) MoveMarker(ctx context.Context, partition string) (state, peer string, ok bool, err error) {
	if err := s.ready(); err != nil {
		return "", "", false, err
	}
	err = s.pool.QueryRow(ctx, `SELECT state, peer FROM `+s.movedTable()+` WHERE partition = $1`, partition).Scan(&state, &peer)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, classify("MoveMarker", err)
	}
	return state, peer, true, nil
}

// moverTx runs fn in a transaction of s that the move guard lets through.
func (s *Store) moverTx(ctx context.Context, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, s.pool, opts, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL synclane.mover = 'on'`); err != nil {
			return err
		}
		return fn(tx)
	})
}

// DropPartitionCopy deletes every row of partition from every table of
// moveTables, in one transaction the move guard lets through; the move
// marker stays.
func (s *Store) DropPartitionCopy(ctx context.Context, partition string) error {
	if err := s.ready(); err != nil {
		return err
	}
	err := s.moverTx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) error {
		for _, t := range s.moveTables() {
			if _, err := tx.Exec(ctx, `DELETE FROM `+t.ident+` WHERE `+t.pcol+` = $1`, partition); err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
		}
		return nil
	})
	return classify("DropPartitionCopy", err)
}

// copyRows copies the rows src selects (SELECT * FROM t.src WHERE
// where) into t.dst in dst, sync_reactions' id excepted (renumbered by
// dst).
func copyRows(ctx context.Context, src, dst pgx.Tx, t tablePair, where string, args ...any) (int64, error) {
	rows, err := src.Query(ctx, `SELECT * FROM `+t.src.ident+` WHERE `+where, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var cols []string
	skip := -1
	for i, f := range rows.FieldDescriptions() {
		if t.src.name == "sync_reactions" && f.Name == "id" {
			skip = i
			continue
		}
		cols = append(cols, f.Name)
	}
	n, err := dst.CopyFrom(ctx, t.dst.copyIdent(), cols, pgx.CopyFromFunc(func() ([]any, error) {
		if !rows.Next() {
			return nil, rows.Err()
		}
		v, err := rows.Values()
		if err != nil || skip < 0 {
			return v, err
		}
		return append(v[:skip:skip], v[skip+1:]...), nil
	}))
	if err != nil {
		return n, err
	}
	return n, rows.Err()
}

// tablePair is one table in the source and in the target store.
type tablePair struct{ src, dst moveTable }

// pairTables pairs src's tables with dst's, failing when dst lacks one
// (its EnsureSchema did not run with the same schema).
func pairTables(src, dst *Store) ([]tablePair, error) {
	by := map[string]moveTable{}
	for _, t := range dst.moveTables() {
		by[t.name] = t
	}
	var out []tablePair
	for _, t := range src.moveTables() {
		d, ok := by[t.name]
		if !ok {
			return nil, fmt.Errorf("postgres: move: table %s is missing in the target (run its EnsureSchema with the same schema)", t.name)
		}
		out = append(out, tablePair{src: t, dst: d})
	}
	return out, nil
}

// CopyStats counts what one copy step moved.
type CopyStats struct {
	// MaxSeq is the source's max_commit_seq the copy reached.
	MaxSeq int64
	// Rows counts the rows written to the target.
	Rows int64
}

// readMax reads partition's max_commit_seq in tx (0 when absent).
func (s *Store) readMax(ctx context.Context, tx pgx.Tx, partition string) (int64, error) {
	var m int64
	err := tx.QueryRow(ctx, `SELECT max_commit_seq FROM `+s.q.partitions+` WHERE partition = $1`, partition).Scan(&m)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return m, err
}

// CopyPartition copies every row of partition from src into dst, from one
// snapshot of src (a REPEATABLE READ transaction), while src keeps
// serving; in dst, in one transaction, it first deletes what dst held of
// partition and marks it MarkIncoming (peer: from), so the copy takes no
// write but the mover's until the switch. The stats' MaxSeq is the
// snapshot's max_commit_seq, where CopyPartitionTail goes on.
func CopyPartition(ctx context.Context, src, dst *Store, partition, from string) (CopyStats, error) {
	var st CopyStats
	if err := src.ready(); err != nil {
		return st, err
	}
	if err := dst.ready(); err != nil {
		return st, err
	}
	pairs, err := pairTables(src, dst)
	if err != nil {
		return st, err
	}
	err = pgx.BeginTxFunc(ctx, src.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(stx pgx.Tx) error {
		m, err := src.readMax(ctx, stx, partition)
		if err != nil {
			return err
		}
		st.MaxSeq = m
		return dst.moverTx(ctx, pgx.TxOptions{}, func(dtx pgx.Tx) error {
			if _, err := dtx.Exec(ctx, `INSERT INTO `+dst.movedTable()+` (partition, state, peer, updated_at_ms) VALUES ($1, $2, $3, $4)
ON CONFLICT (partition) DO UPDATE SET state = EXCLUDED.state, peer = EXCLUDED.peer, updated_at_ms = EXCLUDED.updated_at_ms`,
				partition, MarkIncoming, from, time.Now().UnixMilli()); err != nil {
				return err
			}
			for _, t := range dst.moveTables() {
				if _, err := dtx.Exec(ctx, `DELETE FROM `+t.ident+` WHERE `+t.pcol+` = $1`, partition); err != nil {
					return fmt.Errorf("%s: %w", t.name, err)
				}
			}
			for _, t := range pairs {
				n, err := copyRows(ctx, stx, dtx, t, t.src.pcol+` = $1`, partition)
				if err != nil {
					return fmt.Errorf("copy %s: %w", t.src.name, err)
				}
				st.Rows += n
			}
			return nil
		})
	})
	return st, classify("CopyPartition", err)
}

// CopyPartitionTail brings dst's copy of partition (made by CopyPartition,
// complete up to seq after) up to date with src, from one snapshot of src:
// the commits, changes and scope entries above after, the idempotency
// records written since, and the current state (row, tombstone, blob
// references) of every row those commits touched. With whole set it also
// replaces the tables copied whole (the registry row, clients, checkpoints,
// writer fence, leases, reactions): the switch step's last copy, taken
// once src refuses the partition's writes (SetMoveMarker), after which dst
// equals src. It runs in one transaction of dst.
func CopyPartitionTail(ctx context.Context, src, dst *Store, partition string, after int64, whole bool) (CopyStats, error) {
	var st CopyStats
	if err := src.ready(); err != nil {
		return st, err
	}
	if err := dst.ready(); err != nil {
		return st, err
	}
	pairs, err := pairTables(src, dst)
	if err != nil {
		return st, err
	}
	err = pgx.BeginTxFunc(ctx, src.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(stx pgx.Tx) error {
		m, err := src.readMax(ctx, stx, partition)
		if err != nil {
			return err
		}
		st.MaxSeq = m
		touched := map[string][]string{}
		rows, err := stx.Query(ctx, `SELECT DISTINCT table_name, row_id FROM `+src.q.changes+` WHERE partition = $1 AND seq > $2`, partition, after)
		if err != nil {
			return err
		}
		for rows.Next() {
			var tn, id string
			if err := rows.Scan(&tn, &id); err != nil {
				rows.Close()
				return err
			}
			touched[tn] = append(touched[tn], id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		return dst.moverTx(ctx, pgx.TxOptions{}, func(dtx pgx.Tx) error {
			add := func(n int64, err error) error { st.Rows += n; return err }
			for _, t := range pairs {
				d := t.dst.ident
				var err error
				switch t.src.kind {
				case kindWhole:
					if !whole {
						continue
					}
					if _, err = dtx.Exec(ctx, `DELETE FROM `+d+` WHERE partition = $1`, partition); err == nil {
						err = add(copyRows(ctx, stx, dtx, t, `partition = $1`, partition))
					}
				case kindSeq:
					if _, err = dtx.Exec(ctx, `DELETE FROM `+d+` WHERE partition = $1 AND seq > $2`, partition, after); err == nil {
						err = add(copyRows(ctx, stx, dtx, t, `partition = $1 AND seq > $2`, partition, after))
					}
				case kindIdem:
					err = copyIdem(ctx, stx, dtx, t, partition, after, &st)
				case kindKeyed:
					for tn, ids := range touched {
						if _, err = dtx.Exec(ctx, `DELETE FROM `+d+` WHERE partition = $1 AND table_name = $2 AND row_id = ANY($3::text[])`, partition, tn, ids); err != nil {
							break
						}
						if err = add(copyRows(ctx, stx, dtx, t, `partition = $1 AND table_name = $2 AND row_id = ANY($3::text[])`, partition, tn, ids)); err != nil {
							break
						}
					}
				case kindRow:
					ids := touched[t.src.ts.t.Name]
					if len(ids) == 0 {
						continue
					}
					keys, typ := moveKeys(t.src, ids)
					where := `partition_id = $1 AND ` + t.src.ts.cols[t.src.ts.t.PK] + ` = ANY($2::` + typ + `[])`
					if _, err = dtx.Exec(ctx, `DELETE FROM `+d+` WHERE `+where, partition, keys); err == nil {
						err = add(copyRows(ctx, stx, dtx, t, where, partition, keys))
					}
				}
				if err != nil {
					return fmt.Errorf("copy %s: %w", t.src.name, err)
				}
			}
			return nil
		})
	})
	return st, classify("CopyPartitionTail", err)
}

// copyIdem replaces in dst the idempotency records src wrote since seq
// after (a record's log_seq is the log position when it was written;
// accepted ones carry their commit's seq).
func copyIdem(ctx context.Context, stx, dtx pgx.Tx, t tablePair, partition string, after int64, st *CopyStats) error {
	const where = `partition = $1 AND (log_seq >= $2 OR commit_seq > $2)`
	rows, err := stx.Query(ctx, `SELECT client_id, client_commit_id FROM `+t.src.ident+` WHERE `+where, partition, after)
	if err != nil {
		return err
	}
	var cs, ids []string
	for rows.Next() {
		var c, id string
		if err := rows.Scan(&c, &id); err != nil {
			rows.Close()
			return err
		}
		cs, ids = append(cs, c), append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(cs) == 0 {
		return err
	}
	if _, err := dtx.Exec(ctx, `DELETE FROM `+t.dst.ident+` WHERE partition = $1 AND (client_id, client_commit_id) IN (SELECT * FROM unnest($2::text[], $3::text[]))`,
		partition, cs, ids); err != nil {
		return err
	}
	n, err := copyRows(ctx, stx, dtx, t, where, partition, after)
	st.Rows += n
	return err
}

// moveKeys converts row ids of t to an array of its key column's type
// (keyArray) and that type's name.
func moveKeys(t moveTable, ids []string) (any, string) {
	a := newKeyArray(t.ts.t)
	for _, id := range ids {
		a.add(id)
	}
	return a.arg(), pgType(t.ts.t.Columns[t.ts.t.PK].Type)
}

// IsPartitionMoved reports whether err is the move guard's refusal.
func IsPartitionMoved(err error) bool { return errors.Is(err, storage.ErrPartitionMoved) }
