// Package pgseg is the segment store for processes sharing a PostgreSQL
// database: any of them serves a segment another built. It links pgx; the
// segment cache (package segstore) does not.
package pgseg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/segstore"
)

// Store is the segstore.Store for --postgres: segments live in table
// synclane_segments of the shared database, so any process can serve a
// segment another process built.
type Store struct {
	pool *pgxpool.Pool
}

const pgSchema = `CREATE TABLE IF NOT EXISTS synclane_segments (
  partition TEXT NOT NULL, build_key TEXT NOT NULL, id TEXT NOT NULL,
  media_type SMALLINT NOT NULL, tbl TEXT NOT NULL, scope_digest TEXT NOT NULL,
  as_of BIGINT NOT NULL, byte_length BIGINT NOT NULL, row_count BIGINT NOT NULL,
  row_cursor TEXT, next_row_cursor TEXT, created_at_ms BIGINT NOT NULL,
  expires_at_ms BIGINT NOT NULL, data BYTEA,
  PRIMARY KEY (partition, build_key));
CREATE INDEX IF NOT EXISTS synclane_segments_by_id ON synclane_segments (id, partition);
CREATE INDEX IF NOT EXISTS synclane_segments_by_expiry ON synclane_segments (expires_at_ms)`

// Open creates the segment table if needed and returns the Store.
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
		return nil, fmt.Errorf("segstore: create table: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("segstore: commit: %w", err)
	}
	return &Store{pool: pool}, nil
}

// metaCols are the columns pgMeta reads, in its order.
const metaCols = `partition, build_key, id, media_type, tbl, scope_digest, as_of, byte_length, row_count, row_cursor, next_row_cursor, created_at_ms, expires_at_ms`

func pgMeta(r pgx.Row, extra ...any) (segstore.Meta, error) {
	var m segstore.Meta
	var mt int16
	dest := append([]any{&m.Partition, &m.Key, &m.ID, &mt, &m.Table, &m.ScopeDigest, &m.AsOfCommitSeq,
		&m.ByteLength, &m.RowCount, &m.RowCursor, &m.NextRowCursor, &m.CreatedAtMs, &m.ExpiresAtMs}, extra...)
	if err := r.Scan(dest...); err != nil {
		return segstore.Meta{}, err
	}
	m.MediaType = ssp2.MediaType(mt)
	return m, nil
}

// Lookup implements segstore.Store.
func (s *Store) Lookup(ctx context.Context, partition, key string, nowMs int64) (segstore.Meta, error) {
	m, err := pgMeta(s.pool.QueryRow(ctx, `SELECT `+metaCols+` FROM synclane_segments WHERE partition = $1 AND build_key = $2 AND expires_at_ms > $3 AND data IS NOT NULL`, partition, key, nowMs))
	if errors.Is(err, pgx.ErrNoRows) {
		return segstore.Meta{}, segstore.ErrNotFound
	}
	if err != nil {
		return segstore.Meta{}, fmt.Errorf("segstore: lookup: %w", err)
	}
	return m, nil
}

// Put implements segstore.Store.
func (s *Store) Put(ctx context.Context, m segstore.Meta, data []byte) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO synclane_segments (`+metaCols+`, data) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14)
ON CONFLICT (partition, build_key) DO UPDATE SET id = excluded.id, media_type = excluded.media_type, tbl = excluded.tbl,
  scope_digest = excluded.scope_digest, as_of = excluded.as_of, byte_length = excluded.byte_length, row_count = excluded.row_count,
  row_cursor = excluded.row_cursor, next_row_cursor = excluded.next_row_cursor, created_at_ms = excluded.created_at_ms,
  expires_at_ms = excluded.expires_at_ms, data = excluded.data
