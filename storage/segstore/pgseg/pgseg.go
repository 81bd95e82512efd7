// Package pgseg is the segment store for processes sharing a PostgreSQL
// database: any of them serves a segment another built. It links pgx; the
// segment cache (package segstore) does not.
package pgseg

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/segstore"
)

// Store is the segstore.Store for --postgres: each segment's bytes are one
// row of synclane_segment_objects (keyed by id, stored once however many
// publications share them) and each publication one row of
// synclane_segment_publications (keyed by partition and build key), in
// the shared database, so any process can serve a segment another process
// built.
//
// An object's expires_at_ms is the latest expiry of the publications
// that stored or reused it: Put raises it in the same transaction that
// writes the publication, and the sweep deletes an object only by a
// condition on that row (expired), which PostgreSQL re-checks on the row
// a concurrent Put just raised. So two processes publishing the same
// bytes at once (two partitions, two scope digests) both keep their
// publication and the bytes, and the bytes go when the last publication
// has expired. A publication is live while unexpired and its object
// exists (eviction deletes the object).
//
// Table synclane_segments of versions before publications (one copy of
// the bytes per entry, no log epoch) is not read: its segments are
// published by nobody (a download answers sync.not_found, the next pull
// builds the page again); the sweep deletes its rows once expired, so it
// is empty one TTL after the upgrade (drop it then, once no process of an
// older version shares the database).
type Store struct {
	pool   *pgxpool.Pool
	legacy bool // table synclane_segments exists
}

const pgSchema = `CREATE TABLE IF NOT EXISTS synclane_segment_objects (
  id TEXT PRIMARY KEY, byte_length BIGINT NOT NULL, created_at_ms BIGINT NOT NULL,
  expires_at_ms BIGINT NOT NULL, data BYTEA NOT NULL);
CREATE INDEX IF NOT EXISTS synclane_segment_objects_by_expiry ON synclane_segment_objects (expires_at_ms);
CREATE TABLE IF NOT EXISTS synclane_segment_publications (
  partition TEXT NOT NULL, build_key TEXT NOT NULL, id TEXT NOT NULL,
  log_epoch TEXT NOT NULL, schema_version INTEGER NOT NULL,
  media_type SMALLINT NOT NULL, tbl TEXT NOT NULL, scope_digest TEXT NOT NULL,
  as_of BIGINT NOT NULL, byte_length BIGINT NOT NULL, row_count BIGINT NOT NULL,
  row_cursor TEXT, next_row_cursor TEXT, created_at_ms BIGINT NOT NULL,
  expires_at_ms BIGINT NOT NULL,
  PRIMARY KEY (partition, build_key));
CREATE INDEX IF NOT EXISTS synclane_segment_publications_by_id ON synclane_segment_publications (id, partition);
CREATE INDEX IF NOT EXISTS synclane_segment_publications_by_expiry ON synclane_segment_publications (expires_at_ms);
CREATE TABLE IF NOT EXISTS synclane_segment_forms (
  id TEXT NOT NULL REFERENCES synclane_segment_objects (id) ON DELETE CASCADE,
  enc TEXT NOT NULL, byte_length BIGINT NOT NULL, data BYTEA NOT NULL,
  PRIMARY KEY (id, enc))`

