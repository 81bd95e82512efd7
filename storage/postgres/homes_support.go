package postgres

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/synclane/synclane/storage"
)

// What a router over several stores (storage/postgres/homes: partitions
// spread over several PostgreSQL databases) needs from each of them and
// cannot express through the storage roles: the serve gate with a gate
// generation, the pending checkpoints alone, and the blob metadata steps
// of a blob claimed by a push of another database. A Store used alone
// never calls them.

// GateGenerationTable is the one-row table of a store's gate generation
// (in the store's schema): a token that a router over several databases
// replaces in every database after each change of which checkpoints are
// pending, so a gate read that finds the generation it last read the
// other databases under may reuse that reading.
const GateGenerationTable = "sync_gate_generation"

// EnsureGateGeneration creates the gate generation table when missing.
// A router calls it on every store before their gates are read with
// ReadServeGateGen.
// Processes starting at once create it one at a time (an advisory lock:
// concurrent CREATE TABLE IF NOT EXISTS of one table can fail on the
// catalog's unique index).
func (s *Store) EnsureGateGeneration(ctx context.Context) error {
	t := qualify(s.schema, GateGenerationTable)
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('synclane.gate_generation:' || $1, 0))`, t); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+t+` (
	id smallint PRIMARY KEY CHECK (id = 1),
	gen text NOT NULL
)`)
		return err
	})
	return classify("EnsureGateGeneration", err)
}

// SetGateGeneration stores gen as the store's gate generation.
func (s *Store) SetGateGeneration(ctx context.Context, gen string) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO `+qualify(s.schema, GateGenerationTable)+` (id, gen) VALUES (1, $1)
ON CONFLICT (id) DO UPDATE SET gen = EXCLUDED.gen`, gen)
	return classify("SetGateGeneration", err)
}

// gateGenSQL is gateSQL with the gate generation as a seventh column, read
// in the same statement (one snapshot).
func (s *Store) gateGenSQL() string {
	return `SELECT g.*, coalesce((SELECT gen FROM ` + qualify(s.schema, GateGenerationTable) + ` WHERE id = 1), '') FROM (` + s.gateSQL() + `) g`
}

// readGateGen is readGate with the gate generation.
func (s *Store) readGateGen(ctx context.Context, q queryer, partition string, running int32) (storage.ServeGate, string, error) {
	var g storage.ServeGate
	var parts, names []string
	var gen string
	if err := q.QueryRow(ctx, s.gateGenSQL(), partition, running).Scan(&g.StoredSchemaVersion, &g.LogEpoch, &g.HorizonSeq, &g.OwnerGeneration, &parts, &names, &gen); err != nil {
		return g, "", err
	}
	for i := range parts {
		g.Pending = append(g.Pending, storage.CheckpointRef{Partition: parts[i], Name: names[i]})
	}
	return g, gen, nil
}

// ReadServeGateGen is ReadServeGate with the store's gate generation, read
// in the same statement. EnsureGateGeneration must have run.
func (s *Store) ReadServeGateGen(ctx context.Context, partition string, running int32) (storage.ServeGate, string, error) {
	if err := s.ready(); err != nil {
		return storage.ServeGate{}, "", err
	}
	var g storage.ServeGate
	var gen string
	err := retry(ctx, "ReadServeGate", func() error {
		var err error
		g, gen, err = s.readGateGen(ctx, s.pool, partition, running)
		return err
	})
	return g, gen, err
}

// ReadServeGateGen is PushTx.ReadServeGate with the store's gate
// generation, read in the same statement under the partition lock.
func (tx *pushTx) ReadServeGateGen(ctx context.Context, running int32) (storage.ServeGate, string, error) {
	if err := tx.check(); err != nil {
		return storage.ServeGate{}, "", err
	}
	g, gen, err := tx.s.readGateGen(ctx, tx.conn, tx.partition, running)
	return g, gen, classify("ReadServeGate", err)
}

// ReadPending returns the store's pending checkpoints (not activated) at
// schema version running, ordered by (partition, name).
func (s *Store) ReadPending(ctx context.Context, running int32) ([]storage.CheckpointRef, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	var out []storage.CheckpointRef
	err := retry(ctx, "ReadPending", func() error {
		rows, err := s.pool.Query(ctx, `SELECT partition, name FROM `+s.q.checkpoints+` WHERE schema_version = $1 AND state <> 'activated' ORDER BY partition, name`, running)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.CheckpointRef, error) {
			var ref storage.CheckpointRef
			err := r.Scan(&ref.Partition, &ref.Name)
			return ref, err
		})
		return err
	})
	return out, err
}

