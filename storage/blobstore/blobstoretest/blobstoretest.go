// Package blobstoretest is the contract suite every blobstore.Store passes.
package blobstoretest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"

	"github.com/synclane/synclane/storage/blobstore"
)

// errReader fails after delivering its bytes.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		return n, e.err
	}
	return n, err
}

// body returns n deterministic bytes.
func body(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31) ^ seed
	}
	return b
}

// Run runs the contract cases, each on a fresh store from open.
func Run(t *testing.T, open func(t *testing.T) blobstore.Store) {
	big := body(2*blobstore.BufferSize+12345, 1) // spans several chunks
	small := []byte("hello blob")
	cases := []struct {
		name string
		fn   func(t *testing.T, ctx context.Context, s blobstore.Store)
	}{
		{"PutStatOpenRange", func(t *testing.T, ctx context.Context, s blobstore.Store) {
			id := blobstore.IDOf(big)
			n, err := s.Put(ctx, id, bytes.NewReader(big), int64(len(big)))
			if err != nil || n != int64(len(big)) {
				t.Fatalf("Put = %d, %v", n, err)
			}
			if size, err := s.Stat(ctx, id); err != nil || size != int64(len(big)) {
				t.Fatalf("Stat = %d, %v", size, err)
			}
			for _, r := range []struct{ off, n int64 }{
				{0, -1}, {0, 1}, {blobstore.BufferSize - 3, 10}, {int64(len(big)) - 5, 5}, {12, int64(len(big)) - 12}, {int64(len(big)), 0},
			} {
				got := read(t, ctx, s, id, r.off, r.n)
				end := int64(len(big))
				if r.n >= 0 {
					end = r.off + r.n
				}
				if !bytes.Equal(got, big[r.off:end]) {
					t.Errorf("Open(%d, %d): %d bytes differ from the body's range", r.off, r.n, len(got))
				}
			}
			if _, err := s.Open(ctx, id, int64(len(big))-1, 2); err == nil {
				t.Error("Open past the end succeeded")
			}
		}},
		{"PutIsIdempotent", func(t *testing.T, ctx context.Context, s blobstore.Store) {
			id := blobstore.IDOf(small)
			for range 2 {
				if _, err := s.Put(ctx, id, bytes.NewReader(small), 100); err != nil {
					t.Fatalf("Put: %v", err)
				}
			}
			if got := read(t, ctx, s, id, 0, -1); !bytes.Equal(got, small) {
				t.Errorf("read %q", got)
			}
		}},
		{"ConcurrentPuts", func(t *testing.T, ctx context.Context, s blobstore.Store) {
			id := blobstore.IDOf(big)
			var wg sync.WaitGroup
			errs := make([]error, 4)
			for i := range errs {
				wg.Go(func() { _, errs[i] = s.Put(ctx, id, bytes.NewReader(big), int64(len(big))) })
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Errorf("Put: %v", err)
				}
			}
			if got := read(t, ctx, s, id, 0, -1); !bytes.Equal(got, big) {
				t.Error("the blob differs after concurrent puts")
			}
		}},
		{"RefusalsLeaveNothing", func(t *testing.T, ctx context.Context, s blobstore.Store) {
			id := blobstore.IDOf(big)
			for _, c := range []struct {
				name string
				r    io.Reader
				max  int64
				want error
			}{
				{"hash mismatch", bytes.NewReader(append(bytes.Clone(big[:len(big)-1]), 0)), int64(len(big)), blobstore.ErrHashMismatch},
				{"truncated", bytes.NewReader(big[:blobstore.BufferSize+1]), int64(len(big)), blobstore.ErrHashMismatch},
				{"too large", bytes.NewReader(big), int64(len(big)) - 1, blobstore.ErrTooLarge},
				{"reader error", &errReader{bytes.NewReader(big[:100]), io.ErrClosedPipe}, int64(len(big)), io.ErrClosedPipe},
			} {
				if _, err := s.Put(ctx, id, c.r, c.max); !errors.Is(err, c.want) {
					t.Errorf("%s: Put = %v, want %v", c.name, err, c.want)
				}
				if _, err := s.Stat(ctx, id); !errors.Is(err, blobstore.ErrNotFound) {
					t.Errorf("%s: Stat after the refusal = %v, want ErrNotFound", c.name, err)
				}
			}
			// The exact cap is allowed.
			if _, err := s.Put(ctx, id, bytes.NewReader(big), int64(len(big))); err != nil {
				t.Errorf("Put at the cap: %v", err)
			}
		}},
		{"NotFoundAndDelete", func(t *testing.T, ctx context.Context, s blobstore.Store) {
			id := blobstore.IDOf(small)
			if _, err := s.Open(ctx, id, 0, -1); !errors.Is(err, blobstore.ErrNotFound) {
				t.Errorf("Open(absent) = %v", err)
			}
			if err := s.Delete(ctx, id); err != nil {
				t.Errorf("Delete(absent) = %v", err)
			}
			if _, err := s.Put(ctx, id, bytes.NewReader(small), 100); err != nil {
				t.Fatal(err)
			}
			if err := s.Delete(ctx, id); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Stat(ctx, id); !errors.Is(err, blobstore.ErrNotFound) {
				t.Errorf("Stat after Delete = %v", err)
			}
		}},
		{"InvalidID", func(t *testing.T, ctx context.Context, s blobstore.Store) {
			for _, id := range []string{"", "sha256:", "sha256:" + string(bytes.Repeat([]byte("A"), 64)), "md5:" + string(bytes.Repeat([]byte("a"), 64)), "sha256:../../../../etc/passwd" + string(bytes.Repeat([]byte("a"), 36))} {
				if _, err := s.Put(ctx, id, bytes.NewReader(small), 100); !errors.Is(err, blobstore.ErrInvalidID) {
					t.Errorf("Put(%q) = %v, want ErrInvalidID", id, err)
				}
				if _, err := s.Stat(ctx, id); !errors.Is(err, blobstore.ErrInvalidID) {
					t.Errorf("Stat(%q) = %v, want ErrInvalidID", id, err)
				}
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, t.Context(), open(t)) })
	}
}

func read(t *testing.T, ctx context.Context, s blobstore.Store, id string, off, n int64) []byte {
	t.Helper()
	rc, err := s.Open(ctx, id, off, n)
	if err != nil {
		t.Fatalf("Open(%d, %d): %v", off, n, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return b
}
