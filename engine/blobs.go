package engine

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/storage/segstore"
)

// DefaultMaxBlobBytes is the default cap of one blob (256 MiB): large
// enough for photos, documents and short videos, small enough that one
// abandoned upload cannot fill a disk before the orphan sweep.
const DefaultMaxBlobBytes int64 = 256 << 20

// DefaultBlobOrphanAge is how long a blob stays unreferenced before the
// orphan sweep removes it (SPEC §5.9: 24 h).
const DefaultBlobOrphanAge = 24 * time.Hour

// blobSweepBatch is how many orphans one sweep step marks; a pass runs at
// most blobSweepBatches steps.
const (
	blobSweepBatch   = 500
	blobSweepBatches = 20
)

// maxBlobRefsChecked bounds the referencing rows a download authorizes
// against; past it a download is refused (blob.forbidden) unless one of
// the first rows passes.
const maxBlobRefsChecked = 1000

// BlobConfig configures blobs (SPEC §5.9).
type BlobConfig struct {
	// Store holds the bytes (blobstore.FS, pgblob.Store, s3blob.Store).
	// Nil disables the blob routes.
	Store blobstore.Store
	// MaxBytes caps one blob (default DefaultMaxBlobBytes): larger
	// uploads and grants are refused with blob.too_large (413) before
	// anything is stored.
	MaxBytes int64
	// OrphanAge is how long a blob stays unreferenced before the
	// maintenance pass removes it (default DefaultBlobOrphanAge).
	OrphanAge time.Duration
}

// BlobStats are the blob counters of this process.
type BlobStats struct {
	Uploads, UploadsRefused uint64
	BytesIn, BytesOut       uint64
	Downloads               uint64
	Swept                   uint64
	SweepPasses             uint64
	// PushesRefused counts pushed commits rejected with blob.not_found (a
	// row referenced a blob that is not uploaded). Like
	// MetricsSnapshot.CommitsRejected it counts PUSH_RESULTs, so a
	// replayed rejection counts again.
	PushesRefused uint64
}

type blobMetrics struct {
	uploads, uploadsRefused, bytesIn, bytesOut, downloads, swept, sweeps atomic.Uint64

	// grantSigner signs upload grants when Config.SignedURLs is unset
	// (random per-process key, made on first use).
	grantOnce   sync.Once
	grantSigner *segstore.Signer

	// presign is the current BlobPresign (Config.BlobPresign at start,
	// then Engine.SetBlobPresign), read by every grant and download.
	presign atomic.Int32
}

// BlobPresign is the presigned-URL switch of blob transfers (SPEC §5.9.3,
// §5.9.5): whether an upload grant mints a presigned PUT URL, and whether
// an authorized download answers a presigned GET URL instead of the
// bytes. URLs already issued stay valid until they expire whatever the
// switch says.
type BlobPresign int32

const (
	// BlobPresignConfigured (the zero value) follows the configuration:
	// upload grants always mint a URL (signed with Config.SignedURLs, or
	// with a per-process key), downloads answer a URL iff
	// Config.SignedURLs is set.
	BlobPresignConfigured BlobPresign = iota
	// BlobPresignOn: grants mint a URL and downloads answer one (signed
	// with Config.SignedURLs, or with the per-process key: 15 minutes).
	BlobPresignOn
	// BlobPresignOff: no presigned URL. A grant answers neither a URL nor
	// the present marker (SPEC §5.9.3 "no grant": the client uploads
	// through PUT /blobs/{id}); downloads stream the bytes.
	BlobPresignOff
)

// SetBlobPresign turns presigned blob URLs on (BlobPresignOn) or off
// (BlobPresignOff) for every grant and download from now on. It is safe
// for concurrent use.
func (e *Engine) SetBlobPresign(enabled bool) {
	m := BlobPresignOff
	if enabled {
		m = BlobPresignOn
	}
	e.blobs.presign.Store(int32(m))
}

// BlobPresignMode returns the current presigned-URL switch.
func (e *Engine) BlobPresignMode() BlobPresign { return BlobPresign(e.blobs.presign.Load()) }

// downloadSigner returns the signer of download URLs under the current
// switch, or nil when downloads stream the bytes.
func (e *Engine) downloadSigner() *segstore.Signer {
	switch e.BlobPresignMode() {
	case BlobPresignOn:
		return e.blobSigner()
	case BlobPresignOff:
		return nil
	default:
		return e.cfg.SignedURLs
	}
}

