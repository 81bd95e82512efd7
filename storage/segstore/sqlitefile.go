package segstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/synclane/synclane/protocol/ssp2"
)

// SQLiteFile is the embedded-mode Store: one SQLite file (WAL) holding
// every segment of the processes that open it.
type SQLiteFile struct {
	db *sql.DB
}

const sqliteSchema = `CREATE TABLE IF NOT EXISTS segments (
  partition TEXT NOT NULL, build_key TEXT NOT NULL, id TEXT NOT NULL,
  media_type INTEGER NOT NULL, tbl TEXT NOT NULL, scope_digest TEXT NOT NULL,
  as_of INTEGER NOT NULL, byte_length INTEGER NOT NULL, row_count INTEGER NOT NULL,
  row_cursor TEXT, next_row_cursor TEXT, created_at_ms INTEGER NOT NULL,
  expires_at_ms INTEGER NOT NULL, data BLOB,
  PRIMARY KEY (partition, build_key)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS segments_by_id ON segments (id, partition);
CREATE INDEX IF NOT EXISTS segments_by_expiry ON segments (expires_at_ms);`

// sqliteFileTuning makes whole-segment reads cheap: 64 KiB pages (a
// segment's overflow chain is 16x shorter; takes effect when the file is
// created, an existing file keeps its page size) and reads through a
// memory map of up to 256 MiB instead of one pread per page.
const sqliteFileTuning = "&_pragma=page_size(65536)&_pragma=mmap_size(268435456)"

