// Package s3blob is the blob store on an S3-compatible service. It links
// minio-go; the blob store interface (package blobstore) does not.
package s3blob

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/synclane/synclane/storage/blobstore"
)

// Options configure an S3-compatible store.
type Options struct {
	// Endpoint is host[:port] (no scheme).
	Endpoint string
	// Bucket must exist; Prefix ("" or "a/b") is prepended to every key.
	Bucket, Prefix string
	Region         string
	// AccessKey and SecretKey are static credentials.
	AccessKey, SecretKey string
	// Insecure talks plain HTTP (loopback test servers).
	Insecure bool
	// PartSize is the multipart part size and the size of one upload
	// buffer (default DefaultPartSize; at least MinPartSize, at most
	// MaxPartSize).
	PartSize int
	// UploadBuffers is how many part buffers the store holds at most
	// (default DefaultUploadBuffers): at most that many uploads run at
	// once, the rest wait for a buffer, and the uploads of the store
	// buffer at most UploadBuffers*PartSize bytes together.
	UploadBuffers int
	// Timeout bounds connecting, the wait for each response's head,
	// and each metadata request whole (default DefaultTimeout); see
	// Store.
	Timeout time.Duration
}

// Part sizes: S3 refuses multipart parts under 5 MiB (except the last).
const (
	MinPartSize     = 5 << 20
	MaxPartSize     = 64 << 20
	DefaultPartSize = MinPartSize
)

// DefaultUploadBuffers is the default Options.UploadBuffers: 8 parts of
// DefaultPartSize, 40 MiB of upload buffers per store.
const DefaultUploadBuffers = 8

// DefaultTimeout is the default Options.Timeout.
const DefaultTimeout = 10 * time.Second

// MaxBlobBytes is the largest blob the S3 store takes: the verified
// upload is moved into place with a single server-side copy, which S3
// limits to 5 GiB.
const MaxBlobBytes int64 = 5 << 30

// Store stores each blob as object <prefix>/sha256/<hex> of a bucket of an
// S3-compatible service (via minio-go).
//
// Put takes one part buffer (Options.PartSize) from the store's pool of
// Options.UploadBuffers, waiting for one when all are in use, and
// streams the body through it while hashing: a body that fits one
// buffer is sent with a single PUT, a longer one as a multipart upload
// of parts of exactly PartSize bytes (the last shorter), one part in
// memory at a time. The body goes to a temporary object
// <prefix>/.tmp/<random>; only when the whole body was at most the cap
// and hashed to the id is it copied server-side to its content-addressed
// key (S3 makes an object visible only once written whole), and the
// temporary object (or multipart upload) is removed either way.
// Temporary objects of a crashed process are left behind: give the
// bucket a lifecycle rule expiring <prefix>/.tmp/ (and incomplete
// multipart uploads) after a day. Parts are sent with UNSIGNED-PAYLOAD
// (no aws-chunked streaming signature, which not every S3-compatible
// server decodes); the body's integrity is the id's SHA-256, checked
// before the copy.
//
// Timeouts (Options.Timeout): connecting (TCP and TLS) and the wait for
// the head of every response are bounded by it; the bucket check of New
// and the metadata requests (stat, delete, multipart create and abort,
// removal of the temporary object) are bounded by it whole. Moving bytes
// (parts, the server-side copy, completing a multipart upload, reads) is
// bounded by the caller's context once the response head arrived.
//
// It implements blobstore.Presigner (SigV4 presigned GET and PUT of the
// content-addressed key).
type Store struct {
	cl             *minio.Client
	core           minio.Core
	bucket, prefix string
	parts          *partPool
	timeout        time.Duration
	endpoint       string
}

var (
	_ blobstore.Store     = (*Store)(nil)
	_ blobstore.Presigner = (*Store)(nil)
)

// ErrTimeout is wrapped by the error of New when the endpoint does not
// answer the bucket check within Options.Timeout.
var ErrTimeout = errors.New("blobstore: s3 endpoint did not answer in time")

