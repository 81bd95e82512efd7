package postgres

import (
	"context"

	"github.com/synclane/synclane/storage"
)

// CountBlobs implements storage.BlobIndex (two scans).
func (s *Store) CountBlobs(ctx context.Context) (storage.BlobCounts, error) {
	var c storage.BlobCounts
	if err := s.ready(); err != nil {
		return c, err
	}
	err := s.pool.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE state = 0), count(*) FILTER (WHERE state = 1), count(*) FILTER (WHERE state = 2),
		coalesce(sum(byte_length) FILTER (WHERE state = 1), 0)::bigint FROM `+s.q.blobs()).
		Scan(&c.Uploading, &c.Present, &c.Deleting, &c.PresentBytes)
	if err == nil {
		err = s.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.q.blobRefs()).Scan(&c.References)
	}
	if err != nil {
		return storage.BlobCounts{}, classify("CountBlobs", err)
	}
	return c, nil
}