// BlobStats returns this process's blob counters.
func (e *Engine) BlobStats() BlobStats {
	m := &e.blobs
	return BlobStats{Uploads: m.uploads.Load(), UploadsRefused: m.uploadsRefused.Load(), BytesIn: m.bytesIn.Load(),
		BytesOut: m.bytesOut.Load(), Downloads: m.downloads.Load(), Swept: m.swept.Load(), SweepPasses: m.sweeps.Load(),
		PushesRefused: e.metrics.blobNotFound.Load()}
}

// countRejectedWith counts r's rejected PUSH_RESULTs whose rejection code
// is code.
func countRejectedWith(r *Reply, code syncerr.Code) int {
	n := 0
	for _, f := range r.Frames {
		pr, ok := f.(*ssp2.PushResult)
		if !ok || pr.Status != ssp2.CommitRejected {
			continue
		}
		for _, res := range pr.Results {
			if res.Code == string(code) {
				n++
				break
			}
		}
	}
	return n
}

// BlobsEnabled reports whether a blob store is configured.
func (e *Engine) BlobsEnabled() bool { return e.cfg.Blobs.Store != nil }

// MaxBlobBytes returns the blob size cap.
func (e *Engine) MaxBlobBytes() int64 {
	if n := e.cfg.Blobs.MaxBytes; n > 0 {
		return n
	}
	return DefaultMaxBlobBytes
}

func (e *Engine) blobIndex() (storage.BlobIndex, error) {
	if e.cfg.Blobs.Store == nil {
		return nil, syncerr.New(syncerr.BlobNotFound, "blobs are not enabled on this server")
	}
	return e.cfg.Backend.Blobs, nil // checkRoles: present when Blobs.Store is
}

// UploadBlob stores body as blob blobID (SPEC §5.9 PUT): it streams body
// to the blob store, hashing as it goes, and records the blob present.
// declared is the announced length (-1 unknown); maxBytes caps the body
// (<= 0: MaxBlobBytes). Answers: blob.too_large (declared or actual
// length over the cap; nothing stored), blob.hash_mismatch (the body's
// SHA-256 is not the id; nothing stored), sync.invalid_request (not a blob
// id), retryable sync.internal_error (the orphan sweep is removing this
// blob right now, or storage failed). Uploading a blob already present is
// idempotent: the body is still read and checked, nothing is rewritten.
// The caller authenticated the request (host auth or a signed grant).
func (e *Engine) UploadBlob(ctx context.Context, blobID, mediaType string, declared, maxBytes int64, body io.Reader) (err error) {
	defer func() {
		if err != nil {
			e.blobs.uploadsRefused.Add(1)
		}
	}()
	bi, err := e.blobIndex()
	if err != nil {
		return err
	}
	if _, perr := blobstore.ParseID(blobID); perr != nil {
		return syncerr.New(syncerr.InvalidRequest, "%q is not a blob id (sha256:<64 lowercase hex>)", blobID)
	}
	if maxBytes <= 0 || maxBytes > e.MaxBlobBytes() {
		maxBytes = e.MaxBlobBytes()
	}
	if declared > maxBytes {
		return syncerr.New(syncerr.BlobTooLarge, "blob of %d bytes exceeds the cap of %d bytes", declared, maxBytes)
	}
	began := e.cfg.Now().UnixMilli()
	info, err := bi.BeginBlobUpload(ctx, blobID, began)
	if errors.Is(err, storage.ErrBlobBusy) {
		return syncerr.Wrap(syncerr.InternalError, err, "blob %s is being removed by the orphan sweep; retry in a few seconds", blobID)
	}
	if err != nil {
		return syncerr.Wrap(syncerr.InternalError, err, "recording the upload failed")
	}
	var n int64
	if info.State == storage.BlobPresent {
		v := blobstore.NewVerifier(ctx, body, blobID, maxBytes)
		_, err = io.CopyBuffer(io.Discard, v, make([]byte, 64<<10))
		if err == nil {
			err = v.Check()
		}
		n = v.N()
	} else {
		n, err = e.cfg.Blobs.Store.Put(ctx, blobID, body, maxBytes)
	}
	e.blobs.bytesIn.Add(uint64(max(n, 0)))
	if err != nil && info.State == storage.BlobUploading {
		// Nothing was stored: drop the metadata this upload created (a
		// stream of refused uploads would otherwise leave a row each
		// until the orphan sweep). A failure here only leaves the row to
		// the sweep.
		if aerr := bi.AbandonBlobUpload(context.WithoutCancel(ctx), blobID, began); aerr != nil {
			e.cfg.Logger.Warn("abandoning a refused blob upload failed", zap.String("blob", blobID), zap.Error(aerr))
		}
	}
	switch {
	case errors.Is(err, blobstore.ErrTooLarge):
		return syncerr.New(syncerr.BlobTooLarge, "blob exceeds the cap of %d bytes", maxBytes)
	case errors.Is(err, blobstore.ErrHashMismatch):
		return syncerr.New(syncerr.BlobHashMismatch, "the body's SHA-256 is not %s", blobID)
	case err != nil:
		return syncerr.Wrap(syncerr.InternalError, err, "storing the blob failed")
	}
	if err := bi.CompleteBlobUpload(ctx, blobID, n, mediaType, e.cfg.Now().UnixMilli()); err != nil {
		return syncerr.Wrap(syncerr.InternalError, err, "recording the upload failed; retry")
	}
	e.blobs.uploads.Add(1)
	return nil
}