// OpenSQLiteFile opens (creating if needed) the segment file at path.
func OpenSQLiteFile(ctx context.Context, path string) (*SQLiteFile, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_busy_timeout=10000&_journal_mode=WAL&_synchronous=NORMAL"+sqliteFileTuning)
	if err != nil {
		return nil, fmt.Errorf("segstore: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(4)
	if _, err := db.ExecContext(ctx, sqliteSchema); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("segstore: create tables in %s: %w", path, err)
	}
	return &SQLiteFile{db: db}, nil
}

const metaCols = `partition, build_key, id, media_type, tbl, scope_digest, as_of, byte_length, row_count, row_cursor, next_row_cursor, created_at_ms, expires_at_ms`

type scanner interface{ Scan(dest ...any) error }

func scanMeta(r scanner, extra ...any) (Meta, error) {
	var m Meta
	var mt int64
	var rc, nrc sql.NullString
	dest := append([]any{&m.Partition, &m.Key, &m.ID, &mt, &m.Table, &m.ScopeDigest, &m.AsOfCommitSeq,
		&m.ByteLength, &m.RowCount, &rc, &nrc, &m.CreatedAtMs, &m.ExpiresAtMs}, extra...)
	if err := r.Scan(dest...); err != nil {
		return Meta{}, err
	}
	m.MediaType = ssp2.MediaType(mt)
	if rc.Valid {
		m.RowCursor = &rc.String
	}
	if nrc.Valid {
		m.NextRowCursor = &nrc.String
	}
	return m, nil
}

func nullable(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

// Lookup implements Store. Whether a row still holds its bytes is read
// with typeof(data), which SQLite answers from the record header; "data IS
// NOT NULL" loads the whole blob (hundreds of KiB) through its overflow
// pages on every lookup.
func (s *SQLiteFile) Lookup(ctx context.Context, partition, key string, nowMs int64) (Meta, error) {
	row := s.db.QueryRowContext(ctx, `SELECT `+metaCols+` FROM segments WHERE partition = ? AND build_key = ? AND expires_at_ms > ? AND typeof(data) <> 'null'`, partition, key, nowMs)
	m, err := scanMeta(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Meta{}, ErrNotFound
	}
	if err != nil {
		return Meta{}, fmt.Errorf("segstore: lookup: %w", err)
	}
	return m, nil
}

// Put implements Store.
func (s *SQLiteFile) Put(ctx context.Context, m Meta, data []byte) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO segments (`+metaCols+`, data) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)
ON CONFLICT (partition, build_key) DO UPDATE SET id = excluded.id, media_type = excluded.media_type, tbl = excluded.tbl,
  scope_digest = excluded.scope_digest, as_of = excluded.as_of, byte_length = excluded.byte_length, row_count = excluded.row_count,
  row_cursor = excluded.row_cursor, next_row_cursor = excluded.next_row_cursor, created_at_ms = excluded.created_at_ms,
  expires_at_ms = excluded.expires_at_ms, data = excluded.data
WHERE segments.data IS NULL OR segments.expires_at_ms <= excluded.created_at_ms`,
		m.Partition, m.Key, m.ID, int64(m.MediaType), m.Table, m.ScopeDigest, m.AsOfCommitSeq, m.ByteLength, m.RowCount,
		nullable(m.RowCursor), nullable(m.NextRowCursor), m.CreatedAtMs, m.ExpiresAtMs, data)
	if err != nil {
		return fmt.Errorf("segstore: put: %w", err)
	}
	return nil
}

// Get implements Store.
func (s *SQLiteFile) Get(ctx context.Context, partition, id string, nowMs int64) ([]Meta, []byte, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+metaCols+`, typeof(data) <> 'null' AND expires_at_ms > ? FROM segments WHERE id = ? AND (? = '' OR partition = ?)`, nowMs, id, partition, partition)
	if err != nil {
		return nil, nil, fmt.Errorf("segstore: get: %w", err)
	}
	defer rows.Close()
	var metas []Meta
	known := false
	var live Meta
	for rows.Next() {
		var ok bool
		m, err := scanMeta(rows, &ok)
		if err != nil {
			return nil, nil, fmt.Errorf("segstore: get: %w", err)
		}
		known = true
		if ok {
			metas, live = append(metas, m), m
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("segstore: get: %w", err)
	}
	if len(metas) == 0 {
		if known {
			return nil, nil, ErrExpired
		}
		return nil, nil, ErrNotFound
	}
	data, err := s.readData(ctx, live.Partition, live.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("segstore: get data: %w", err)
	}
	if data == nil {
		return nil, nil, ErrExpired // swept meanwhile
	}
	return metas, data, nil
}

// readData reads a segment's bytes (nil when swept) through the driver
// directly: database/sql copies every []byte it scans, and the driver
// already made the value a fresh Go slice, so going through Scan would hold
// two copies of a page-sized blob at once. A driver value left in dest is
// not modified by Rows.Close (database/sql/driver.Rows), so it may be kept.
func (s *SQLiteFile) readData(ctx context.Context, partition, key string) ([]byte, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var data []byte
	err = conn.Raw(func(dc any) error {
		q, ok := dc.(driver.QueryerContext)
		if !ok {
			return fmt.Errorf("driver connection %T cannot query", dc)
		}
		rows, err := q.QueryContext(ctx, `SELECT data FROM segments WHERE partition = ? AND build_key = ?`,
			[]driver.NamedValue{{Ordinal: 1, Value: partition}, {Ordinal: 2, Value: key}})
		if err != nil {
			return err
		}
		dest := make([]driver.Value, 1)
		err = rows.Next(dest)
		if cerr := rows.Close(); err == nil {
			err = cerr
		}
		switch {
		case errors.Is(err, io.EOF):
			return nil // the row is gone (forgotten): treat as swept
		case err != nil:
			return err
		}
		switch v := dest[0].(type) {
		case nil:
		case []byte:
			data = v
		default:
			return fmt.Errorf("segment data of type %T", v)
		}
		return nil
	})
	return data, err
}

// Sweep implements Store.
func (s *SQLiteFile) Sweep(ctx context.Context, nowMs, forgetBeforeMs int64) (int, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE segments SET data = NULL WHERE expires_at_ms <= ? AND data IS NOT NULL`, nowMs)
	if err != nil {
		return 0, fmt.Errorf("segstore: sweep: %w", err)
	}
	n, _ := res.RowsAffected()
	if _, err := s.db.ExecContext(ctx, `DELETE FROM segments WHERE expires_at_ms < ? AND data IS NULL`, forgetBeforeMs); err != nil {
		return int(n), fmt.Errorf("segstore: forget tombstones: %w", err)
	}
	return int(n), nil
}

// Close implements Store.
func (s *SQLiteFile) Close() error { return s.db.Close() }
