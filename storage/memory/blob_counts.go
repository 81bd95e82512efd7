package memory

import (
	"context"

	"github.com/synclane/synclane/storage"
)

// CountBlobs implements storage.BlobIndex.
func (s *Store) CountBlobs(ctx context.Context) (storage.BlobCounts, error) {
	if err := ctx.Err(); err != nil {
		return storage.BlobCounts{}, err
	}
	b := &s.d.blobs
	b.mu.Lock()
	defer b.mu.Unlock()
	var c storage.BlobCounts
	for _, m := range b.meta {
		switch m.State {
		case storage.BlobUploading:
			c.Uploading++
		case storage.BlobPresent:
			c.Present++
			c.PresentBytes += m.ByteLength
		case storage.BlobDeleting:
			c.Deleting++
		}
	}
	for _, rb := range b.rows {
		c.References += int64(len(rb.ids))
	}
	return c, nil
}
