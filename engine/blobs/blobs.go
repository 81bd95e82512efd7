package blobs

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine/access"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/storage/segstore"
)

func (s *Service) blobIndex() (storage.BlobIndex, error) {
	if s.opts.Store == nil {
		return nil, syncerr.New(syncerr.BlobNotFound, "blobs are not enabled on this server")
	}
	return s.index, nil // engine.New: present when Options.Store is
}

// Upload stores body as blob blobID (SPEC §5.9 PUT): it streams body
// to the blob store, hashing as it goes, and records the blob present.
// declared is the announced length (-1 unknown); maxBytes caps the body
// (<= 0: MaxBytes). Answers: blob.too_large (declared or actual
// length over the cap; nothing stored), blob.hash_mismatch (the body's
// SHA-256 is not the id; nothing stored), sync.invalid_request (not a blob
// id; or the body could not be read to its end: cut short, stalled past a
// read deadline, the client gone — the error wraps the body's, so
// errors.Is(err, os.ErrDeadlineExceeded) tells a stall; nothing stored),
// retryable sync.internal_error (the orphan sweep is removing this blob
// right now, or storage failed). Uploading a blob already present is
// idempotent: the body is still read and checked, nothing is rewritten,
// unless the byte store no longer holds the bytes (or holds another
// length): then the blob is marked missing and this body, once verified,
// is stored again.
// The caller authenticated the request (host auth or a signed grant).
func (s *Service) Upload(ctx context.Context, blobID, mediaType string, declared, maxBytes int64, body io.Reader) (err error) {
	defer func() {
		if err != nil {
			s.uploadsRefused.Add(1)
		}
	}()
	bi, err := s.blobIndex()
	if err != nil {
		return err
	}
	if _, perr := blobstore.ParseID(blobID); perr != nil {
		return syncerr.New(syncerr.InvalidRequest, "%s is not a blob id (sha256:<64 lowercase hex>)", syncerr.Quote(blobID))
	}
	if maxBytes <= 0 || maxBytes > s.MaxBytes() {
		maxBytes = s.MaxBytes()
	}
	if declared > maxBytes {
		return syncerr.New(syncerr.BlobTooLarge, "blob of %d bytes exceeds the cap of %d bytes", declared, maxBytes)
	}
	began := s.deps.Now().UnixMilli()
	info, err := bi.BeginBlobUpload(ctx, blobID, began)
	if errors.Is(err, storage.ErrBlobBusy) {
		return syncerr.Wrap(syncerr.InternalError, err, "blob %s is being removed by the orphan sweep; retry in a few seconds", blobID)
	}
	if err != nil {
		return syncerr.Wrap(syncerr.InternalError, err, "recording the upload failed")
	}
	present := info.State == storage.BlobPresent
	if present {
		// Metadata says present: make sure the bytes are there before
		// only checking the body (a database restored without its blob
		// files, a file deleted behind the server's back); missing or
		// damaged bytes are stored again from this body.
		ok, serr := s.bytesIntact(ctx, blobID, info.ByteLength)
		if serr != nil {
			return syncerr.Wrap(syncerr.InternalError, serr, "checking the stored blob failed; retry")
		}
		if !ok {
			s.markMissing(ctx, bi, blobID, "upload")
			present = false
		}
	}
	var n int64
	in := &bodyReader{r: body}
	body = in
	if present {
		v := blobstore.NewVerifier(ctx, body, blobID, maxBytes)
		_, err = io.CopyBuffer(io.Discard, v, make([]byte, 64<<10))
		if err == nil {
			err = v.Check()
		}
		n = v.N()
	} else {
		n, err = s.opts.Store.Put(ctx, blobID, body, maxBytes)
	}
	s.bytesIn.Add(uint64(max(n, 0)))
	if err != nil && info.State == storage.BlobUploading {
		// Nothing was stored: drop the metadata this upload created (a
		// stream of refused uploads would otherwise leave a row each
		// until the orphan sweep). A failure here only leaves the row to
		// the sweep.
		if aerr := bi.AbandonBlobUpload(context.WithoutCancel(ctx), blobID, began); aerr != nil {
			s.deps.Logger.Warn("abandoning a refused blob upload failed", zap.String("blob", blobID), zap.Error(aerr))
		}
	}
	switch {
	case errors.Is(err, blobstore.ErrTooLarge):
		return syncerr.New(syncerr.BlobTooLarge, "blob exceeds the cap of %d bytes", maxBytes)
	case errors.Is(err, blobstore.ErrHashMismatch):
		return syncerr.New(syncerr.BlobHashMismatch, "the body's SHA-256 is not %s", blobID)
	case err != nil && in.err != nil:
		// The client's fault, not the server's: the body ended early or
		// stopped coming.
		if errors.Is(in.err, os.ErrDeadlineExceeded) {
			return syncerr.Wrap(syncerr.InvalidRequest, in.err, "the blob's body did not arrive within the server's read timeout (%d bytes received); nothing was stored", n)
		}
		return syncerr.Wrap(syncerr.InvalidRequest, in.err, "the blob's body could not be read to its end (%d bytes received: %s); nothing was stored", n, bodyReadCause(in.err))
	case err != nil:
		return syncerr.Wrap(syncerr.InternalError, err, "storing the blob failed")
	}
	if err := bi.CompleteBlobUpload(ctx, blobID, n, mediaType, s.deps.Now().UnixMilli()); err != nil {
		return syncerr.Wrap(syncerr.InternalError, err, "recording the upload failed; retry")
	}
	s.uploads.Add(1)
	return nil
}

