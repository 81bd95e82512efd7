package storage

import (
	"context"
	"errors"
)

// Blob metadata and the blob reference index (SPEC §5.9) live in the sync
// database next to the rows that reference blobs, so the reference index
// changes in the same transaction as the rows (the bytes live in a
// storage/blobstore.Store). BlobIndex is a backend's Blobs role
// (Backend.Blobs; every backend has it) and BlobTx is part of every
// PushTx.
//
// Blob lifecycle (BlobState): an upload first marks the blob uploading
// (BeginBlobUpload, which also refreshes TouchedAtMs), then writes the
// bytes, then marks it present (CompleteBlobUpload). Only a present blob
// can be referenced (ClaimBlob). The orphan sweep marks deleting the
// blobs with no reference whose TouchedAtMs is before a cutoff
// (MarkOrphanBlobs), deletes their bytes, then forgets them
// (ForgetBlobs). A present blob whose bytes the byte store lost (found
// on a download or by the sweep's presence check) goes back to uploading
// (MarkBlobMissing) until an upload stores the bytes again.
//
// How the sweep never removes a blob a concurrent push is about to
// reference: a push references a blob only after ClaimBlob, inside its
// write transaction, set the blob's TouchedAtMs to now (and, on
// PostgreSQL, row-locked its metadata until the push ends). MarkOrphanBlobs
// runs in its own transaction and only takes blobs with no reference, not
// touched since the cutoff (24 h ago) and not locked by a running push
// (SKIP LOCKED; a push that committed in between moved TouchedAtMs, which
// the re-check of the locked row sees). SQLite serializes the two
// transactions; the memory backend pins claimed blobs until the push
// ends. Conversely a push claiming a blob the sweep already marked finds
// it deleting and is refused with blob.not_found, before anything
// references it. An upload meeting a deleting blob fails with
// ErrBlobBusy (retry once the sweep forgot it), so the sweep never
// deletes bytes a racing upload just wrote for a blob it then reports
// present. Removing a reference also touches the blob, so a blob is swept
// only 24 h after its last reference went away.

// BlobState is the lifecycle state of a blob's metadata.
type BlobState int8

// Blob states.
const (
	// BlobUploading: an upload began; the bytes may be incomplete.
	BlobUploading BlobState = 0
	// BlobPresent: the bytes are stored and verified; references may be made.
	BlobPresent BlobState = 1
	// BlobDeleting: the orphan sweep is removing the blob.
	BlobDeleting BlobState = 2
)

// ErrBlobBusy reports an upload of a blob the orphan sweep is removing;
// the upload may be retried once the sweep is done (seconds).
var ErrBlobBusy = errors.New("storage: blob is being removed by the orphan sweep")

// BlobInfo is a blob's metadata.
type BlobInfo struct {
	ID          string // "sha256:<64 lowercase hex>"
	ByteLength  int64
	MediaType   string
	State       BlobState
	CreatedAtMs int64
	// TouchedAtMs is the last upload start, reference or dereference.
	TouchedAtMs int64
}

// BlobRef is one row referencing a blob, with the row's scope values
// (scope columns are written only on insert, so these equal the stored
// row's for as long as the reference exists).
type BlobRef struct {
	Table  string
	RowID  string
	Scopes map[string]string
}