// New connects to the service and checks, within Options.Timeout, that
// the bucket exists. An endpoint that does not answer in time fails
// with an error wrapping ErrTimeout that names the endpoint and the
// timeout.
func New(ctx context.Context, o Options) (*Store, error) {
	if o.PartSize == 0 {
		o.PartSize = DefaultPartSize
	}
	if o.PartSize < MinPartSize || o.PartSize > MaxPartSize {
		return nil, fmt.Errorf("blobstore: s3 part size %d outside [%d, %d]", o.PartSize, MinPartSize, MaxPartSize)
	}
	if o.UploadBuffers == 0 {
		o.UploadBuffers = DefaultUploadBuffers
	}
	if o.UploadBuffers < 0 {
		return nil, fmt.Errorf("blobstore: s3 upload buffers %d: must be positive", o.UploadBuffers)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("blobstore: s3 timeout %s: must be positive", o.Timeout)
	}
	tr, err := minio.DefaultTransport(!o.Insecure)
	if err != nil {
		return nil, fmt.Errorf("blobstore: s3 transport: %w", err)
	}
	tr.DialContext = (&net.Dialer{Timeout: o.Timeout, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = o.Timeout
	tr.ResponseHeaderTimeout = o.Timeout
	tr.ExpectContinueTimeout = o.Timeout
	cl, err := minio.New(o.Endpoint, &minio.Options{
		Creds: credentials.NewStaticV4(o.AccessKey, o.SecretKey, ""), Secure: !o.Insecure,
		Region: o.Region, BucketLookup: minio.BucketLookupPath, Transport: tr,
	})
	if err != nil {
		return nil, fmt.Errorf("blobstore: s3 client: %w", err)
	}
	s := &Store{cl: cl, core: minio.Core{Client: cl}, bucket: o.Bucket, parts: newPartPool(o.PartSize, o.UploadBuffers),
		timeout: o.Timeout, endpoint: o.Endpoint}
	cctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	ok, err := cl.BucketExists(cctx, o.Bucket)
	if err != nil {
		if ctx.Err() == nil && cctx.Err() != nil {
			return nil, fmt.Errorf("%w: %s gave no answer to the check of bucket %q within %s: %w", ErrTimeout, o.Endpoint, o.Bucket, o.Timeout, err)
		}
		return nil, fmt.Errorf("blobstore: s3 endpoint %s: bucket %q: %w", o.Endpoint, o.Bucket, err)
	}
	if !ok {
		return nil, fmt.Errorf("blobstore: s3 bucket %q does not exist", o.Bucket)
	}
	p := strings.Trim(o.Prefix, "/")
	if p != "" {
		p += "/"
	}
	s.prefix = p
	return s, nil
}

// bounded returns ctx bounded by the store's timeout.
func (s *Store) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

func (s *Store) key(id string) (string, error) {
	h, err := blobstore.ParseID(id)
	if err != nil {
		return "", err
	}
	return s.prefix + "sha256/" + h, nil
}

func notFound(err error) bool {
	code := minio.ToErrorResponse(err).Code
	return code == "NoSuchKey" || code == "NotFound"
}

// Put implements blobstore.Store.
func (s *Store) Put(ctx context.Context, id string, r io.Reader, maxBytes int64) (int64, error) {
	key, err := s.key(id)
	if err != nil {
		return 0, err
	}
	buf, err := s.parts.get(ctx)
	if err != nil {
		return 0, fmt.Errorf("blobstore: put %s: waiting for an upload buffer: %w", id, err)
	}
	defer s.parts.put(buf)
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	tmp := s.prefix + ".tmp/" + hex.EncodeToString(rnd[:])
	limit := min(maxBytes, MaxBlobBytes)
	v := blobstore.NewVerifier(ctx, r, id, limit)
	n, rerr := io.ReadFull(v, buf)
	switch {
	case rerr == io.EOF || rerr == io.ErrUnexpectedEOF: // the whole body is in buf
		opts := minio.PutObjectOptions{ContentType: "application/octet-stream", DisableContentSha256: true}
		if err := v.Check(); err != nil {
			return v.N(), err
		}
		defer s.removeTmp(ctx, tmp)
		if _, err := s.core.PutObject(ctx, s.bucket, tmp, bytes.NewReader(buf[:n]), int64(n), "", "", opts); err != nil {
			return v.N(), fmt.Errorf("blobstore: put %s: %w", id, err)
		}
	case rerr != nil:
		return v.N(), s.readErr(id, v, limit, rerr)
	default:
		defer s.removeTmp(ctx, tmp)
		if err := s.putParts(ctx, id, tmp, v, buf, limit); err != nil {
			return v.N(), err
		}
	}
	if _, err := s.cl.CopyObject(ctx, minio.CopyDestOptions{Bucket: s.bucket, Object: key}, minio.CopySrcOptions{Bucket: s.bucket, Object: tmp}); err != nil {
		return v.N(), fmt.Errorf("blobstore: put %s: copy into place: %w", id, err)
	}
	return v.N(), nil
}

// putParts uploads the body as a multipart upload to tmp: buf holds its
// first part (full); the rest is read from v into buf part by part. It
// returns once the upload is complete and the body hashed to the id, or
// after aborting it.
func (s *Store) putParts(ctx context.Context, id, tmp string, v *blobstore.Verifier, buf []byte, limit int64) (err error) {
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream", DisableContentSha256: true}
	octx, cancel := s.bounded(ctx)
	upload, err := s.core.NewMultipartUpload(octx, s.bucket, tmp, opts)
	cancel()
	if err != nil {
		return fmt.Errorf("blobstore: put %s: start a multipart upload: %w", id, err)
	}
	defer func() {
		if err != nil {
			actx, cancel := s.bounded(context.WithoutCancel(ctx))
			_ = s.core.AbortMultipartUpload(actx, s.bucket, tmp, upload)
			cancel()
		}
	}()
	var done []minio.CompletePart
	n := len(buf)
	for n > 0 {
		part, err := s.core.PutObjectPart(ctx, s.bucket, tmp, upload, len(done)+1, bytes.NewReader(buf[:n]), int64(n),
			minio.PutObjectPartOptions{DisableContentSha256: true})
		if err != nil {
			return fmt.Errorf("blobstore: put %s: part %d: %w", id, len(done)+1, err)
		}
		done = append(done, minio.CompletePart{PartNumber: part.PartNumber, ETag: part.ETag})
		var rerr error
		n, rerr = io.ReadFull(v, buf)
		if rerr != nil && rerr != io.EOF && rerr != io.ErrUnexpectedEOF {
			return s.readErr(id, v, limit, rerr)
		}
	}
	if err := v.Check(); err != nil {
		return err
	}
	if _, err := s.core.CompleteMultipartUpload(ctx, s.bucket, tmp, upload, done, opts); err != nil {
		return fmt.Errorf("blobstore: put %s: complete the multipart upload: %w", id, err)
	}
	return nil
}

// readErr maps an error reading the body: ErrTooLarge past the cap, the
// reader's (or context's) error otherwise.
func (s *Store) readErr(id string, v *blobstore.Verifier, limit int64, err error) error {
	if errors.Is(err, blobstore.ErrTooLarge) || v.N() > limit {
		return fmt.Errorf("%w (%d bytes)", blobstore.ErrTooLarge, limit)
	}
	return fmt.Errorf("blobstore: put %s: read the body: %w", id, err)
}

// removeTmp deletes a temporary object, even after ctx ended.
func (s *Store) removeTmp(ctx context.Context, tmp string) {
	rctx, cancel := s.bounded(context.WithoutCancel(ctx))
	defer cancel()
	_ = s.cl.RemoveObject(rctx, s.bucket, tmp, minio.RemoveObjectOptions{})
}

// Stat implements blobstore.Store.
func (s *Store) Stat(ctx context.Context, id string) (int64, error) {
	key, err := s.key(id)
	if err != nil {
		return 0, err
	}
	sctx, cancel := s.bounded(ctx)
	defer cancel()
	info, err := s.cl.StatObject(sctx, s.bucket, key, minio.StatObjectOptions{})
	if notFound(err) {
		return 0, fmt.Errorf("%w: %s", blobstore.ErrNotFound, id)
	}
	if err != nil {
		return 0, fmt.Errorf("blobstore: stat %s: %w", id, err)
	}
	return info.Size, nil
}

// Open implements blobstore.Store.
func (s *Store) Open(ctx context.Context, id string, offset, length int64) (io.ReadCloser, error) {
	size, err := s.Stat(ctx, id)
	if err != nil {
		return nil, err
	}
	if length, err = blobstore.CheckRange(id, offset, length, size); err != nil {
		return nil, err
	}
	if length == 0 {
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	key, _ := s.key(id)
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(offset, offset+length-1); err != nil {
		return nil, fmt.Errorf("blobstore: open %s: %w", id, err)
	}
	obj, err := s.cl.GetObject(ctx, s.bucket, key, opts)
	if err != nil {
		return nil, fmt.Errorf("blobstore: open %s: %w", id, err)
	}
	return obj, nil
}

// Delete implements blobstore.Store.
func (s *Store) Delete(ctx context.Context, id string) error {
	key, err := s.key(id)
	if err != nil {
		return err
	}
	dctx, cancel := s.bounded(ctx)
	defer cancel()
	if err := s.cl.RemoveObject(dctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil && !notFound(err) {
		return fmt.Errorf("blobstore: delete %s: %w", id, err)
	}
	return nil
}

// PresignPut implements blobstore.Presigner: a SigV4 presigned PUT of the blob's
// key valid for ttl. (The engine does not hand these to clients: an
// upload that bypasses synclane is neither hash-checked nor recorded.)
func (s *Store) PresignPut(ctx context.Context, id string, byteLength int64, ttl time.Duration) (string, error) {
	key, err := s.key(id)
	if err != nil {
		return "", err
	}
	u, err := s.cl.PresignedPutObject(ctx, s.bucket, key, ttl)
	if err != nil {
		return "", fmt.Errorf("blobstore: presign put %s: %w", id, err)
	}
	return u.String(), nil
}

// PresignGet implements blobstore.Presigner: a SigV4 presigned GET valid for ttl.
func (s *Store) PresignGet(ctx context.Context, id string, ttl time.Duration) (string, error) {
	key, err := s.key(id)
	if err != nil {
		return "", err
	}
	u, err := s.cl.PresignedGetObject(ctx, s.bucket, key, ttl, url.Values{})
	if err != nil {
		return "", fmt.Errorf("blobstore: presign get %s: %w", id, err)
	}
	return u.String(), nil
}