WHERE synclane_segments.data IS NULL OR synclane_segments.expires_at_ms <= excluded.created_at_ms`,
		m.Partition, m.Key, m.ID, int16(m.MediaType), m.Table, m.ScopeDigest, m.AsOfCommitSeq, m.ByteLength, m.RowCount,
		m.RowCursor, m.NextRowCursor, m.CreatedAtMs, m.ExpiresAtMs, data)
	if err != nil {
		return fmt.Errorf("segstore: put: %w", err)
	}
	return nil
}

// Get implements segstore.Store. The entries are read without their bytes
// and the bytes of one live entry once: a page whose rows did not change
// is stored again under every pin's build key with the same id, and
// reading each copy would cost a download N times its size.
func (s *Store) Get(ctx context.Context, partition, id string, nowMs int64) ([]segstore.Meta, []byte, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+metaCols+`, expires_at_ms > $1 AND data IS NOT NULL FROM synclane_segments WHERE id = $2 AND ($3 = '' OR partition = $3)`, nowMs, id, partition)
	if err != nil {
		return nil, nil, fmt.Errorf("segstore: get: %w", err)
	}
	defer rows.Close()
	var metas []segstore.Meta
	known := false
	for rows.Next() {
		var live bool
		m, err := pgMeta(rows, &live)
		if err != nil {
			return nil, nil, fmt.Errorf("segstore: get: %w", err)
		}
		known = true
		if live {
			metas = append(metas, m)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("segstore: get: %w", err)
	}
	if len(metas) == 0 {
		if known {
			return nil, nil, segstore.ErrExpired
		}
		return nil, nil, segstore.ErrNotFound
	}
	var data []byte
	err = s.pool.QueryRow(ctx, `SELECT data FROM synclane_segments WHERE id = $2 AND ($3 = '' OR partition = $3) AND expires_at_ms > $1 AND data IS NOT NULL LIMIT 1`,
		nowMs, id, partition).Scan(&data)
	switch {
	case errors.Is(err, pgx.ErrNoRows): // swept between the two reads
		return nil, nil, segstore.ErrExpired
	case err != nil:
		return nil, nil, fmt.Errorf("segstore: get: %w", err)
	}
	return metas, data, nil
}

// Sweep implements segstore.Store.
func (s *Store) Sweep(ctx context.Context, nowMs, forgetBeforeMs int64) (int, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE synclane_segments SET data = NULL WHERE expires_at_ms <= $1 AND data IS NOT NULL`, nowMs)
	if err != nil {
		return 0, fmt.Errorf("segstore: sweep: %w", err)
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM synclane_segments WHERE expires_at_ms < $1 AND data IS NULL`, forgetBeforeMs); err != nil {
		return int(tag.RowsAffected()), fmt.Errorf("segstore: forget tombstones: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// Held implements segstore.Evicter. Each entry holds its own copy of the
// bytes in this store, so a segment's Bytes are the sum over its entries
// that hold them.
func (s *Store) Held(ctx context.Context) ([]segstore.Held, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, sum(byte_length)::BIGINT, max(created_at_ms), max(expires_at_ms) FROM synclane_segments WHERE data IS NOT NULL GROUP BY id`)
	if err != nil {
		return nil, fmt.Errorf("segstore: held segments: %w", err)
	}
	defer rows.Close()
	return segstore.ScanHeld(rows)
}

// Evict implements segstore.Evicter: the entries of ids keep their rows as
// tombstones, without their bytes.
func (s *Store) Evict(ctx context.Context, ids []string) (int, error) {
	rows, err := s.pool.Query(ctx, `UPDATE synclane_segments SET data = NULL WHERE id = ANY($1) AND data IS NOT NULL RETURNING id`, ids)
	if err != nil {
		return 0, fmt.Errorf("segstore: evict: %w", err)
	}
	defer rows.Close()
	seen := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return len(seen), fmt.Errorf("segstore: evict: %w", err)
		}
		seen[id] = true
	}
	if err := rows.Err(); err != nil {
		return len(seen), fmt.Errorf("segstore: evict: %w", err)
	}
	return len(seen), nil
}

// Close implements segstore.Store; the pool is not closed.
func (s *Store) Close() error { return nil }
