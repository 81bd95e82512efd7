package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/synclane/synclane/storage"
)

// blobDDL creates the blob metadata and reference tables (storage.BlobIndex).
// SQLite serializes write transactions, so a push's ClaimBlob and the
// orphan sweep's MarkOrphanBlobs never interleave.
var blobDDL = []string{
	`CREATE TABLE IF NOT EXISTS sync_blobs (
		blob_id TEXT PRIMARY KEY,
		byte_length INTEGER NOT NULL DEFAULT 0,
		media_type TEXT NOT NULL DEFAULT '',
		state INTEGER NOT NULL,
		created_at_ms INTEGER NOT NULL,
		touched_at_ms INTEGER NOT NULL
	) WITHOUT ROWID`,
	`CREATE TABLE IF NOT EXISTS sync_blob_refs (
		partition_id TEXT NOT NULL,
		table_name TEXT NOT NULL,
		row_id TEXT NOT NULL,
		blob_id TEXT NOT NULL,
		scopes TEXT NOT NULL,
		PRIMARY KEY (partition_id, table_name, row_id, blob_id)
	) WITHOUT ROWID`,
	`CREATE INDEX IF NOT EXISTS sync_blob_refs_by_blob ON sync_blob_refs (blob_id, partition_id)`,
}

// blobWrite runs fn in a write transaction under the write lock.
func (s *Store) blobWrite(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	if _, _, _, err := s.current(); err != nil {
		return fmt.Errorf("sqlite: %s: %w", what, err)
	}
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("sqlite: %s: %w", what, err)
	}
	defer s.unlock()
	return s.inWriteTx(ctx, what, fn)
}

// BeginBlobUpload implements storage.BlobIndex.
func (s *Store) BeginBlobUpload(ctx context.Context, id string, nowMs int64) (storage.BlobInfo, error) {
	var info storage.BlobInfo
	err := s.blobWrite(ctx, "begin blob upload", func(ctx context.Context) error {
		if _, err := s.conn.ExecContext(ctx, `INSERT INTO sync_blobs(blob_id, state, created_at_ms, touched_at_ms) VALUES(?, 0, ?, ?)
			ON CONFLICT(blob_id) DO UPDATE SET touched_at_ms = max(touched_at_ms, excluded.touched_at_ms) WHERE state <> 2`, id, nowMs, nowMs); err != nil {
			return err
		}
		m, err := scanBlob(s.conn.QueryRowContext(ctx, blobSelect, id))
		if err != nil {
			return err
		}
		if m.State == storage.BlobDeleting {
			return storage.ErrBlobBusy
		}
		info = *m
		return nil
	})
	return info, err
}

// CompleteBlobUpload implements storage.BlobIndex.
func (s *Store) CompleteBlobUpload(ctx context.Context, id string, byteLength int64, mediaType string, nowMs int64) error {
	return s.blobWrite(ctx, "complete blob upload", func(ctx context.Context) error {
		res, err := s.conn.ExecContext(ctx, `UPDATE sync_blobs SET
			byte_length = CASE WHEN state = 0 THEN ? ELSE byte_length END,
			media_type = CASE WHEN state = 0 THEN ? ELSE media_type END,
			state = 1, touched_at_ms = max(touched_at_ms, ?)
			WHERE blob_id = ? AND state IN (0, 1)`, byteLength, mediaType, nowMs, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return storage.ErrBlobBusy
		}
		return nil
	})
}

const blobSelect = `SELECT blob_id, byte_length, media_type, state, created_at_ms, touched_at_ms FROM sync_blobs WHERE blob_id = ?`

func scanBlob(r rowScanner) (*storage.BlobInfo, error) {
	var m storage.BlobInfo
	err := r.Scan(&m.ID, &m.ByteLength, &m.MediaType, &m.State, &m.CreatedAtMs, &m.TouchedAtMs)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &m, nil
}

// GetBlob implements storage.BlobIndex.
func (s *Store) GetBlob(ctx context.Context, id string) (*storage.BlobInfo, error) {
	if _, _, _, err := s.current(); err != nil {
		return nil, fmt.Errorf("sqlite: get blob: %w", err)
	}
	m, err := scanBlob(s.readQueryRow(ctx, blobSelect, id))
	if err != nil {
		return nil, fmt.Errorf("sqlite: get blob %s: %w", id, err)
	}
	return m, nil
}