// Grant answers an upload grant (SPEC §5.9 POST upload-grant). With
// neither Present nor Token, presigned uploads are off (PresignOff):
// no grant, the client uploads through PUT /blobs/{id} (answered {}).
type Grant struct {
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
// engine.Config.SignedURLs, or with a per-process key when that is unset (then
// only this process accepts it). Under PresignOff it answers no grant
// (a zero Grant) once the checks passed, without reading the blob.
// Present is answered only when the byte store holds the bytes; metadata
// that says present over missing bytes is marked missing and a grant
// is minted.
func (s *Service) UploadGrant(ctx context.Context, id access.Identity, blobID string, byteLength int64) (Grant, error) {
	bi, err := s.blobIndex()
	if err != nil {
		return Grant{}, err
	}
	if id.Partition == "" || id.ActorID == "" {
		return Grant{}, syncerr.New(syncerr.AuthRequired, "request has no authenticated actor or partition")
	}
	if _, perr := blobstore.ParseID(blobID); perr != nil {
		return Grant{}, syncerr.New(syncerr.InvalidRequest, "%s is not a blob id (sha256:<64 lowercase hex>)", syncerr.Quote(blobID))
	}
	if byteLength < 0 {
		return Grant{}, syncerr.New(syncerr.InvalidRequest, "byteLength must be >= 0")
	}
	if byteLength > s.MaxBytes() {
		return Grant{}, syncerr.New(syncerr.BlobTooLarge, "blob of %d bytes exceeds the cap of %d bytes", byteLength, s.MaxBytes())
	}
	if s.PresignMode() == PresignOff {
		return Grant{}, nil
	}
	m, err := bi.GetBlob(ctx, blobID)
	if err != nil {
		return Grant{}, syncerr.Wrap(syncerr.InternalError, err, "reading blob metadata failed")
	}
	if m != nil && m.State == storage.BlobPresent {
		ok, serr := s.bytesIntact(ctx, blobID, m.ByteLength)
		if serr != nil {
			return Grant{}, syncerr.Wrap(syncerr.InternalError, serr, "checking the stored blob failed; retry")
		}
		if ok {
			return Grant{Present: true}, nil
		}
		s.markMissing(ctx, bi, blobID, "upload-grant") // the bytes are asked for again
	}
	tok, exp := s.blobSigner().SignBlob(id.Partition, blobID, segstore.BlobOpPut, byteLength)
	return Grant{Token: tok, ExpiresAtMs: exp}, nil
}

// blobSigner returns the configured signer or the per-process one.
func (s *Service) blobSigner() *segstore.Signer {
	if s.deps.SignedURLs != nil {
		return s.deps.SignedURLs
	}
	s.grantOnce.Do(func() {
		key := make([]byte, 32)
		_, _ = rand.Read(key) // crypto/rand.Read never fails
		s.grantSigner = segstore.NewSigner(key, segstore.MaxSignedURLTTL, s.deps.Now)
	})
	return s.grantSigner
}

// VerifyUploadGrant checks a grant token for blobID and returns the
// granted length (the upload's cap); a bad or expired token is
// sync.forbidden.
func (s *Service) VerifyUploadGrant(blobID, token string) (int64, error) {
	cl, err := s.blobSigner().VerifyBlob(token, blobID, segstore.BlobOpPut)
	if err != nil {
		return 0, syncerr.Wrap(syncerr.Forbidden, err, "the upload URL is invalid or expired")
	}
	return cl.ByteLength, nil
}

// Download is an authorized download.
type Download struct {
	Info storage.BlobInfo
	// Token and ExpiresAtMs are set when downloads are presigned (see
	// Presign): the caller answers {"url","urlExpiresAtMs"} instead of
	// the bytes.
	Token       string
	ExpiresAtMs int64
}

// Authorize authorizes a download of blobID by the caller (SPEC §5.9 GET):
// allowed iff at least one row of the caller's partition referencing the
// blob passes the write-scope check (§3.4) against the stored row's scope
// values, with the caller's scopes resolved on every call. Answers:
// blob.not_found (no such blob), blob.forbidden (exists, but no
// referencing row passes; also when the resolver fails: fail closed).
func (s *Service) Authorize(ctx context.Context, id access.Identity, blobID string) (Download, error) {
	bi, err := s.blobIndex()
	if err != nil {
		return Download{}, err
	}
	if id.Partition == "" || id.ActorID == "" {
		return Download{}, syncerr.New(syncerr.AuthRequired, "request has no authenticated actor or partition")
	}
	if verr := partition.ValidateIdentity(id.ActorID, id.Partition); verr != nil {
		return Download{}, verr
	}
	m, err := s.presentBlob(ctx, bi, blobID)
	if err != nil {
		return Download{}, err
	}
	refs, err := bi.BlobRefs(ctx, id.Partition, blobID, maxRefsChecked)
	if err != nil {
		return Download{}, syncerr.Wrap(syncerr.InternalError, err, "reading blob references failed")
	}
	grants, rerr := s.deps.Resolver.ResolveScopes(ctx, id)
	if rerr != nil {
		s.deps.Logger.Warn("scope resolver failed", zap.String("actor", id.ActorID), zap.String("partition", id.Partition), zap.Error(rerr))
		return Download{}, syncerr.New(syncerr.BlobForbidden, "the caller's scopes could not be resolved")
	}
	allowed := partition.Allowed(grants)
	if !slices.ContainsFunc(refs, func(r storage.BlobRef) bool { return s.refAllowed(r, allowed) }) {
		return Download{}, syncerr.New(syncerr.BlobForbidden, "no row the caller may access references blob %s", blobID)
	}
	d := Download{Info: *m}
	if sg := s.downloadSigner(); sg != nil {
		d.Token, d.ExpiresAtMs = sg.SignBlob(id.Partition, blobID, segstore.BlobOpGet, 0)
	}
	return d, nil
}

// refAllowed applies SPEC §3.4 step 3 to a referencing row's scope values:
// every declared variable of its table must hold a value the actor may
// access (or "*").
func (s *Service) refAllowed(r storage.BlobRef, allowed partition.Allowed) bool {
	t := s.deps.Schema.Table(r.Table)
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

func (s *Service) presentBlob(ctx context.Context, bi storage.BlobIndex, blobID string) (*storage.BlobInfo, error) {
	if _, perr := blobstore.ParseID(blobID); perr != nil {
		return nil, syncerr.New(syncerr.BlobNotFound, "no blob %s", syncerr.Quote(blobID))
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

// AuthorizeSigned returns blobID's metadata to the bearer of a signed download
// token (no host auth): a bad, expired or upload token is blob.forbidden,
// an absent blob blob.not_found.
func (s *Service) AuthorizeSigned(ctx context.Context, blobID, token string) (storage.BlobInfo, error) {
	bi, err := s.blobIndex()
	if err != nil {
		return storage.BlobInfo{}, err
	}
	if _, err := s.blobSigner().VerifyBlob(token, blobID, segstore.BlobOpGet); err != nil {
		return storage.BlobInfo{}, syncerr.Wrap(syncerr.BlobForbidden, err, "the signed blob URL is invalid or expired")
	}
	m, err := s.presentBlob(ctx, bi, blobID)
	if err != nil {
		return storage.BlobInfo{}, err
	}
	return *m, nil
}

// Open opens length bytes of an authorized blob from offset (length
// < 0: to the end); the bytes read through it are counted. Bytes missing
// from the byte store are blob.not_found, and the blob is marked missing
// (storage.BlobIndex.MarkBlobMissing): upload grants ask for the bytes
// again and the next upload stores them.
func (s *Service) Open(ctx context.Context, blobID string, offset, length int64) (io.ReadCloser, error) {
	rc, err := s.opts.Store.Open(ctx, blobID, offset, length)
	if errors.Is(err, blobstore.ErrNotFound) {
		s.markMissing(ctx, s.index, blobID, "download")
		return nil, syncerr.New(syncerr.BlobNotFound, "the bytes of blob %s are missing; upload them again", blobID)
	}
	if err != nil {
		return nil, syncerr.Wrap(syncerr.InternalError, err, "opening the blob failed")
	}
	s.downloads.Add(1)
	return &countingReader{ReadCloser: rc, n: &s.bytesOut}, nil
}

type countingReader struct {
	io.ReadCloser
	n *atomic.Uint64
}

// Read reads from the blob and counts the bytes read.
func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(uint64(n))
	return n, err
}

// bytesIntact reports whether the byte store holds byteLength bytes for
// blobID (false: absent or another length); other store errors are
// returned.
func (s *Service) bytesIntact(ctx context.Context, blobID string, byteLength int64) (bool, error) {
	n, err := s.opts.Store.Stat(ctx, blobID)
	switch {
	case errors.Is(err, blobstore.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return n == byteLength, nil
}

// markMissing marks blobID missing (present metadata, bytes gone), and
// logs, counts and reports it when it was present; foundBy names where
// it was found ("download", "upload", "sweep"). It runs to completion
// even when ctx ends (the request that found it may be gone).
func (s *Service) markMissing(ctx context.Context, bi storage.BlobIndex, blobID, foundBy string) {
	changed, err := bi.MarkBlobMissing(context.WithoutCancel(ctx), blobID, s.deps.Now().UnixMilli())
	if err != nil {
		s.deps.Logger.Warn("blob bytes missing: marking the blob missing failed", zap.String("blob", blobID), zap.String("found_by", foundBy), zap.Error(err))
		return
	}
	if !changed {
		return
	}
	s.missing.Add(1)
	s.deps.Logger.Warn("blob bytes missing from the byte store: marked missing until an upload stores them again",
		zap.String("blob", blobID), zap.String("found_by", foundBy))
	s.deps.Events.Emit(events.Event{Kind: events.BlobMissing, Code: string(syncerr.BlobNotFound), Source: "blobs",
		Message: "blob " + blobID + " was present in the metadata but its bytes are missing (found by " + foundBy + "); marked missing until re-uploaded"})
}

// checkPresent checks up to Options.CheckPerPass present blobs, resuming
// after the last one the previous pass checked (wrapping around at the
// end), and marks those whose bytes are missing or of another length. It
// returns how many it marked.
func (s *Service) checkPresent(ctx context.Context, bi storage.BlobIndex) (int, error) {
	limit := s.opts.CheckPerPass
	if limit == 0 {
		limit = DefaultCheckPerPass
	}
	if limit < 0 {
		return 0, nil
	}
	s.checkMu.Lock()
	defer s.checkMu.Unlock()
	ids, err := bi.PresentBlobs(ctx, s.checkAfter, limit)
	if err != nil {
		return 0, err
	}
	marked := 0
	for _, id := range ids {
		m, err := bi.GetBlob(ctx, id)
		if err != nil {
			return marked, err
		}
		if m == nil || m.State != storage.BlobPresent {
			s.checkAfter = id
			continue // swept or marked since the listing
		}
		ok, err := s.bytesIntact(ctx, id, m.ByteLength)
		if err != nil {
			return marked, err // the store failing: retried next pass from here
		}
		s.checks.Add(1)
		s.checkAfter = id
		if !ok {
			s.markMissing(ctx, bi, id, "sweep")
			marked++
		}
	}
	if len(ids) < limit {
		s.checkAfter = "" // walked them all: start over next pass
	}
	return marked, nil
}

// Sweep removes orphan blobs: those no row references whose last
// upload, reference or dereference is older than Options.OrphanAge
// (see storage.BlobIndex for why a blob a concurrent push is about to
// reference is never taken). Per blob: the metadata is marked deleting,
// the bytes deleted, the metadata forgotten; a failed byte deletion
// leaves the blob deleting and the next pass retries it. It returns how
// many blobs it removed; without blobs it does nothing. After the orphans
// it checks up to Options.CheckPerPass present blobs still have their
// bytes (all of them over successive passes) and marks those missing
// whose bytes are gone or of another length (see Open).
func (s *Service) Sweep(ctx context.Context) (int, error) {
	bi, err := s.blobIndex()
	if err != nil {
		return 0, nil //nolint:nilerr // blobs disabled: nothing to sweep
	}
	s.sweeps.Add(1)
	age := s.opts.OrphanAge
	if age <= 0 {
		age = DefaultOrphanAge
	}
	cutoff := s.deps.Now().Add(-age).UnixMilli()
	total := 0
	for range sweepBatches {
		ids, err := bi.MarkOrphanBlobs(ctx, cutoff, sweepBatch)
		if err != nil {
			return total, err
		}
		gone := ids[:0:0]
		var firstErr error
		for _, id := range ids {
			if err := s.opts.Store.Delete(ctx, id); err != nil {
				s.deps.Logger.Warn("orphan blob: deleting the bytes failed; retried next pass", zap.String("blob", id), zap.Error(err))
				firstErr = err
				continue
			}
			gone = append(gone, id)
		}
		if err := bi.ForgetBlobs(ctx, gone); err != nil {
			return total, err
		}
		total += len(gone)
		s.swept.Add(uint64(len(gone)))
		if firstErr != nil {
			return total, firstErr
		}
		if len(ids) < sweepBatch {
			break
		}
	}
	if total > 0 {
		s.deps.Logger.Info("orphan blobs swept", zap.Int("blobs", total))
	}
	if _, err := s.checkPresent(ctx, bi); err != nil {
		return total, fmt.Errorf("blobs: checking present blobs' bytes: %w", err)
	}
	return total, nil
}

// PublicURL returns the base URL signed URLs are issued under
// (engine.Config.PublicURL), or "" when none is configured.
func (s *Service) PublicURL() string {
	if s.deps.PublicURL == nil {
		return ""
	}
	return s.deps.PublicURL()
}

// SignURL signs a blob token for op (segstore.BlobOpGet or BlobOpPut)
// on behalf of partition with lifetime ttl, without any authorization
// check: for the test-control surface only.
func (s *Service) SignURL(partition, blobID, op string, byteLength int64, ttl time.Duration) (token string, expiresAtMs int64) {
	return s.blobSigner().SignBlobTTL(partition, blobID, op, byteLength, ttl)
}

// bodyReader keeps the first error reading an upload's body that is not
// its end, telling a client's fault (a body cut short or stalled) from the
// store's.
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && b.err == nil {
		b.err = err
	}
	return n, err
}

// bodyReadCause says briefly why a body could not be read (a fixed
// phrase: the underlying error may quote addresses).
func bodyReadCause(err error) string {
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "it ended before its Content-Length"
	case errors.Is(err, context.Canceled):
		return "the request was abandoned"
	}
	return "the connection failed"
}
