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
}

// PartSize is the multipart part size of an upload: the memory one
// streaming Put holds.
const PartSize = 16 << 20

// MaxBlobBytes is the largest blob the S3 store takes: the verified
// upload is moved into place with a single server-side copy, which S3
// limits to 5 GiB.
const MaxBlobBytes int64 = 5 << 30

// Store stores each blob as object <prefix>/sha256/<hex> of a bucket of an
// S3-compatible service (via minio-go). Put streams the body to a
// temporary object <prefix>/.tmp/<random> (multipart, one part of
// PartSize in memory) while hashing it; only when the whole body was at
// most the cap and hashed to the id is it copied server-side to its
// content-addressed key (S3 makes an object visible only once written
// whole), and the temporary object is deleted either way. Temporary
// objects of a crashed process are left behind: give the bucket a
// lifecycle rule expiring <prefix>/.tmp/ after a day. It implements
// blobstore.Presigner (SigV4 presigned GET and PUT of the
// content-addressed key). Parts are sent with UNSIGNED-PAYLOAD (no
// aws-chunked streaming signature, which not every S3-compatible server
// decodes); the body's integrity is the id's SHA-256, checked before the
// copy.
type Store struct {
	cl             *minio.Client
	bucket, prefix string
}

var (
	_ blobstore.Store     = (*Store)(nil)
	_ blobstore.Presigner = (*Store)(nil)
)

// New connects to the service and checks that the bucket exists.
func New(ctx context.Context, o Options) (*Store, error) {
	cl, err := minio.New(o.Endpoint, &minio.Options{
		Creds: credentials.NewStaticV4(o.AccessKey, o.SecretKey, ""), Secure: !o.Insecure,
		Region: o.Region, BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		return nil, fmt.Errorf("blobstore: s3 client: %w", err)
	}
	ok, err := cl.BucketExists(ctx, o.Bucket)
	if err != nil {
		return nil, fmt.Errorf("blobstore: s3 bucket %q: %w", o.Bucket, err)
	}
	if !ok {
		return nil, fmt.Errorf("blobstore: s3 bucket %q does not exist", o.Bucket)
	}
	p := strings.Trim(o.Prefix, "/")
	if p != "" {
		p += "/"
	}
	return &Store{cl: cl, bucket: o.Bucket, prefix: p}, nil
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
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	tmp := s.prefix + ".tmp/" + hex.EncodeToString(rnd[:])
	limit := min(maxBytes, MaxBlobBytes)
	v := blobstore.NewVerifier(ctx, r, id, limit)
	defer func() { _ = s.cl.RemoveObject(context.WithoutCancel(ctx), s.bucket, tmp, minio.RemoveObjectOptions{}) }()
	if _, err := s.cl.PutObject(ctx, s.bucket, tmp, v, -1, minio.PutObjectOptions{PartSize: PartSize, ContentType: "application/octet-stream",
		DisableContentSha256: true}); err != nil {
		if errors.Is(err, blobstore.ErrTooLarge) || v.N() > limit {
			return v.N(), fmt.Errorf("%w (%d bytes)", blobstore.ErrTooLarge, limit)
		}
		return v.N(), fmt.Errorf("blobstore: put %s: %w", id, err)
	}
	if err := v.Check(); err != nil {
		return v.N(), err
	}
	if _, err := s.cl.CopyObject(ctx, minio.CopyDestOptions{Bucket: s.bucket, Object: key}, minio.CopySrcOptions{Bucket: s.bucket, Object: tmp}); err != nil {
		return v.N(), fmt.Errorf("blobstore: put %s: copy into place: %w", id, err)
	}
	return v.N(), nil
}

// Stat implements blobstore.Store.
func (s *Store) Stat(ctx context.Context, id string) (int64, error) {
	key, err := s.key(id)
	if err != nil {
		return 0, err
	}
	info, err := s.cl.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
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
	if err := s.cl.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil && !notFound(err) {
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