// BlobRefs implements storage.BlobIndex.
func (s *Store) BlobRefs(ctx context.Context, partition, id string, limit int) ([]storage.BlobRef, error) {
	if _, _, _, err := s.current(); err != nil {
		return nil, fmt.Errorf("sqlite: blob refs: %w", err)
	}
	rows, err := s.readQuery(ctx, `SELECT table_name, row_id, scopes FROM sync_blob_refs
		WHERE blob_id = ? AND partition_id = ? ORDER BY table_name, row_id LIMIT ?`, id, partition, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: blob refs %s: %w", id, err)
	}
	defer rows.Close()
	var out []storage.BlobRef
	for rows.Next() {
		var r storage.BlobRef
		var sc string
		if err := rows.Scan(&r.Table, &r.RowID, &sc); err != nil {
			return nil, fmt.Errorf("sqlite: blob refs %s: %w", id, err)
		}
		if err := json.Unmarshal([]byte(sc), &r.Scopes); err != nil {
			return nil, fmt.Errorf("sqlite: blob refs %s: scopes: %w", id, err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// MarkOrphanBlobs implements storage.BlobIndex.
func (s *Store) MarkOrphanBlobs(ctx context.Context, cutoffMs int64, limit int) ([]string, error) {
	var ids []string
	err := s.blobWrite(ctx, "mark orphan blobs", func(ctx context.Context) error {
		rows, err := s.conn.QueryContext(ctx, `UPDATE sync_blobs SET state = 2 WHERE blob_id IN (
			SELECT b.blob_id FROM sync_blobs b WHERE b.state = 2 OR (b.touched_at_ms < ?
			AND NOT EXISTS (SELECT 1 FROM sync_blob_refs r WHERE r.blob_id = b.blob_id)) ORDER BY b.blob_id LIMIT ?)
			RETURNING blob_id`, cutoffMs, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return rows.Err()
	})
	return ids, err
}

// ForgetBlobs implements storage.BlobIndex.
func (s *Store) ForgetBlobs(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	return s.blobWrite(ctx, "forget blobs", func(ctx context.Context) error {
		for _, id := range ids {
			if _, err := s.conn.ExecContext(ctx, `DELETE FROM sync_blobs WHERE blob_id = ? AND state = 2`, id); err != nil {
				return err
			}
		}
		return nil
	})
}

// AbandonBlobUpload implements storage.BlobIndex.
func (s *Store) AbandonBlobUpload(ctx context.Context, id string, beganMs int64) error {
	return s.blobWrite(ctx, "abandon blob upload", func(ctx context.Context) error {
		_, err := s.conn.ExecContext(ctx, `DELETE FROM sync_blobs WHERE blob_id = ? AND state = 0 AND touched_at_ms = ?
			AND NOT EXISTS (SELECT 1 FROM sync_blob_refs r WHERE r.blob_id = sync_blobs.blob_id)`, id, beganMs)
		return err
	})
}

// MarkBlobMissing implements storage.BlobIndex.
func (s *Store) MarkBlobMissing(ctx context.Context, id string, nowMs int64) (bool, error) {
	var changed bool
	err := s.blobWrite(ctx, "mark blob missing", func(ctx context.Context) error {
		res, err := s.conn.ExecContext(ctx, `UPDATE sync_blobs SET state = 0, touched_at_ms = max(touched_at_ms, ?) WHERE blob_id = ? AND state = 1`, nowMs, id)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		changed = n > 0
		return err
	})
	return changed, err
}

// PresentBlobs implements storage.BlobIndex.
func (s *Store) PresentBlobs(ctx context.Context, afterID string, limit int) ([]string, error) {
	if _, _, _, err := s.current(); err != nil {
		return nil, fmt.Errorf("sqlite: present blobs: %w", err)
	}
	rows, err := s.readQuery(ctx, `SELECT blob_id FROM sync_blobs WHERE state = 1 AND blob_id > ? ORDER BY blob_id LIMIT ?`, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: present blobs: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("sqlite: present blobs: %w", err)
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// ClaimBlob implements storage.BlobTx.
func (tx *pushTx) ClaimBlob(ctx context.Context, id string, nowMs int64) (bool, error) {
	ctx, err := tx.check(ctx, "claim blob")
	if err != nil {
		return false, err
	}
	if !storage.Storable(id) {
		return false, nil
	}
	if err := tx.write(ctx); err != nil {
		return false, err
	}
	res, err := tx.s.conn.ExecContext(ctx, `UPDATE sync_blobs SET touched_at_ms = max(touched_at_ms, ?) WHERE blob_id = ? AND state = 1`, nowMs, id)
	if err != nil {
		return false, fmt.Errorf("sqlite: claim blob %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// SetRowBlobs implements storage.BlobTx.
func (tx *pushTx) SetRowBlobs(ctx context.Context, table, rowID string, scopes map[string]string, ids []string) error {
	ctx, err := tx.check(ctx, "set row blobs")
	if err != nil {
		return err
	}
	if err := tx.write(ctx); err != nil {
		return err
	}
	if _, err := tx.s.conn.ExecContext(ctx, `DELETE FROM sync_blob_refs WHERE partition_id = ? AND table_name = ? AND row_id = ?`,
		tx.info.Partition, table, rowID); err != nil {
		return fmt.Errorf("sqlite: set row blobs %s/%q: %w", table, rowID, err)
	}
	if len(ids) == 0 {
		return nil
	}
	sc, err := json.Marshal(scopes)
	if err != nil {
		return fmt.Errorf("sqlite: set row blobs %s/%q: %w", table, rowID, err)
	}
	q := `INSERT INTO sync_blob_refs(partition_id, table_name, row_id, blob_id, scopes) VALUES ` +
		strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?),", len(ids)), ",")
	args := make([]any, 0, 5*len(ids))
	for _, id := range ids {
		args = append(args, tx.info.Partition, table, rowID, id, string(sc))
	}
	if _, err := tx.s.conn.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("sqlite: set row blobs %s/%q: %w", table, rowID, err)
	}
	return nil
}