// BlobGrant answers an upload grant (SPEC §5.9 POST upload-grant). With
// neither Present nor Token, presigned uploads are off (BlobPresignOff):
// no grant, the client uploads through PUT /blobs/{id} (answered {}).
type BlobGrant struct {
	// Present: the blob is already stored; nothing to upload.
	Present bool
	// Token authorizes one PUT of exactly ByteLength bytes (at most) to
	// <base>/blobs/<id>?st=<Token> until ExpiresAtMs.
	Token       string
	ExpiresAtMs int64
}

// UploadGrant authorizes an upload of blob blobID of byteLength bytes by
// the caller (host-authenticated): blob.too_large over the cap,
// sync.invalid_request for a bad id or length. The token is signed with
// Config.SignedURLs, or with a per-process key when that is unset (then
// only this process accepts it). Under BlobPresignOff it answers no grant
// (a zero BlobGrant) once the checks passed, without reading the blob.
func (e *Engine) UploadGrant(ctx context.Context, id Identity, blobID string, byteLength int64) (BlobGrant, error) {
	bi, err := e.blobIndex()
	if err != nil {
		return BlobGrant{}, err
	}
	if id.Partition == "" || id.ActorID == "" {
		return BlobGrant{}, syncerr.New(syncerr.AuthRequired, "request has no authenticated actor or partition")
	}
	if _, perr := blobstore.ParseID(blobID); perr != nil {
		return BlobGrant{}, syncerr.New(syncerr.InvalidRequest, "%q is not a blob id (sha256:<64 lowercase hex>)", blobID)
	}
	if byteLength < 0 {
		return BlobGrant{}, syncerr.New(syncerr.InvalidRequest, "byteLength must be >= 0")
	}
	if byteLength > e.MaxBlobBytes() {
		return BlobGrant{}, syncerr.New(syncerr.BlobTooLarge, "blob of %d bytes exceeds the cap of %d bytes", byteLength, e.MaxBlobBytes())
	}
	if e.BlobPresignMode() == BlobPresignOff {
		return BlobGrant{}, nil
	}
	m, err := bi.GetBlob(ctx, blobID)
	if err != nil {
		return BlobGrant{}, syncerr.Wrap(syncerr.InternalError, err, "reading blob metadata failed")
	}
	if m != nil && m.State == storage.BlobPresent {
		return BlobGrant{Present: true}, nil
	}
	tok, exp := e.blobSigner().SignBlob(id.Partition, blobID, segstore.BlobOpPut, byteLength)
	return BlobGrant{Token: tok, ExpiresAtMs: exp}, nil
}

// blobSigner returns the configured signer or the per-process one.
func (e *Engine) blobSigner() *segstore.Signer {
	if e.cfg.SignedURLs != nil {
		return e.cfg.SignedURLs
	}
	e.blobs.grantOnce.Do(func() {
		key := make([]byte, 32)
		_, _ = rand.Read(key) // crypto/rand.Read never fails
		e.blobs.grantSigner = segstore.NewSigner(key, segstore.MaxSignedURLTTL, e.cfg.Now)
	})
	return e.blobs.grantSigner
}

