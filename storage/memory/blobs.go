package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"

	"github.com/synclane/synclane/storage"
)

// blobDB is the database's blob metadata and reference index. Its mutex
// is taken after db.mu (Commit) and never before it.
type blobDB struct {
	mu   sync.Mutex
	meta map[string]*storage.BlobInfo
	// rows maps a referencing row to its blob ids and scopes.
	rows map[rowKey]rowBlobs
	// refs counts references per blob id.
	refs map[string]int
	// pins counts running push transactions that claimed a blob: the
	// orphan sweep skips pinned blobs (the memory stand-in for a row lock).
	pins map[string]int
}

type rowKey struct{ partition, table, rowID string }

type rowBlobs struct {
	ids    []string
	scopes map[string]string
}

// blobTx is a push transaction's staged blob writes.
type blobTx struct {
	touches map[string]int64    // claimed blob -> touch time
	staged  map[rowKey]rowBlobs // row -> new references (ids nil: none)
	pinned  []string
}

func (b *blobDB) init() {
	if b.meta == nil {
		b.meta, b.rows, b.refs, b.pins = map[string]*storage.BlobInfo{}, map[rowKey]rowBlobs{}, map[string]int{}, map[string]int{}
	}
}

// BeginBlobUpload implements storage.BlobIndex.
func (s *Store) BeginBlobUpload(ctx context.Context, id string, nowMs int64) (storage.BlobInfo, error) {
	if err := ctx.Err(); err != nil {
		return storage.BlobInfo{}, err
	}
	b := &s.d.blobs
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	m := b.meta[id]
	switch {
	case m == nil:
		m = &storage.BlobInfo{ID: id, State: storage.BlobUploading, CreatedAtMs: nowMs}
		b.meta[id] = m
	case m.State == storage.BlobDeleting:
		return storage.BlobInfo{}, fmt.Errorf("memory: begin blob upload %s: %w", id, storage.ErrBlobBusy)
	}
	m.TouchedAtMs = max(m.TouchedAtMs, nowMs)
	return *m, nil
}

// CompleteBlobUpload implements storage.BlobIndex.
func (s *Store) CompleteBlobUpload(ctx context.Context, id string, byteLength int64, mediaType string, nowMs int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b := &s.d.blobs
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	m := b.meta[id]
	if m == nil || m.State == storage.BlobDeleting {
		return fmt.Errorf("memory: complete blob upload %s: %w", id, storage.ErrBlobBusy)
	}
	if m.State == storage.BlobUploading {
		m.ByteLength, m.MediaType = byteLength, mediaType
	}
	m.State = storage.BlobPresent
	m.TouchedAtMs = max(m.TouchedAtMs, nowMs)
	return nil
}

// GetBlob implements storage.BlobIndex.
func (s *Store) GetBlob(ctx context.Context, id string) (*storage.BlobInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b := &s.d.blobs
	b.mu.Lock()
	defer b.mu.Unlock()
	if m := b.meta[id]; m != nil {
		c := *m
		return &c, nil
	}
	return nil, nil
}