// Open creates the segment tables if needed and returns the Store.
// The pool stays the caller's to close.
func Open(ctx context.Context, pool *pgxpool.Pool) (*Store, error) {
	// Serialize concurrent CREATE ... IF NOT EXISTS of several processes.
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("segstore: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7368616)`); err != nil {
		return nil, fmt.Errorf("segstore: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, pgSchema); err != nil {
		return nil, fmt.Errorf("segstore: create tables: %w", err)
	}
	var legacy bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass('synclane_segments') IS NOT NULL`).Scan(&legacy); err != nil {
		return nil, fmt.Errorf("segstore: look for the tables of earlier versions: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("segstore: commit: %w", err)
	}
	return &Store{pool: pool, legacy: legacy}, nil
}

// metaCols are the publication columns pgMeta reads, in its order.
const metaCols = `partition, build_key, id, log_epoch, schema_version, media_type, tbl, scope_digest, as_of, byte_length, row_count, row_cursor, next_row_cursor, created_at_ms, expires_at_ms`

func pgMeta(r pgx.Row, extra ...any) (segstore.Meta, error) {
	var m segstore.Meta
	var mt int16
	dest := append([]any{&m.Partition, &m.Key, &m.ID, &m.LogEpoch, &m.SchemaVersion, &mt, &m.Table, &m.ScopeDigest, &m.AsOfCommitSeq,
		&m.ByteLength, &m.RowCount, &m.RowCursor, &m.NextRowCursor, &m.CreatedAtMs, &m.ExpiresAtMs}, extra...)
	if err := r.Scan(dest...); err != nil {
		return segstore.Meta{}, err
	}
	m.MediaType = ssp2.MediaType(mt)
	return m, nil
}

// held is the SQL condition "publication p's bytes are stored".
const held = `EXISTS (SELECT 1 FROM synclane_segment_objects o WHERE o.id = p.id)`

// Lookup implements segstore.Store.
func (s *Store) Lookup(ctx context.Context, partition, key string, nowMs int64) (segstore.Meta, error) {
	m, err := pgMeta(s.pool.QueryRow(ctx, `SELECT `+metaCols+` FROM synclane_segment_publications p
WHERE partition = $1 AND build_key = $2 AND expires_at_ms > $3 AND `+held, partition, key, nowMs))
	if errors.Is(err, pgx.ErrNoRows) {
		return segstore.Meta{}, segstore.ErrNotFound
	}
	if err != nil {
		return segstore.Meta{}, fmt.Errorf("segstore: lookup: %w", err)
	}
	return m, nil
}

// Put implements segstore.Store, in one transaction: the publication is
// written (replacing one of the same key that expired or lost its bytes;
// a live one stays and nothing else is written), then the object is
// extended to the publication's expiry, or stored when absent. Bytes
// already stored under the id with another length fail with
// segstore.ErrCollision; the bytes travel to the database only when the
// object is absent.
func (s *Store) Put(ctx context.Context, m segstore.Meta, data []byte) error {
	if err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO synclane_segment_publications AS p (`+metaCols+`)
VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15)
ON CONFLICT (partition, build_key) DO UPDATE SET id = excluded.id, log_epoch = excluded.log_epoch, schema_version = excluded.schema_version,
  media_type = excluded.media_type, tbl = excluded.tbl, scope_digest = excluded.scope_digest, as_of = excluded.as_of,
  byte_length = excluded.byte_length, row_count = excluded.row_count, row_cursor = excluded.row_cursor,
  next_row_cursor = excluded.next_row_cursor, created_at_ms = excluded.created_at_ms, expires_at_ms = excluded.expires_at_ms
WHERE p.expires_at_ms <= excluded.created_at_ms OR NOT `+held,
			m.Partition, m.Key, m.ID, m.LogEpoch, m.SchemaVersion, int16(m.MediaType), m.Table, m.ScopeDigest, m.AsOfCommitSeq,
			m.ByteLength, m.RowCount, m.RowCursor, m.NextRowCursor, m.CreatedAtMs, m.ExpiresAtMs)
		if err != nil || tag.RowsAffected() == 0 {
			return err // another builder's live publication holds the key
		}
		var n int64
		err = tx.QueryRow(ctx, `UPDATE synclane_segment_objects SET expires_at_ms = greatest(expires_at_ms, $2),
  created_at_ms = greatest(created_at_ms, $3) WHERE id = $1 RETURNING byte_length`, m.ID, m.ExpiresAtMs, m.CreatedAtMs).Scan(&n)
		if errors.Is(err, pgx.ErrNoRows) {
			err = tx.QueryRow(ctx, `INSERT INTO synclane_segment_objects (id, byte_length, created_at_ms, expires_at_ms, data)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (id) DO UPDATE SET expires_at_ms = greatest(synclane_segment_objects.expires_at_ms, excluded.expires_at_ms),
  created_at_ms = greatest(synclane_segment_objects.created_at_ms, excluded.created_at_ms)
RETURNING byte_length`, m.ID, int64(len(data)), m.CreatedAtMs, m.ExpiresAtMs, data).Scan(&n)
		}
		if err != nil {
			return err
		}
		if n != int64(len(data)) {
			return segstore.ErrCollision
		}
		return nil
	}); err != nil {
		return fmt.Errorf("segstore: put %s: %w", m.ID, err)
	}
	return nil
}

// Get implements segstore.Store, in one round trip: the publications,
// and the bytes once (on the first row only, when a publication is
// unexpired): a page whose rows did not change is published again under
// every pin's build key with the same id.
func (s *Store) Get(ctx context.Context, partition, id string, nowMs int64) ([]segstore.Publication, []byte, error) {
	rows, err := s.pool.Query(ctx, `WITH p AS (
  SELECT `+metaCols+`, expires_at_ms > $1 AS unexpired FROM synclane_segment_publications WHERE id = $2 AND ($3 = '' OR partition = $3))
SELECT p.*, CASE WHEN row_number() OVER () = 1 THEN
  (SELECT data FROM synclane_segment_objects WHERE id = $2 AND EXISTS (SELECT 1 FROM p WHERE unexpired)) END
FROM p`, nowMs, id, partition)
	if err != nil {
		return nil, nil, fmt.Errorf("segstore: get: %w", err)
	}
	defer rows.Close()
	var pubs []segstore.Publication
	var data []byte
	for rows.Next() {
		var p segstore.Publication
		var d []byte
		if p.Meta, err = pgMeta(rows, &p.Live, &d); err != nil {
			return nil, nil, fmt.Errorf("segstore: get: %w", err)
		}
		if len(pubs) == 0 {
			data = d
		}
		pubs = append(pubs, p)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("segstore: get: %w", err)
	}
	if len(pubs) == 0 {
		return nil, nil, segstore.ErrNotFound
	}
	if data == nil { // nothing unexpired, or the bytes were evicted
		for i := range pubs {
			pubs[i].Live = false
		}
	}
	return pubs, data, nil
}

