package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/synclane/synclane/storage"
)

// Blobs of a Dir. A blob is not a partition's: its metadata (sync_blobs)
// lives in the home file, and its references (sync_blob_refs) next to the
// rows that hold them, in each partition's file. A push of file i > 0
// claims a blob by touching its metadata in the home file in a write
// transaction of its own, committed (without an fsync of its own: see
// touchPresentBlob) before the push's (the write locks
// are always taken file i, then home, never the other way round: no
// deadlock). The orphan sweep marks a blob only if it is untouched since
// its cutoff in the same home transaction in which it reads the
// references of every file, so a blob claimed by a running push (touched
// now) is never marked, and a blob marked first is refused to the push
// (ClaimBlob reports false). A claim undone by the push's rollback keeps
// its touch: the sweep takes that blob a grace period later.

// touchPresentBlob is ClaimBlob's write outside a push: touch id if
// present, in a write transaction of the home file.
func (s *Store) touchPresentBlob(ctx context.Context, id string, nowMs int64) (bool, error) {
	if !storage.Storable(id) {
		return false, nil
	}
	if _, _, _, err := s.current(); err != nil {
		return false, fmt.Errorf("sqlite: claim blob: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return false, fmt.Errorf("sqlite: claim blob: %w", err)
	}
	defer s.unlock()
	// The touch commits without its own fsync (synchronous NORMAL in WAL
	// mode, as a pruning batch): it only has to be visible to the sweep
	// (which reads it under this same write lock) until the push's
	// reference commits in its own file, which then protects the blob by
	// itself; a touch lost in a crash leaves a blob that either a
	// committed reference protects or that nothing references. The home
	// file's next durable commit makes it durable with it.
	if _, err := s.conn.ExecContext(ctx, "PRAGMA synchronous = NORMAL"); err != nil {
		return false, fmt.Errorf("sqlite: claim blob: %w", err)
	}
	defer s.restoreSynchronous()
	var n int64
	err := s.inWriteTx(ctx, "claim blob", func(ctx context.Context) error {
		res, err := s.conn.ExecContext(ctx, `UPDATE sync_blobs SET touched_at_ms = max(touched_at_ms, ?) WHERE blob_id = ? AND state = 1`, nowMs, id)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n == 1, err
}

// referenced returns those of ids some row of the file references.
func (s *Store) referenced(ctx context.Context, ids []string) (map[string]bool, error) {
	out := map[string]bool{}
	if len(ids) == 0 {
		return out, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT DISTINCT blob_id FROM sync_blob_refs WHERE blob_id IN (`+
		strings.TrimSuffix(strings.Repeat("?,", len(ids)), ",")+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: blob references of %s: %w", s.path, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("sqlite: blob references of %s: %w", s.path, err)
		}
		out[id] = true
	}
	return out, rows.Err()
}

// referencedElsewhere returns those of ids a row of a file other than the
// home file references.
func (d *Dir) referencedElsewhere(ctx context.Context, ids []string) (map[string]bool, error) {
	all := map[string]bool{}
	for _, st := range d.files[1:] {
		m, err := st.referenced(ctx, ids)
		if err != nil {
			return nil, err
		}
		for id := range m {
			all[id] = true
		}
	}
	return all, nil
}

// BeginBlobUpload implements storage.BlobIndex (home file).
func (d *Dir) BeginBlobUpload(ctx context.Context, id string, nowMs int64) (storage.BlobInfo, error) {
	return d.home().BeginBlobUpload(ctx, id, nowMs)
}

// CompleteBlobUpload implements storage.BlobIndex (home file).
func (d *Dir) CompleteBlobUpload(ctx context.Context, id string, byteLength int64, mediaType string, nowMs int64) error {
	return d.home().CompleteBlobUpload(ctx, id, byteLength, mediaType, nowMs)
}

// GetBlob implements storage.BlobIndex (home file).
func (d *Dir) GetBlob(ctx context.Context, id string) (*storage.BlobInfo, error) {
	return d.home().GetBlob(ctx, id)
}

// BlobRefs implements storage.BlobIndex (the partition's file).
func (d *Dir) BlobRefs(ctx context.Context, partition, id string, limit int) ([]storage.BlobRef, error) {
	return d.of(partition).BlobRefs(ctx, partition, id, limit)
}

// orphanCandidateSQL selects the home file's orphan candidates (deleting,
// or untouched since ?1 and referenced by no row of the home file).
const orphanCandidateSQL = `SELECT b.blob_id FROM sync_blobs b WHERE (b.state = 2 OR (b.touched_at_ms < ?1
	AND NOT EXISTS (SELECT 1 FROM sync_blob_refs r WHERE r.blob_id = b.blob_id)))`

// orphanWalkPages bounds the pages of candidates one MarkOrphanBlobs call
// of a Dir reads (a page is limit candidates); the next call goes on
// where it stopped.
var orphanWalkPages = 16

// MarkOrphanBlobs implements storage.BlobIndex: the home file's
// candidates (no reference there, untouched since cutoffMs), less those a
// row of another file references. The candidates are first walked on the
// read pools, in id order past those referenced elsewhere, until limit
// are found, none is left or orphanWalkPages pages were read; then the
// ones found are checked again and marked in one home transaction that
// reads the references of every file.
//
// The walk starts where the previous call's stopped (from the first id
// again once it reached the end), so blobs referenced only from other
// files, however many, never hide the orphans after them, and no call
// reads more than orphanWalkPages × limit candidates: a call can return
// fewer than limit (none, even) while orphans remain further on, and a
// later sweep reaches them.
func (d *Dir) MarkOrphanBlobs(ctx context.Context, cutoffMs int64, limit int) ([]string, error) {
	if limit <= 0 {
		return nil, nil
	}
	h := d.home()
	if _, _, _, err := h.current(); err != nil {
		return nil, fmt.Errorf("sqlite: mark orphan blobs: %w", err)
	}
	d.orphanMu.Lock()
	start := d.orphanAfter
	d.orphanMu.Unlock()
	// The walk goes from start to the last id, then (wrapped) from the
	// first id up to start.
	after, wrapped := start, start == ""
	var found []string
	for pages := 0; len(found) < limit && pages < orphanWalkPages; pages++ {
		page, err := scanColumn[string](h.rdb.QueryContext(ctx, orphanCandidateSQL+` AND b.blob_id > ?2 ORDER BY b.blob_id LIMIT ?3`, cutoffMs, after, limit))
		if err != nil {
			return nil, fmt.Errorf("sqlite: mark orphan blobs: %w", err)
		}
		if wrapped && start != "" {
			if n := slices.IndexFunc(page, func(id string) bool { return id > start }); n >= 0 {
				page = page[:n] // past where the walk began: seen already
			}
		}
		used, err := d.referencedElsewhere(ctx, page)
		if err != nil {
			return nil, fmt.Errorf("sqlite: mark orphan blobs: %w", err)
		}
		for _, id := range page {
			if len(found) == limit {
				break // the next call goes on after the last one taken
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
				after = "" // every candidate was seen: the next call starts afresh
				break
			}
			after, wrapped = "", true
		}
	}
	d.orphanMu.Lock()
	d.orphanAfter = after
	d.orphanMu.Unlock()
	if len(found) == 0 {
		return nil, nil
	}
	list, err := json.Marshal(found)
	if err != nil {
		return nil, fmt.Errorf("sqlite: mark orphan blobs: %w", err)
	}
	var ids []string
	err = h.blobWrite(ctx, "mark orphan blobs", func(ctx context.Context) error {
		cands, err := scanColumn[string](h.conn.QueryContext(ctx, orphanCandidateSQL+` AND b.blob_id IN (SELECT value FROM json_each(?2)) ORDER BY b.blob_id`, cutoffMs, string(list)))
		if err != nil {
			return err
		}
		used, err := d.referencedElsewhere(ctx, cands)
		if err != nil {
			return err
		}
		for _, id := range cands {
			if used[id] {
				continue
			}
			if _, err := h.conn.ExecContext(ctx, `UPDATE sync_blobs SET state = 2 WHERE blob_id = ?`, id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	return ids, err
}

// ForgetBlobs implements storage.BlobIndex (home file).
func (d *Dir) ForgetBlobs(ctx context.Context, ids []string) error {
	return d.home().ForgetBlobs(ctx, ids)
}

// AbandonBlobUpload implements storage.BlobIndex: nothing is deleted
// while a row of another file references id (an uploading blob gains no
// reference: ClaimBlob refuses it).
func (d *Dir) AbandonBlobUpload(ctx context.Context, id string, beganMs int64) error {
	used, err := d.referencedElsewhere(ctx, []string{id})
	if err != nil {
		return err
	}
	if used[id] {
		return nil
	}
	return d.home().AbandonBlobUpload(ctx, id, beganMs)
}

// MarkBlobMissing implements storage.BlobIndex (home file).
func (d *Dir) MarkBlobMissing(ctx context.Context, id string, nowMs int64) (bool, error) {
	return d.home().MarkBlobMissing(ctx, id, nowMs)
}

// PresentBlobs implements storage.BlobIndex (home file).
func (d *Dir) PresentBlobs(ctx context.Context, afterID string, limit int) ([]string, error) {
	return d.home().PresentBlobs(ctx, afterID, limit)
}

// CountBlobs implements storage.BlobIndex: the home file's metadata and
// every file's references.
func (d *Dir) CountBlobs(ctx context.Context) (storage.BlobCounts, error) {
	c, err := d.home().CountBlobs(ctx)
	if err != nil {
		return c, err
	}
	for _, st := range d.files[1:] {
		var n int64
		if err := st.readQueryRow(ctx, `SELECT count(*) FROM sync_blob_refs`).Scan(&n); err != nil {
			return storage.BlobCounts{}, fmt.Errorf("sqlite: count blobs: %w", err)
		}
		c.References += n
	}
	return c, nil
}