// BlobRefs implements storage.BlobIndex.
func (s *Store) BlobRefs(ctx context.Context, partition, id string, limit int) ([]storage.BlobRef, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b := &s.d.blobs
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []storage.BlobRef
	for k, rb := range b.rows {
		if k.partition == partition && slices.Contains(rb.ids, id) {
			out = append(out, storage.BlobRef{Table: k.table, RowID: k.rowID, Scopes: maps.Clone(rb.scopes)})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Table != out[j].Table {
			return out[i].Table < out[j].Table
		}
		return out[i].RowID < out[j].RowID
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// MarkOrphanBlobs implements storage.BlobIndex; blobs pinned by a running
// push are skipped.
func (s *Store) MarkOrphanBlobs(ctx context.Context, cutoffMs int64, limit int) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b := &s.d.blobs
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for id, m := range b.meta {
		if len(out) >= limit {
			break
		}
		if m.State == storage.BlobDeleting || (b.refs[id] == 0 && b.pins[id] == 0 && m.TouchedAtMs < cutoffMs) {
			m.State = storage.BlobDeleting
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out, nil
}

// ForgetBlobs implements storage.BlobIndex.
func (s *Store) ForgetBlobs(ctx context.Context, ids []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b := &s.d.blobs
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range ids {
		if m := b.meta[id]; m != nil && m.State == storage.BlobDeleting {
			delete(b.meta, id)
		}
	}
	return nil
}

// AbandonBlobUpload implements storage.BlobIndex.
func (s *Store) AbandonBlobUpload(ctx context.Context, id string, beganMs int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b := &s.d.blobs
	b.mu.Lock()
	defer b.mu.Unlock()
	if m := b.meta[id]; m != nil && m.State == storage.BlobUploading && m.TouchedAtMs == beganMs && b.refs[id] == 0 {
		delete(b.meta, id)
	}
	return nil
}

// ClaimBlob implements storage.BlobTx: a present blob is pinned until the
// transaction ends and touched at Commit.
func (tx *pushTx) ClaimBlob(ctx context.Context, id string, nowMs int64) (bool, error) {
	if err := tx.check(ctx, "claim blob"); err != nil {
		return false, err
	}
	b := &tx.s.d.blobs
	b.mu.Lock()
	b.init()
	m := b.meta[id]
	ok := m != nil && m.State == storage.BlobPresent
	if ok {
		b.pins[id]++
	}
	b.mu.Unlock()
	if !ok {
		return false, nil
	}
	tx.pinned = append(tx.pinned, id)
	if tx.touches == nil {
		tx.touches = map[string]int64{}
	}
	prev, had := tx.touches[id]
	tx.touches[id] = max(prev, nowMs)
	tx.undo = append(tx.undo, func() {
		if had {
			tx.touches[id] = prev
		} else {
			delete(tx.touches, id)
		}
	})
	return true, nil
}

// SetRowBlobs implements storage.BlobTx.
func (tx *pushTx) SetRowBlobs(ctx context.Context, table, rowID string, scopes map[string]string, ids []string) error {
	if err := tx.check(ctx, "set row blobs"); err != nil {
		return err
	}
	if tx.staged == nil {
		tx.staged = map[rowKey]rowBlobs{}
	}
	k := rowKey{tx.info.Partition, table, rowID}
	prev, had := tx.staged[k]
	tx.staged[k] = rowBlobs{ids: slices.Clone(ids), scopes: maps.Clone(scopes)}
	tx.undo = append(tx.undo, func() {
		if had {
			tx.staged[k] = prev
		} else {
			delete(tx.staged, k)
		}
	})
	return nil
}

// setRowLocked replaces row k's references with rb (no ids: none),
// keeping the per-blob counts; b.mu must be held.
func (b *blobDB) setRowLocked(k rowKey, rb rowBlobs) {
	for _, id := range b.rows[k].ids {
		b.refs[id]--
		if b.refs[id] <= 0 {
			delete(b.refs, id)
		}
	}
	if len(rb.ids) == 0 {
		delete(b.rows, k)
		return
	}
	b.rows[k] = rb
	for _, id := range rb.ids {
		b.refs[id]++
	}
}

// captureRefs copies the partition's references (CapturePartition).
func (b *blobDB) captureRefs(partition string) map[rowKey]rowBlobs {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[rowKey]rowBlobs{}
	for k, rb := range b.rows {
		if k.partition == partition {
			out[k] = rowBlobs{ids: slices.Clone(rb.ids), scopes: maps.Clone(rb.scopes)}
		}
	}
	return out
}

// restoreRefs replaces the partition's references with a capture's
// (RestorePartition), so the index matches the restored rows.
func (b *blobDB) restoreRefs(partition string, captured map[rowKey]rowBlobs) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	for k := range b.rows {
		if k.partition == partition {
			b.setRowLocked(k, rowBlobs{})
		}
	}
	for k, rb := range captured {
		b.setRowLocked(k, rowBlobs{ids: slices.Clone(rb.ids), scopes: maps.Clone(rb.scopes)})
	}
}

// publishBlobs applies the staged references and touches (Commit).
func (tx *pushTx) publishBlobs() {
	if len(tx.staged) == 0 && len(tx.touches) == 0 {
		return
	}
	b := &tx.s.d.blobs
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	for k, rb := range tx.staged {
		b.setRowLocked(k, rb)
	}
	for id, at := range tx.touches {
		if m := b.meta[id]; m != nil {
			m.TouchedAtMs = max(m.TouchedAtMs, at)
		}
	}
}

// releaseBlobs drops the transaction's pins (Commit and Rollback).
func (tx *pushTx) releaseBlobs() {
	if len(tx.pinned) == 0 {
		return
	}
	b := &tx.s.d.blobs
	b.mu.Lock()
	for _, id := range tx.pinned {
		if b.pins[id]--; b.pins[id] <= 0 {
			delete(b.pins, id)
		}
	}
	b.mu.Unlock()
	tx.blobTx = blobTx{}
}

// MarkBlobMissing implements storage.BlobIndex.
func (s *Store) MarkBlobMissing(ctx context.Context, id string, nowMs int64) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	b := &s.d.blobs
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.meta[id]
	if m == nil || m.State != storage.BlobPresent {
		return false, nil
	}
	m.State = storage.BlobUploading
	m.TouchedAtMs = max(m.TouchedAtMs, nowMs)
	return true, nil
}

// PresentBlobs implements storage.BlobIndex.
func (s *Store) PresentBlobs(ctx context.Context, afterID string, limit int) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b := &s.d.blobs
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for id, m := range b.meta {
		if m.State == storage.BlobPresent && id > afterID {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	if len(out) > limit {
		out = out[:max(limit, 0)]
	}
	return out, nil
}
