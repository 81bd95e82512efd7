package storage

import "context"

// BlobCounts counts stored blob metadata by state and the reference
// index's entries, across all partitions.
type BlobCounts struct {
	Uploading, Present, Deleting int64
	// PresentBytes sums the lengths of present blobs.
	PresentBytes int64
	// References counts (partition, table, row, blob) reference entries.
	References int64
}

// BlobCounter is implemented by every backend that implements BlobIndex.
// CountBlobs scans the blob metadata and reference tables (cost grows with
// the number of blobs: meant for operators' views, not the request path).
type BlobCounter interface {
	CountBlobs(ctx context.Context) (BlobCounts, error)
}