// Publications implements segstore.PublicationReader: the publications
// as Get reads them (live: unexpired, the object held), without the
// object's bytes.
func (s *Store) Publications(ctx context.Context, partition, id string, nowMs int64) ([]segstore.Publication, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+metaCols+`, expires_at_ms > $1 AND `+held+`
FROM synclane_segment_publications p WHERE id = $2 AND ($3 = '' OR partition = $3)`, nowMs, id, partition)
	if err != nil {
		return nil, fmt.Errorf("segstore: publications: %w", err)
	}
	defer rows.Close()
	var pubs []segstore.Publication
	for rows.Next() {
		var p segstore.Publication
		if p.Meta, err = pgMeta(rows, &p.Live); err != nil {
			return nil, fmt.Errorf("segstore: publications: %w", err)
		}
		pubs = append(pubs, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("segstore: publications: %w", err)
	}
	if len(pubs) == 0 {
		return nil, segstore.ErrNotFound
	}
	return pubs, nil
}

// Sweep implements segstore.Store: objects whose every publication
// expired go, publications that expired before forgetBeforeMs are
// forgotten, and so are the expired rows of the table of earlier
// versions.
func (s *Store) Sweep(ctx context.Context, nowMs, forgetBeforeMs int64) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM synclane_segment_objects WHERE expires_at_ms <= $1`, nowMs)
	if err != nil {
		return 0, fmt.Errorf("segstore: sweep: %w", err)
	}
	n := int(tag.RowsAffected())
	if _, err := s.pool.Exec(ctx, `DELETE FROM synclane_segment_publications WHERE expires_at_ms < $1`, forgetBeforeMs); err != nil {
		return n, fmt.Errorf("segstore: forget publications: %w", err)
	}
	if s.legacy {
		if _, err := s.pool.Exec(ctx, `DELETE FROM synclane_segments WHERE expires_at_ms <= $1`, nowMs); err != nil {
			return n, fmt.Errorf("segstore: sweep the segments of earlier versions: %w", err)
		}
	}
	return n, nil
}

// Held implements segstore.Evicter: one row per object, its bytes
// counted once.
func (s *Store) Held(ctx context.Context) ([]segstore.Held, error) {
	rows, err := s.pool.Query(ctx, `SELECT o.id, o.byte_length + coalesce((SELECT sum(f.byte_length) FROM synclane_segment_forms f WHERE f.id = o.id), 0),
  o.created_at_ms, o.expires_at_ms FROM synclane_segment_objects o`)
	if err != nil {
		return nil, fmt.Errorf("segstore: held segments: %w", err)
	}
	defer rows.Close()
	return segstore.ScanHeld(rows)
}

// Evict implements segstore.Evicter: the objects of ids are deleted;
// their publications stay, no longer live.
func (s *Store) Evict(ctx context.Context, ids []string) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM synclane_segment_objects WHERE id = ANY($1)`, ids)
	if err != nil {
		return 0, fmt.Errorf("segstore: evict: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// Close implements segstore.Store; the pool is not closed.
func (s *Store) Close() error { return nil }

// PutForm implements segstore.FormStore: one row of
// synclane_segment_forms per segment and encoding, referencing the
// segment's bytes (deleted with them: sweep, eviction). A form stored
// already stays.
func (s *Store) PutForm(ctx context.Context, id, enc string, data []byte) error {
	if !segstore.ValidEncoding(enc) {
		return fmt.Errorf("segstore: put form: encoding %q", enc)
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO synclane_segment_forms (id, enc, byte_length, data)
SELECT $1, $2, $3, $4 WHERE EXISTS (SELECT 1 FROM synclane_segment_objects WHERE id = $1)
ON CONFLICT (id, enc) DO NOTHING`, id, enc, int64(len(data)), data)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23503" { // the bytes went meanwhile
			return segstore.ErrNotFound
		}
		return fmt.Errorf("segstore: put form %s %s: %w", id, enc, err)
	}
	if tag.RowsAffected() == 0 {
		var one int
		err := s.pool.QueryRow(ctx, `SELECT 1 FROM synclane_segment_forms WHERE id = $1 AND enc = $2`, id, enc).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return segstore.ErrNotFound // no bytes to build it beside
		} else if err != nil {
			return fmt.Errorf("segstore: put form %s %s: %w", id, enc, err)
		}
	}
	return nil
}

// OpenForm implements segstore.FormStore: the form in memory.
func (s *Store) OpenForm(ctx context.Context, id, enc string) ([]byte, *os.File, error) {
	var data []byte
	err := s.pool.QueryRow(ctx, `SELECT data FROM synclane_segment_forms WHERE id = $1 AND enc = $2`, id, enc).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, segstore.ErrNotFound
	} else if err != nil {
		return nil, nil, fmt.Errorf("segstore: open form %s %s: %w", id, enc, err)
	}
	return data, nil, nil
}

// DropForm implements segstore.FormStore.
func (s *Store) DropForm(ctx context.Context, id, enc string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM synclane_segment_forms WHERE id = $1 AND enc = $2`, id, enc); err != nil {
		return fmt.Errorf("segstore: drop form %s %s: %w", id, enc, err)
	}
	return nil
}
