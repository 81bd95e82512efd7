package sqlite

import (
	"context"
	"fmt"

	"github.com/synclane/synclane/storage"
)

// CountBlobs implements storage.BlobIndex (two scans on the read pool).
func (s *Store) CountBlobs(ctx context.Context) (storage.BlobCounts, error) {
	var c storage.BlobCounts
	if _, _, _, err := s.current(); err != nil {
		return c, fmt.Errorf("sqlite: count blobs: %w", err)
	}
	err := s.readQueryRow(ctx, `SELECT
		coalesce(sum(state = 0), 0), coalesce(sum(state = 1), 0), coalesce(sum(state = 2), 0),
		coalesce(sum(CASE WHEN state = 1 THEN byte_length ELSE 0 END), 0) FROM sync_blobs`).
		Scan(&c.Uploading, &c.Present, &c.Deleting, &c.PresentBytes)
	if err == nil {
		err = s.readQueryRow(ctx, `SELECT count(*) FROM sync_blob_refs`).Scan(&c.References)
	}
	if err != nil {
		return storage.BlobCounts{}, fmt.Errorf("sqlite: count blobs: %w", err)
	}
	return c, nil
}
