package testcontrol

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/segstore"
)

// The store wrapper forwards blob metadata and references to the wrapped
// store (storage.BlobIndex, storage.BlobTx), which every backend has.

var (
	_ storage.BlobIndex = (*Store)(nil)
	_ storage.BlobTx    = (*pushTx)(nil)
)

func (s *Store) blobs() (storage.BlobIndex, error) {
	bi, ok := s.Store.(storage.BlobIndex)
	if !ok {
		return nil, fmt.Errorf("testcontrol: %T keeps no blob metadata", s.Store)
	}
	return bi, nil
}

// BeginBlobUpload implements storage.BlobIndex.
func (s *Store) BeginBlobUpload(ctx context.Context, id string, nowMs int64) (storage.BlobInfo, error) {
	bi, err := s.blobs()
	if err != nil {
		return storage.BlobInfo{}, err
	}
	return bi.BeginBlobUpload(ctx, id, nowMs)
}

// CompleteBlobUpload implements storage.BlobIndex.
func (s *Store) CompleteBlobUpload(ctx context.Context, id string, n int64, mediaType string, nowMs int64) error {
	bi, err := s.blobs()
	if err != nil {
		return err
	}
	return bi.CompleteBlobUpload(ctx, id, n, mediaType, nowMs)
}

// GetBlob implements storage.BlobIndex.
func (s *Store) GetBlob(ctx context.Context, id string) (*storage.BlobInfo, error) {
	bi, err := s.blobs()
	if err != nil {
		return nil, err
	}
	return bi.GetBlob(ctx, id)
}

// BlobRefs implements storage.BlobIndex.
func (s *Store) BlobRefs(ctx context.Context, partition, id string, limit int) ([]storage.BlobRef, error) {
	bi, err := s.blobs()
	if err != nil {
		return nil, err
	}
	return bi.BlobRefs(ctx, partition, id, limit)
}

// MarkOrphanBlobs implements storage.BlobIndex.
func (s *Store) MarkOrphanBlobs(ctx context.Context, cutoffMs int64, limit int) ([]string, error) {
	bi, err := s.blobs()
	if err != nil {
		return nil, err
	}
	return bi.MarkOrphanBlobs(ctx, cutoffMs, limit)
}

// ForgetBlobs implements storage.BlobIndex.
func (s *Store) ForgetBlobs(ctx context.Context, ids []string) error {
	bi, err := s.blobs()
	if err != nil {
		return err
	}
	return bi.ForgetBlobs(ctx, ids)
}

// AbandonBlobUpload implements storage.BlobIndex.
func (s *Store) AbandonBlobUpload(ctx context.Context, id string, beganMs int64) error {
	bi, err := s.blobs()
	if err != nil {
		return err
	}
	return bi.AbandonBlobUpload(ctx, id, beganMs)
}

func (t *pushTx) blobTx() (storage.BlobTx, error) {
	bt, ok := t.PushTx.(storage.BlobTx)
	if !ok {
		return nil, fmt.Errorf("testcontrol: %T keeps no blob references", t.PushTx)
	}
	return bt, nil
}

// ClaimBlob implements storage.BlobTx.
func (t *pushTx) ClaimBlob(ctx context.Context, id string, nowMs int64) (bool, error) {
	bt, err := t.blobTx()
	if err != nil {
		return false, err
	}
	return bt.ClaimBlob(ctx, id, nowMs)
}

// SetRowBlobs implements storage.BlobTx.
func (t *pushTx) SetRowBlobs(ctx context.Context, table, rowID string, scopes map[string]string, ids []string) error {
	bt, err := t.blobTx()
	if err != nil {
		return err
	}
	return bt.SetRowBlobs(ctx, table, rowID, scopes, ids)
}

// blobPresign issues a signed blob URL without host auth or an
// authorization check, for conformance tests of presigned transfers and
// their expiry: body {"blobId","method":"GET"|"PUT","byteLength"?,
// "ttlSeconds"} (0 <= ttlSeconds <= 900; 0 issues a URL already expired
// beyond the 60 s skew) → {"url","urlExpiresAtMs"}. The partition is
// x-partition's. 409 when the server serves no blobs.
func (c Controls) blobPresign(w http.ResponseWriter, r *http.Request) {
	if !c.Engine.BlobsEnabled() {
		writeError(w, http.StatusConflict, syncerr.New(syncerr.InvalidRequest, "this server stores no blobs"))
		return
	}
	var body struct {
		BlobID     string `json:"blobId"`
		Method     string `json:"method"`
		ByteLength int64  `json:"byteLength"`
		TTLSeconds *int64 `json:"ttlSeconds"`
	}
	if !readJSON(w, r, &body) {
		return
	}
	op := map[string]string{"GET": segstore.BlobOpGet, "PUT": segstore.BlobOpPut}
	o, ok := op[strings.ToUpper(body.Method)]
	if !ok || body.BlobID == "" || body.ByteLength < 0 || body.TTLSeconds == nil || *body.TTLSeconds < 0 || *body.TTLSeconds > int64(segstore.MaxSignedURLTTL/time.Second) {
		writeError(w, http.StatusBadRequest, syncerr.New(syncerr.InvalidRequest, `body must be {"blobId":id,"method":"GET"|"PUT","byteLength"?:n,"ttlSeconds":0..900}`))
		return
	}
	tok, exp := c.Engine.SignBlobURL(partitionOf(r), body.BlobID, o, body.ByteLength, time.Duration(*body.TTLSeconds)*time.Second)
	writeJSON(w, struct {
		URL            string `json:"url"`
		URLExpiresAtMs int64  `json:"urlExpiresAtMs"`
	}{strings.TrimRight(c.Engine.PublicURL(), "/") + "/blobs/" + body.BlobID + "?st=" + tok, exp})
}