// BlobIndex is the Blobs role of a backend: the store-level side of blob
// metadata and references. The engine needs it when blobs are configured
// (engine.Config.Blobs).
type BlobIndex interface {
	// BeginBlobUpload creates id's metadata as BlobUploading if absent and
	// sets TouchedAtMs to nowMs; a present blob is returned unchanged apart
	// from the touch. A blob being swept fails with ErrBlobBusy. It returns
	// the metadata after the call.
	BeginBlobUpload(ctx context.Context, id string, nowMs int64) (BlobInfo, error)
	// CompleteBlobUpload marks id present with its length and media type
	// (only from BlobUploading or BlobPresent; otherwise ErrBlobBusy).
	CompleteBlobUpload(ctx context.Context, id string, byteLength int64, mediaType string, nowMs int64) error
	// GetBlob returns id's metadata or nil.
	GetBlob(ctx context.Context, id string) (*BlobInfo, error)
	// BlobRefs returns up to limit rows of partition referencing id,
	// ordered by (table, row id).
	BlobRefs(ctx context.Context, partition, id string, limit int) ([]BlobRef, error)
	// MarkOrphanBlobs marks BlobDeleting up to limit blobs with no reference
	// in any partition whose TouchedAtMs is before cutoffMs (and which no
	// running push has claimed), and returns them together with blobs
	// already deleting (an earlier sweep that did not finish).
	MarkOrphanBlobs(ctx context.Context, cutoffMs int64, limit int) ([]string, error)
	// ForgetBlobs deletes the metadata of those ids that are BlobDeleting.
	ForgetBlobs(ctx context.Context, ids []string) error
	// AbandonBlobUpload deletes id's metadata if it is still BlobUploading
	// and TouchedAtMs is still beganMs (the nowMs of the refused upload's
	// own BeginBlobUpload), so a refused upload leaves nothing behind; an
	// upload of the same id begun later (touched since) keeps the row, and
	// a present or deleting blob is never touched, nor one that rows
	// reference (a blob marked missing keeps its metadata until the bytes
	// are uploaded again).
	AbandonBlobUpload(ctx context.Context, id string, beganMs int64) error
	// MarkBlobMissing returns id to BlobUploading, touched at nowMs, when
	// it is BlobPresent: the byte store lost its bytes (a database
	// restored without its blob files, a file deleted behind the
	// server's back). Its references, length and media type are kept
	// until a new upload completes; ClaimBlob refuses it meanwhile (new
	// references get blob.not_found), BeginBlobUpload returns it
	// uploading so the next upload stores the bytes again, and the orphan
	// sweep takes it only as it takes any upload (no reference, untouched
	// since the cutoff). It reports whether it changed the metadata
	// (false: absent, uploading or deleting; nothing written).
	MarkBlobMissing(ctx context.Context, id string, nowMs int64) (bool, error)
	// PresentBlobs returns up to limit ids of BlobPresent blobs greater
	// than afterID, in ascending id order ("" starts at the first): the
	// sweep walks them to find present blobs whose bytes are missing.
	PresentBlobs(ctx context.Context, afterID string, limit int) ([]string, error)
	// CountBlobs counts the blob metadata by state and the reference
	// entries, across all partitions. It scans the blob metadata and
	// reference tables (cost grows with the number of blobs: meant for
	// operators' views, not the request path).
	CountBlobs(ctx context.Context) (BlobCounts, error)
}

// BlobCounts counts stored blob metadata by state and the reference
// index's entries, across all partitions.
type BlobCounts struct {
	Uploading int64 `json:"uploading"`
	Present   int64 `json:"present"`
	Deleting  int64 `json:"deleting"`
	// PresentBytes sums the lengths of present blobs.
	PresentBytes int64 `json:"presentBytes"`
	// References counts (partition, table, row, blob) reference entries.
	References int64 `json:"references"`
}

// BlobTx is the write-transaction side of blob references, part of every
// PushTx (a backend without the Blobs role has no present blob: ClaimBlob
// reports false).
type BlobTx interface {
	// ClaimBlob sets a present blob's TouchedAtMs to nowMs in this
	// transaction, keeping the orphan sweep from removing it until the
	// transaction ends, and reports whether the blob is present (false:
	// absent, uploading or being swept; nothing written). Rolling back to
	// a savepoint undoes the touch.
	ClaimBlob(ctx context.Context, id string, nowMs int64) (bool, error)
	// SetRowBlobs replaces the references of row (table, rowID) of the
	// transaction's partition with ids (distinct; empty removes them),
	// recording scopes as the row's scope values.
	SetRowBlobs(ctx context.Context, table, rowID string, scopes map[string]string, ids []string) error
}
