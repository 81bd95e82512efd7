package partition

import (
	"context"
	"slices"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// blobRefPrefix starts every canonical BlobRef (notes §11); the blob id
// follows it: "sha256:" and 64 hex digits.
const blobRefPrefix = `{"blobId":"`

// blobIDLen is the length of a blob id ("sha256:" + 64 hex).
const blobIDLen = 7 + 64

// BlobIDOf returns the blob id of a blob_ref column value (a canonical
// BlobRef JSON string, as the row codec guarantees); false for NULL or any
// other value.
func BlobIDOf(v any) (string, bool) {
	s, ok := v.(string)
	if !ok || len(s) < len(blobRefPrefix)+blobIDLen || s[:len(blobRefPrefix)] != blobRefPrefix {
		return "", false
	}
	return s[len(blobRefPrefix) : len(blobRefPrefix)+blobIDLen], true
}

// rowBlobIDs returns the distinct blob ids row's blob_ref columns name,
// sorted.
func rowBlobIDs(t *schema.Table, row ssp2.Row) []string {
	var ids []string
	for i, c := range t.Columns {
		if c.Type != ssp2.TypeBlobRef || i >= len(row) {
			continue
		}
		if id, ok := BlobIDOf(row[i]); ok && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// syncBlobRefs keeps the blob reference index in step with a row write in
// tx (SPEC §5.9, §6.6): old is the stored row (nil on insert), row the new
// one (nil on delete). Every blob the new row references and the old one
// did not must be present: it is claimed (touched and, per backend,
// locked against the orphan sweep until the transaction ends; see
// storage.BlobIndex), else the write is rejected with blob.not_found (the
// caller rolls the commit back). Blobs no longer referenced are touched,
// starting their 24 h orphan clock. Tables without blob_ref columns cost
// nothing.
func (p *Partition) syncBlobRefs(ctx context.Context, tx storage.PushTx, t *schema.Table, rowID string, old, row ssp2.Row, scopes map[string]string) (*syncerr.Error, error) {
	before, after := rowBlobIDs(t, old), rowBlobIDs(t, row)
	if slices.Equal(before, after) {
		return nil, nil
	}
	if rej, err := p.claimNewBlobs(ctx, tx, t, rowID, before, after); err != nil || rej != nil {
		return rej, err
	}
	now := p.cfg.Now().UnixMilli()
	for _, id := range before {
		if !slices.Contains(after, id) {
			if _, err := tx.ClaimBlob(ctx, id, now); err != nil { // starts its orphan clock
				return nil, err
			}
		}
	}
	return nil, tx.SetRowBlobs(ctx, t.Name, rowID, scopes, after)
}

// checkRowBlobs is the push pipeline's blob check (SPEC §6.8, notes §13:
// decode, auth and strip, blob check, merge, validator, stage): before any
// host validator sees the write, every blob row references that the
// stored row old did not must be present, else the write is rejected with
// blob.not_found. Present blobs are claimed in tx (see
// storage.BlobTx.ClaimBlob), so none is swept before putRow indexes the
// reference; putRow claims the row as finally written again (a cheap
// re-touch of an already claimed blob), which also covers rows that do
// not come through a push (backfill).
func (p *Partition) checkRowBlobs(ctx context.Context, tx storage.PushTx, t *schema.Table, rowID string, old, row ssp2.Row) (*syncerr.Error, error) {
	before, after := rowBlobIDs(t, old), rowBlobIDs(t, row)
	if slices.Equal(before, after) {
		return nil, nil
	}
	return p.claimNewBlobs(ctx, tx, t, rowID, before, after)
}

// claimNewBlobs claims every id of after that is not in before and
// rejects the write with blob.not_found at the first that is not present.
func (p *Partition) claimNewBlobs(ctx context.Context, bt storage.BlobTx, t *schema.Table, rowID string, before, after []string) (*syncerr.Error, error) {
	now := p.cfg.Now().UnixMilli()
	for _, id := range after {
		if slices.Contains(before, id) {
			continue
		}
		present, err := bt.ClaimBlob(ctx, id, now)
		if err != nil {
			return nil, err
		}
		if !present {
			return syncerr.New(syncerr.BlobNotFound, "%q row %q references blob %s, which has not been uploaded", t.Name, rowID, id), nil
		}
	}
	return nil, nil
}