// VerifyUploadGrant checks a grant token for blobID and returns the
// granted length (the upload's cap); a bad or expired token is
// sync.forbidden.
func (e *Engine) VerifyUploadGrant(blobID, token string) (int64, error) {
	cl, err := e.blobSigner().VerifyBlob(token, blobID, segstore.BlobOpPut)
	if err != nil {
		return 0, syncerr.Wrap(syncerr.Forbidden, err, "the upload URL is invalid or expired")
	}
	return cl.ByteLength, nil
}

// BlobDownload is an authorized download.
type BlobDownload struct {
	Info storage.BlobInfo
	// Token and ExpiresAtMs are set when downloads are presigned (see
	// BlobPresign): the caller answers {"url","urlExpiresAtMs"} instead of
	// the bytes.
	Token       string
	ExpiresAtMs int64
}

// Blob authorizes a download of blobID by the caller (SPEC §5.9 GET):
// allowed iff at least one row of the caller's partition referencing the
// blob passes the write-scope check (§3.4) against the stored row's scope
// values, with the caller's scopes resolved on every call. Answers:
// blob.not_found (no such blob), blob.forbidden (exists, but no
// referencing row passes; also when the resolver fails: fail closed).
func (e *Engine) Blob(ctx context.Context, id Identity, blobID string) (BlobDownload, error) {
	bi, err := e.blobIndex()
	if err != nil {
		return BlobDownload{}, err
	}
	if id.Partition == "" || id.ActorID == "" {
		return BlobDownload{}, syncerr.New(syncerr.AuthRequired, "request has no authenticated actor or partition")
	}
	if verr := partition.ValidateIdentity(id.ActorID, id.Partition); verr != nil {
		return BlobDownload{}, verr
	}
	m, err := e.presentBlob(ctx, bi, blobID)
	if err != nil {
		return BlobDownload{}, err
	}
	refs, err := bi.BlobRefs(ctx, id.Partition, blobID, maxBlobRefsChecked)
	if err != nil {
		return BlobDownload{}, syncerr.Wrap(syncerr.InternalError, err, "reading blob references failed")
	}
	grants, rerr := e.resolver.ResolveScopes(ctx, id)
	if rerr != nil {
		e.cfg.Logger.Warn("scope resolver failed", zap.String("actor", id.ActorID), zap.String("partition", id.Partition), zap.Error(rerr))
		return BlobDownload{}, syncerr.New(syncerr.BlobForbidden, "the caller's scopes could not be resolved")
	}
	allowed := partition.Allowed(grants)
	if !slices.ContainsFunc(refs, func(r storage.BlobRef) bool { return e.refAllowed(r, allowed) }) {
		return BlobDownload{}, syncerr.New(syncerr.BlobForbidden, "no row the caller may access references blob %s", blobID)
	}
	d := BlobDownload{Info: *m}
	if sg := e.downloadSigner(); sg != nil {
		d.Token, d.ExpiresAtMs = sg.SignBlob(id.Partition, blobID, segstore.BlobOpGet, 0)
	}
	return d, nil
}

// refAllowed applies SPEC §3.4 step 3 to a referencing row's scope values:
// every declared variable of its table must hold a value the actor may
// access (or "*").
func (e *Engine) refAllowed(r storage.BlobRef, allowed partition.Allowed) bool {
	t := e.cfg.Schema.Table(r.Table)
	if t == nil {
		return false
	}
	for _, sv := range t.Scopes {
		v, ok := r.Scopes[sv.Var]
		if !ok || v == "" {
			return false
		}
		al := allowed[sv.Var]
		if !slices.Contains(al, partition.Wildcard) && !slices.Contains(al, v) {
			return false
		}
	}
	return true
}

func (e *Engine) presentBlob(ctx context.Context, bi storage.BlobIndex, blobID string) (*storage.BlobInfo, error) {
	if _, perr := blobstore.ParseID(blobID); perr != nil {
		return nil, syncerr.New(syncerr.BlobNotFound, "no blob %q", blobID)
	}
	m, err := bi.GetBlob(ctx, blobID)
	if err != nil {
		return nil, syncerr.Wrap(syncerr.InternalError, err, "reading blob metadata failed")
	}
	if m == nil || m.State != storage.BlobPresent {
		return nil, syncerr.New(syncerr.BlobNotFound, "no blob %s", blobID)
	}
	return m, nil
}

