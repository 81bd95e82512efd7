package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/storage"
)

// Blob metadata and references (storage.BlobIndex, storage.BlobTx).
//
// The orphan-sweep race is closed by row locks: a push's ClaimBlob is an
// UPDATE of the blob's metadata row (touched_at_ms = now) inside the push
// transaction, which holds the row lock until the push ends.
// MarkOrphanBlobs selects candidates FOR UPDATE SKIP LOCKED, so it never
// waits for nor takes a blob a running push claimed; and when the push
// committed between the sweep's snapshot and its lock, READ COMMITTED
// re-checks the locked row's newest version, whose touched_at_ms is no
// longer before the cutoff. A push whose UPDATE waits for a sweep that
// marked the row sees state = 2 afterwards and gets no row: blob.not_found.

func (q sysSQL) blobTable(name string) string {
	if q.schemaIdent == "" {
		return pgx.Identifier{name}.Sanitize()
	}
	return q.schemaIdent + "." + pgx.Identifier{name}.Sanitize()
}

func (q sysSQL) blobs() string    { return q.blobTable("sync_blobs") }
func (q sysSQL) blobRefs() string { return q.blobTable("sync_blob_refs") }

// blobDDL creates the blob tables.
func (q sysSQL) blobDDL() []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + q.blobs() + ` (
	blob_id text COLLATE "C" PRIMARY KEY,
	byte_length bigint NOT NULL DEFAULT 0,
	media_type text NOT NULL DEFAULT '',
	state smallint NOT NULL,
	created_at_ms bigint NOT NULL,
	touched_at_ms bigint NOT NULL
)`,
		`CREATE TABLE IF NOT EXISTS ` + q.blobRefs() + ` (
	partition text COLLATE "C" NOT NULL,
	table_name text COLLATE "C" NOT NULL,
	row_id text COLLATE "C" NOT NULL,
	blob_id text COLLATE "C" NOT NULL,
	scopes text NOT NULL,
	PRIMARY KEY (partition, table_name, row_id, blob_id)
)`,
		`CREATE INDEX IF NOT EXISTS sync_blob_refs_by_blob ON ` + q.blobRefs() + ` (blob_id, partition)`,
	}
}

func (s *Store) blobSelect() string {
	return `SELECT blob_id, byte_length, media_type, state, created_at_ms, touched_at_ms FROM ` + s.q.blobs() + ` WHERE blob_id = $1`
}

func scanBlobRow(r pgx.Row) (*storage.BlobInfo, error) {
	var m storage.BlobInfo
	var st int16
	err := r.Scan(&m.ID, &m.ByteLength, &m.MediaType, &st, &m.CreatedAtMs, &m.TouchedAtMs)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	m.State = storage.BlobState(st)
	return &m, nil
}