// QueryGen is Query whose check also receives the store's gate
// generation, read with the gate in the query's snapshot. EnsureGateGeneration
// must have run.
func (s *Store) QueryGen(ctx context.Context, partition string, running int32, q storage.Query, check func(g storage.ServeGate, gen string) error) (storage.QueryResult, error) {
	var res storage.QueryResult
	if err := s.ready(); err != nil {
		return res, err
	}
	text, args, err := s.renderQuery(q, partition)
	if err != nil {
		return res, err
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return res, classify("Query", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	g, gen, err := s.readGateGen(ctx, tx, partition, running)
	if err != nil {
		return res, classify("Query", err)
	}
	if err := check(g, gen); err != nil {
		return res, err
	}
	err = tx.QueryRow(ctx, `SELECT max_commit_seq FROM `+s.q.partitions+` WHERE partition = $1`, partition).Scan(&res.MaxCommitSeq)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return res, classify("Query", err)
	}
	out, err := readQueryRows(tx.Query(ctx, text, args...))(q.MaxRows)
	if err != nil {
		return storage.QueryResult{}, err
	}
	out.MaxCommitSeq = res.MaxCommitSeq
	return out, nil
}

// TouchPresentBlob is PushTx.ClaimBlob outside a push, in a statement of
// its own: it touches blob id if present (state 1) and reports whether it
// was. A router claims in the database holding the blob metadata a blob
// that a push of another database references; the touch commits before
// the push does.
func (s *Store) TouchPresentBlob(ctx context.Context, id string, nowMs int64) (bool, error) {
	if err := s.ready(); err != nil {
		return false, err
	}
	if !storage.Storable(id) {
		return false, nil
	}
	tag, err := s.pool.Exec(ctx, `UPDATE `+s.q.blobs()+` SET touched_at_ms = GREATEST(touched_at_ms, $2) WHERE blob_id = $1 AND state = 1`, id, nowMs)
	if err != nil {
		return false, classify("ClaimBlob", err)
	}
	return tag.RowsAffected() == 1, nil
}

// ReferencedBlobs returns those of ids a row of the store references.
func (s *Store) ReferencedBlobs(ctx context.Context, ids []string) (map[string]bool, error) {
	out := map[string]bool{}
	if len(ids) == 0 {
		return out, nil
	}
	if err := s.ready(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT blob_id FROM `+s.q.blobRefs()+` WHERE blob_id = ANY($1)`, ids)
	if err != nil {
		return nil, classify("ReferencedBlobs", err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, classify("ReferencedBlobs", err)
	}
	for _, id := range got {
		out[id] = true
	}
	return out, nil
}

// orphanCandidateSQL selects the store's orphan candidates: deleting, or
// untouched since $1 and referenced by no row of this store.
func (s *Store) orphanCandidateSQL() string {
	return `SELECT b.blob_id FROM ` + s.q.blobs() + ` b WHERE (b.state = 2 OR (b.touched_at_ms < $1
	AND NOT EXISTS (SELECT 1 FROM ` + s.q.blobRefs() + ` r WHERE r.blob_id = b.blob_id)))`
}

// OrphanBlobCandidates returns up to limit orphan candidates of the store
// (deleting, or untouched since cutoffMs and referenced by no row of
// this store) with ids above after, in id order, without locking them.
func (s *Store) OrphanBlobCandidates(ctx context.Context, cutoffMs int64, after string, limit int) ([]string, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.orphanCandidateSQL()+` AND b.blob_id > $2 ORDER BY b.blob_id LIMIT $3`, cutoffMs, after, limit)
	if err != nil {
		return nil, classify("OrphanBlobCandidates", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids, classify("OrphanBlobCandidates", err)
}

// MarkOrphanBlobsChecked marks deleting (state 2) those of ids that are
// still orphan candidates and that elsewhere does not report referenced,
// in one transaction that holds the candidates' row locks (FOR UPDATE)
// while elsewhere reads the references held by other databases: a claim
// (TouchPresentBlob, PushTx.ClaimBlob) of one of them waits for the
// transaction and then finds it deleting, and a claim committed before
// it made the blob no candidate. It returns the ids marked.
func (s *Store) MarkOrphanBlobsChecked(ctx context.Context, cutoffMs int64, ids []string, elsewhere func(ctx context.Context, ids []string) (map[string]bool, error)) ([]string, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	var marked []string
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		marked = nil
		rows, err := tx.Query(ctx, s.orphanCandidateSQL()+` AND b.blob_id = ANY($2) ORDER BY b.blob_id FOR UPDATE OF b SKIP LOCKED`, cutoffMs, ids)
		if err != nil {
			return err
		}
		cands, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		used, err := elsewhere(ctx, cands)
		if err != nil {
			return err
		}
		var mark []string
		for _, id := range cands {
			if !used[id] {
				mark = append(mark, id)
			}
		}
		if len(mark) == 0 {
			return nil
		}
		rows, err = tx.Query(ctx, `UPDATE `+s.q.blobs()+` SET state = 2 WHERE blob_id = ANY($1) RETURNING blob_id`, mark)
		if err != nil {
			return err
		}
		marked, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return nil, classify("MarkOrphanBlobs", err)
	}
	return marked, nil
}

// IsUnreachable reports whether err (or one it wraps) says the database
// could not be reached or the connection to it was lost: a failed connect
// (refused, unknown host, authentication, a database that refuses
// connections), a connection exception (SQLSTATE class 08), an operator
// intervention that ended the session (57P01-57P03), or a lost
// connection. Statement timeouts, serialization failures and an
// exhausted server are not: the database is there.
func IsUnreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return len(pg.Code) == 5 && pg.Code[:2] == "08" || pg.Code == "57P01" || pg.Code == "57P02" || pg.Code == "57P03"
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// Ping checks that the store's database answers, on a pool connection.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return classify("ping", err)
	}
	return nil
}