// SignedBlob returns blobID's metadata to the bearer of a signed download
// token (no host auth): a bad, expired or upload token is blob.forbidden,
// an absent blob blob.not_found.
func (e *Engine) SignedBlob(ctx context.Context, blobID, token string) (storage.BlobInfo, error) {
	bi, err := e.blobIndex()
	if err != nil {
		return storage.BlobInfo{}, err
	}
	if _, err := e.blobSigner().VerifyBlob(token, blobID, segstore.BlobOpGet); err != nil {
		return storage.BlobInfo{}, syncerr.Wrap(syncerr.BlobForbidden, err, "the signed blob URL is invalid or expired")
	}
	m, err := e.presentBlob(ctx, bi, blobID)
	if err != nil {
		return storage.BlobInfo{}, err
	}
	return *m, nil
}

// OpenBlob opens length bytes of an authorized blob from offset (length
// < 0: to the end); the bytes read through it are counted.
func (e *Engine) OpenBlob(ctx context.Context, blobID string, offset, length int64) (io.ReadCloser, error) {
	rc, err := e.cfg.Blobs.Store.Open(ctx, blobID, offset, length)
	if errors.Is(err, blobstore.ErrNotFound) {
		return nil, syncerr.New(syncerr.BlobNotFound, "the bytes of blob %s are missing", blobID)
	}
	if err != nil {
		return nil, syncerr.Wrap(syncerr.InternalError, err, "opening the blob failed")
	}
	e.blobs.downloads.Add(1)
	return &countingReader{ReadCloser: rc, n: &e.blobs.bytesOut}, nil
}

type countingReader struct {
	io.ReadCloser
	n *atomic.Uint64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(uint64(n))
	return n, err
}

// SweepBlobs removes orphan blobs: those no row references whose last
// upload, reference or dereference is older than BlobConfig.OrphanAge
// (see storage.BlobIndex for why a blob a concurrent push is about to
// reference is never taken). Per blob: the metadata is marked deleting,
// the bytes deleted, the metadata forgotten; a failed byte deletion
// leaves the blob deleting and the next pass retries it. It returns how
// many blobs it removed; without blobs it does nothing.
func (e *Engine) SweepBlobs(ctx context.Context) (int, error) {
	bi, err := e.blobIndex()
	if err != nil {
		return 0, nil //nolint:nilerr // blobs disabled: nothing to sweep
	}
	e.blobs.sweeps.Add(1)
	age := e.cfg.Blobs.OrphanAge
	if age <= 0 {
		age = DefaultBlobOrphanAge
	}
	cutoff := e.cfg.Now().Add(-age).UnixMilli()
	total := 0
	for range blobSweepBatches {
		ids, err := bi.MarkOrphanBlobs(ctx, cutoff, blobSweepBatch)
		if err != nil {
			return total, err
		}
		gone := ids[:0:0]
		var firstErr error
		for _, id := range ids {
			if err := e.cfg.Blobs.Store.Delete(ctx, id); err != nil {
				e.cfg.Logger.Warn("orphan blob: deleting the bytes failed; retried next pass", zap.String("blob", id), zap.Error(err))
				firstErr = err
				continue
			}
			gone = append(gone, id)
		}
		if err := bi.ForgetBlobs(ctx, gone); err != nil {
			return total, err
		}
		total += len(gone)
		e.blobs.swept.Add(uint64(len(gone)))
		if firstErr != nil {
			return total, firstErr
		}
		if len(ids) < blobSweepBatch {
			break
		}
	}
	if total > 0 {
		e.cfg.Logger.Info("orphan blobs swept", zap.Int("blobs", total))
	}
	return total, nil
}

// PublicURL returns the base URL signed URLs are issued under
// (Config.PublicURL), or "" when none is configured.
func (e *Engine) PublicURL() string {
	if e.cfg.PublicURL == nil {
		return ""
	}
	return e.cfg.PublicURL()
}

// SignBlobURL signs a blob token for op (segstore.BlobOpGet or BlobOpPut)
// on behalf of partition with lifetime ttl, without any authorization
// check: for the test-control surface only.
func (e *Engine) SignBlobURL(partition, blobID, op string, byteLength int64, ttl time.Duration) (token string, expiresAtMs int64) {
	return e.blobSigner().SignBlobTTL(partition, blobID, op, byteLength, ttl)
}
