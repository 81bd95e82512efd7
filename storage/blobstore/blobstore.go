// Package blobstore stores blob bytes (SPEC §5.9), content-addressed by
// their SHA-256 id "sha256:<64 lowercase hex>". Blob metadata and the
// reference index live in the sync database (storage.BlobIndex); a Store
// only holds bytes.
//
// The filesystem store (FS) is here; each store that needs a driver or an
// SDK is a package of its own, so this one and its importers link none:
// pgblob (PostgreSQL) and s3blob (S3-compatible). Every implementation
// passes the contract suite in blobstore/blobstoretest and guarantees:
//   - Put streams: it hashes while writing, holds at most one buffer
//     of the body in memory (BufferSize for FS and pgblob; one part,
//     s3blob.DefaultPartSize, for s3blob, from a bounded pool), and
//     makes the blob visible only
//     after the whole body was read, was at most maxBytes long and hashed
//     to the id; otherwise nothing becomes visible (ErrHashMismatch,
//     ErrTooLarge, or the reader's error).
//   - Put of a blob already stored is idempotent (same bytes by
//     construction).
//   - Open reads a byte range; Stat and Open of an absent blob fail with
//     ErrNotFound; Delete of an absent blob succeeds.
package blobstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"
)

// Errors. Implementations wrap them with %w.
var (
	// ErrNotFound: no such blob.
	ErrNotFound = errors.New("blobstore: blob not found")
	// ErrHashMismatch: the body's SHA-256 is not the id.
	ErrHashMismatch = errors.New("blobstore: body does not hash to the blob id")
	// ErrTooLarge: the body is longer than the cap.
	ErrTooLarge = errors.New("blobstore: body exceeds the size cap")
	// ErrInvalidID: the id is not "sha256:" followed by 64 lowercase hex digits.
	ErrInvalidID = errors.New("blobstore: invalid blob id")
)

// BufferSize is the copy buffer (and PostgreSQL chunk) size.
const BufferSize = 1 << 20

// Store holds blob bytes. Safe for concurrent use.
type Store interface {
	// Put reads r to EOF and stores it as blob id if it is at most
	// maxBytes long and hashes to id; it returns the length.
	Put(ctx context.Context, id string, r io.Reader, maxBytes int64) (int64, error)
	// Stat returns the blob's length.
	Stat(ctx context.Context, id string) (int64, error)
	// Open returns length bytes of the blob from offset (length < 0: to
	// the end). The range must lie within the blob.
	Open(ctx context.Context, id string, offset, length int64) (io.ReadCloser, error)
	// Delete removes the blob; absent blobs are no error.
	Delete(ctx context.Context, id string) error
}

// Presigner is implemented by stores that can hand out direct URLs (S3
// presign). URLs live at most ttl.
type Presigner interface {
	PresignPut(ctx context.Context, id string, byteLength int64, ttl time.Duration) (string, error)
	PresignGet(ctx context.Context, id string, ttl time.Duration) (string, error)
}

// IDPrefix starts every blob id.
const IDPrefix = "sha256:"

// ParseID checks id and returns its hex digest.
func ParseID(id string) (string, error) {
	if len(id) != len(IDPrefix)+64 || id[:len(IDPrefix)] != IDPrefix {
		return "", fmt.Errorf("%w: %q", ErrInvalidID, id)
	}
	h := id[len(IDPrefix):]
	for i := 0; i < len(h); i++ {
		if c := h[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", fmt.Errorf("%w: %q", ErrInvalidID, id)
		}
	}
	return h, nil
}

// IDOf returns the blob id of b.
func IDOf(b []byte) string {
	s := sha256.Sum256(b)
	return IDPrefix + hex.EncodeToString(s[:])
}

// Verifier counts and hashes what passes through it and checks the cap
// and id at the end (Check). Implementations read the body through it.
type Verifier struct {
	r    io.Reader
	ctx  context.Context
	h    hash.Hash
	n    int64
	max  int64
	want string
}

// NewVerifier wraps r for blob id with cap maxBytes; reads fail with
// ErrTooLarge once more than maxBytes were read, and with ctx's error once
// ctx ends.
func NewVerifier(ctx context.Context, r io.Reader, id string, maxBytes int64) *Verifier {
	return &Verifier{r: r, ctx: ctx, h: sha256.New(), max: maxBytes, want: id}
}

// Read implements io.Reader.
func (v *Verifier) Read(p []byte) (int, error) {
	if err := v.ctx.Err(); err != nil {
		return 0, err
	}
	if rem := v.max - v.n; rem < int64(len(p)) {
		p = p[:rem+1] // read one byte past the cap to detect it
	}
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if v.n > v.max {
		return n, fmt.Errorf("%w (%d bytes)", ErrTooLarge, v.max)
	}
	return n, err
}

// N returns the bytes read so far.
func (v *Verifier) N() int64 { return v.n }

// Check reports whether the body read so far hashes to the id.
func (v *Verifier) Check() error {
	if got := IDPrefix + hex.EncodeToString(v.h.Sum(nil)); got != v.want {
		return fmt.Errorf("%w: body is %s", ErrHashMismatch, got)
	}
	return nil
}

// CheckRange resolves an Open range of a blob of size bytes for a Store:
// a negative length means to the end; a range outside the blob is an
// error. It returns the length to read.
func CheckRange(id string, offset, length, size int64) (int64, error) {
	if length < 0 {
		length = size - offset
	}
	if offset < 0 || length < 0 || offset+length > size {
		return 0, fmt.Errorf("blobstore: open %s: range [%d, +%d) outside %d bytes", id, offset, length, size)
	}
	return length, nil
}