// BeginBlobUpload implements storage.BlobIndex.
func (s *Store) BeginBlobUpload(ctx context.Context, id string, nowMs int64) (storage.BlobInfo, error) {
	if err := s.ready(); err != nil {
		return storage.BlobInfo{}, err
	}
	if !storage.Storable(id) {
		return storage.BlobInfo{}, fmt.Errorf("postgres: begin blob upload: %w", storage.ErrUnstorable)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO `+s.q.blobs()+` AS b (blob_id, state, created_at_ms, touched_at_ms) VALUES ($1, 0, $2, $2)
ON CONFLICT (blob_id) DO UPDATE SET touched_at_ms = GREATEST(b.touched_at_ms, EXCLUDED.touched_at_ms) WHERE b.state <> 2`, id, nowMs); err != nil {
		return storage.BlobInfo{}, classify("BeginBlobUpload", err)
	}
	m, err := scanBlobRow(s.pool.QueryRow(ctx, s.blobSelect(), id))
	if err != nil {
		return storage.BlobInfo{}, classify("BeginBlobUpload", err)
	}
	if m == nil || m.State == storage.BlobDeleting {
		return storage.BlobInfo{}, fmt.Errorf("postgres: begin blob upload %s: %w", id, storage.ErrBlobBusy)
	}
	return *m, nil
}

// CompleteBlobUpload implements storage.BlobIndex.
func (s *Store) CompleteBlobUpload(ctx context.Context, id string, byteLength int64, mediaType string, nowMs int64) error {
	if err := s.ready(); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE `+s.q.blobs()+` SET
	byte_length = CASE WHEN state = 0 THEN $2 ELSE byte_length END,
	media_type = CASE WHEN state = 0 THEN $3 ELSE media_type END,
	state = 1, touched_at_ms = GREATEST(touched_at_ms, $4)
WHERE blob_id = $1 AND state IN (0, 1)`, id, byteLength, mediaType, nowMs)
	if err != nil {
		return classify("CompleteBlobUpload", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: complete blob upload %s: %w", id, storage.ErrBlobBusy)
	}
	return nil
}

// GetBlob implements storage.BlobIndex.
func (s *Store) GetBlob(ctx context.Context, id string) (*storage.BlobInfo, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	if !storage.Storable(id) {
		return nil, nil
	}
	m, err := scanBlobRow(s.pool.QueryRow(ctx, s.blobSelect(), id))
	return m, classify("GetBlob", err)
}

// BlobRefs implements storage.BlobIndex.
func (s *Store) BlobRefs(ctx context.Context, partition, id string, limit int) ([]storage.BlobRef, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	if !storage.Storable(id) || !storage.Storable(partition) {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT table_name, row_id, scopes FROM `+s.q.blobRefs()+`
WHERE blob_id = $1 AND partition = $2 ORDER BY table_name, row_id LIMIT $3`, id, partition, limit)
	if err != nil {
		return nil, classify("BlobRefs", err)
	}
	defer rows.Close()
	var out []storage.BlobRef
	for rows.Next() {
		var r storage.BlobRef
		var sc string
		if err := rows.Scan(&r.Table, &r.RowID, &sc); err != nil {
			return nil, classify("BlobRefs", err)
		}
		if err := json.Unmarshal([]byte(sc), &r.Scopes); err != nil {
			return nil, fmt.Errorf("postgres: blob refs %s: scopes: %w", id, err)
		}
		out = append(out, r)
	}
	return out, classify("BlobRefs", rows.Err())
}

// MarkOrphanBlobs implements storage.BlobIndex (see the comment at the top
// of this file for how it stays clear of running pushes).
func (s *Store) MarkOrphanBlobs(ctx context.Context, cutoffMs int64, limit int) ([]string, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `UPDATE `+s.q.blobs()+` u SET state = 2 FROM (
	SELECT b.blob_id FROM `+s.q.blobs()+` b
	WHERE b.state = 2 OR (b.touched_at_ms < $1 AND NOT EXISTS (SELECT 1 FROM `+s.q.blobRefs()+` r WHERE r.blob_id = b.blob_id))
	ORDER BY b.blob_id LIMIT $2 FOR UPDATE SKIP LOCKED) c
WHERE u.blob_id = c.blob_id AND (u.state = 2 OR u.touched_at_ms < $1)
RETURNING u.blob_id`, cutoffMs, limit)
	if err != nil {
		return nil, classify("MarkOrphanBlobs", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids, classify("MarkOrphanBlobs", err)
}

// ForgetBlobs implements storage.BlobIndex.
func (s *Store) ForgetBlobs(ctx context.Context, ids []string) error {
	if err := s.ready(); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	_, err := s.pool.Exec(ctx, `DELETE FROM `+s.q.blobs()+` WHERE blob_id = ANY($1) AND state = 2`, ids)
	return classify("ForgetBlobs", err)
}

// AbandonBlobUpload implements storage.BlobIndex.
func (s *Store) AbandonBlobUpload(ctx context.Context, id string, beganMs int64) error {
	if err := s.ready(); err != nil {
		return err
	}
	if !storage.Storable(id) {
		return nil
	}
	_, err := s.pool.Exec(ctx, `DELETE FROM `+s.q.blobs()+` b WHERE b.blob_id = $1 AND b.state = 0 AND b.touched_at_ms = $2
AND NOT EXISTS (SELECT 1 FROM `+s.q.blobRefs()+` r WHERE r.blob_id = b.blob_id)`, id, beganMs)
	return classify("AbandonBlobUpload", err)
}

// MarkBlobMissing implements storage.BlobIndex.
func (s *Store) MarkBlobMissing(ctx context.Context, id string, nowMs int64) (bool, error) {
	if err := s.ready(); err != nil {
		return false, err
	}
	if !storage.Storable(id) {
		return false, nil
	}
	tag, err := s.pool.Exec(ctx, `UPDATE `+s.q.blobs()+` SET state = 0, touched_at_ms = GREATEST(touched_at_ms, $2) WHERE blob_id = $1 AND state = 1`, id, nowMs)
	if err != nil {
		return false, classify("MarkBlobMissing", err)
	}
	return tag.RowsAffected() > 0, nil
}

// PresentBlobs implements storage.BlobIndex.
func (s *Store) PresentBlobs(ctx context.Context, afterID string, limit int) ([]string, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	if !storage.Storable(afterID) {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT blob_id FROM `+s.q.blobs()+` WHERE state = 1 AND blob_id > $1 ORDER BY blob_id LIMIT $2`, afterID, limit)
	if err != nil {
		return nil, classify("PresentBlobs", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids, classify("PresentBlobs", err)
}

// execTag is exec returning the last statement's command tag.
func (tx *pushTx) execTag(ctx context.Context, sql string, args ...any) (int64, error) {
	prefix := tx.writePrefix()
	if len(prefix) == 0 {
		tag, err := tx.conn.Exec(ctx, sql, args...)
		return tag.RowsAffected(), err
	}
	b := &pgx.Batch{}
	for _, p := range prefix {
		b.Queue(p)
	}
	b.Queue(sql, args...)
	br := tx.conn.SendBatch(ctx, b)
	for range prefix {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return 0, err
		}
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag.RowsAffected(), err
}

// ClaimBlob implements storage.BlobTx: an UPDATE that row-locks the
// blob's metadata until the push ends.
func (tx *pushTx) ClaimBlob(ctx context.Context, id string, nowMs int64) (bool, error) {
	if err := tx.check(); err != nil {
		return false, err
	}
	if !storage.Storable(id) {
		return false, nil
	}
	n, err := tx.execTag(ctx, `UPDATE `+tx.s.q.blobs()+` SET touched_at_ms = GREATEST(touched_at_ms, $2) WHERE blob_id = $1 AND state = 1`, id, nowMs)
	if err != nil {
		return false, classify("ClaimBlob", err)
	}
	return n == 1, nil
}

// SetRowBlobs implements storage.BlobTx.
func (tx *pushTx) SetRowBlobs(ctx context.Context, table, rowID string, scopes map[string]string, ids []string) error {
	if err := tx.check(); err != nil {
		return err
	}
	sc, err := json.Marshal(scopes)
	if err != nil {
		return fmt.Errorf("postgres: SetRowBlobs: %w", err)
	}
	if ids == nil {
		ids = []string{}
	}
	err = tx.exec(ctx, `WITH d AS (DELETE FROM `+tx.s.q.blobRefs()+` WHERE partition = $1 AND table_name = $2 AND row_id = $3 AND blob_id <> ALL($4::text[]))
INSERT INTO `+tx.s.q.blobRefs()+` (partition, table_name, row_id, blob_id, scopes)
SELECT $1, $2, $3, x, $5 FROM unnest($4::text[]) AS x
ON CONFLICT (partition, table_name, row_id, blob_id) DO UPDATE SET scopes = EXCLUDED.scopes`, tx.partition, table, rowID, ids, string(sc))
	return classify("SetRowBlobs", err)
}

// SchemaName returns the PostgreSQL schema holding the store's tables (""
// for the search path), for stores that keep their tables next to it
// (pgblob.New).
func (s *Store) SchemaName() string { return s.schema }
