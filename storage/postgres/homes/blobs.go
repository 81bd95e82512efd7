package homes

import (
	"context"
	"slices"

	"github.com/synclane/synclane/storage"
)

// Blobs across homes. A blob is not a partition's: its metadata
// (sync_blobs) lives in main, and its references (sync_blob_refs) next to
// the rows that hold them, in each partition's home. A push of another
// home claims a blob by touching its metadata in main in a statement of
// its own, committed before the push (homeTx.ClaimBlob). The orphan
// sweep marks a blob only if it is untouched since its cutoff, in one
// main transaction that holds the candidates' row locks while it reads
// the references of every other home
// (postgres.Store.MarkOrphanBlobsChecked): a claim of a candidate waits
// for that transaction and then finds the blob deleting (refused: the
// push answers blob.not_found), and a claim committed before made the
// blob no candidate. A claim undone by its push's rollback keeps its
// touch: the sweep takes that blob a grace period later.

// referencedElsewhere returns those of ids a row of a home other than
// main references.
func (h *Homes) referencedElsewhere(ctx context.Context, ids []string) (map[string]bool, error) {
	all := map[string]bool{}
	for _, hm := range h.homes[1:] {
		m, err := hm.st.ReferencedBlobs(ctx, ids)
		if err != nil {
			return nil, h.unavailable(hm, err)
		}
		for id := range m {
			all[id] = true
		}
	}
	return all, nil
}

// BeginBlobUpload implements storage.BlobIndex (main).
func (h *Homes) BeginBlobUpload(ctx context.Context, id string, nowMs int64) (storage.BlobInfo, error) {
	b, err := h.main().st.BeginBlobUpload(ctx, id, nowMs)
	return b, h.unavailable(h.main(), err)
}

// CompleteBlobUpload implements storage.BlobIndex (main).
func (h *Homes) CompleteBlobUpload(ctx context.Context, id string, byteLength int64, mediaType string, nowMs int64) error {
	return h.unavailable(h.main(), h.main().st.CompleteBlobUpload(ctx, id, byteLength, mediaType, nowMs))
}

// GetBlob implements storage.BlobIndex (main).
func (h *Homes) GetBlob(ctx context.Context, id string) (*storage.BlobInfo, error) {
	b, err := h.main().st.GetBlob(ctx, id)
	return b, h.unavailable(h.main(), err)
}

// BlobRefs implements storage.BlobIndex (the partition's home).
func (h *Homes) BlobRefs(ctx context.Context, partition, id string, limit int) ([]storage.BlobRef, error) {
	hm, err := h.reading(ctx, partition)
	if err != nil {
		return nil, err
	}
	rs, err := hm.st.BlobRefs(ctx, partition, id, limit)
	return rs, h.unavailable(hm, err)
}

// orphanWalkPages bounds the pages of candidates one MarkOrphanBlobs call
// reads (a page is limit candidates); the next call goes on where it
// stopped.
var orphanWalkPages = 16

// MarkOrphanBlobs implements storage.BlobIndex: main's candidates (no
// reference in main, untouched since cutoffMs), less those a row of
// another home references. The candidates are first walked in id order
// past those referenced elsewhere, until limit are found, none is left or
// orphanWalkPages pages were read; then the ones found are checked again
// and marked in one main transaction that reads the references of every
// other home. The walk starts where the previous call's stopped (from the
// first id again once it reached the end), so blobs referenced only from
// other homes never hide the orphans after them; a call can return fewer
// than limit while orphans remain further on, which a later sweep
// reaches.
func (h *Homes) MarkOrphanBlobs(ctx context.Context, cutoffMs int64, limit int) ([]string, error) {
	if limit <= 0 {
		return nil, nil
	}
	m := h.main()
	h.orphanMu.Lock()
	start := h.orphanAfter
	h.orphanMu.Unlock()
	after, wrapped := start, start == ""
	var found []string
	for pages := 0; len(found) < limit && pages < orphanWalkPages; pages++ {
		page, err := m.st.OrphanBlobCandidates(ctx, cutoffMs, after, limit)
		if err != nil {
			return nil, h.unavailable(m, err)
		}
		if wrapped && start != "" {
			if n := slices.IndexFunc(page, func(id string) bool { return id > start }); n >= 0 {
				page = page[:n] // past where the walk began: seen already
			}
		}
		used, err := h.referencedElsewhere(ctx, page)
		if err != nil {
			return nil, err
		}
		for _, id := range page {
			if len(found) == limit {
				break
			}
			after = id
			if !used[id] {
				found = append(found, id)
			}
		}
		if len(found) == limit {
			break
		}
		if len(page) < limit {
			if wrapped {
				after = ""
				break
			}
			after, wrapped = "", true
		}
	}
	h.orphanMu.Lock()
	h.orphanAfter = after
	h.orphanMu.Unlock()
	if len(found) == 0 {
		return nil, nil
	}
	ids, err := m.st.MarkOrphanBlobsChecked(ctx, cutoffMs, found, h.referencedElsewhere)
	return ids, h.unavailable(m, err)
}

// ForgetBlobs implements storage.BlobIndex (main).
func (h *Homes) ForgetBlobs(ctx context.Context, ids []string) error {
	return h.unavailable(h.main(), h.main().st.ForgetBlobs(ctx, ids))
}

// AbandonBlobUpload implements storage.BlobIndex: nothing is deleted
// while a row of another home references id (an uploading blob gains no
// reference: ClaimBlob refuses it).
func (h *Homes) AbandonBlobUpload(ctx context.Context, id string, beganMs int64) error {
	used, err := h.referencedElsewhere(ctx, []string{id})
	if err != nil {
		return err
	}
	if used[id] {
		return nil
	}
	return h.unavailable(h.main(), h.main().st.AbandonBlobUpload(ctx, id, beganMs))
}

// MarkBlobMissing implements storage.BlobIndex (main).
func (h *Homes) MarkBlobMissing(ctx context.Context, id string, nowMs int64) (bool, error) {
	ok, err := h.main().st.MarkBlobMissing(ctx, id, nowMs)
	return ok, h.unavailable(h.main(), err)
}

// PresentBlobs implements storage.BlobIndex (main).
func (h *Homes) PresentBlobs(ctx context.Context, afterID string, limit int) ([]string, error) {
	ids, err := h.main().st.PresentBlobs(ctx, afterID, limit)
	return ids, h.unavailable(h.main(), err)
}

// CountBlobs implements storage.BlobIndex: main's metadata and every
// home's references (the other homes hold no metadata: their counts of
// it are 0).
func (h *Homes) CountBlobs(ctx context.Context) (storage.BlobCounts, error) {
	var sum storage.BlobCounts
	for _, hm := range h.homes {
		c, err := hm.st.CountBlobs(ctx)
		if err != nil {
			return storage.BlobCounts{}, h.unavailable(hm, err)
		}
		sum.Uploading += c.Uploading
		sum.Present += c.Present
		sum.Deleting += c.Deleting
		sum.PresentBytes += c.PresentBytes
		sum.References += c.References
	}
	return sum, nil
}
