package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// FS stores each blob in its own file under a root directory, at
// <root>/<first two hex digits>/<hex> (content-addressed). Put writes a
// temporary file in <root>/.tmp, fsyncs it, renames it into place
// (atomic) and fsyncs the directory, so a blob is either wholly visible
// or absent, also across crashes; leftover temporary files of a crash
// are removed by NewFS. It is for one process (the embedded mode): other
// processes need a shared store (PostgreSQL, S3).
type FS struct {
	root string
}

var _ Store = (*FS)(nil)

// NewFS returns the store rooted at dir, creating it if needed.
func NewFS(dir string) (*FS, error) {
	tmp := filepath.Join(dir, ".tmp")
	if err := os.RemoveAll(tmp); err != nil {
		return nil, fmt.Errorf("blobstore: clear %s: %w", tmp, err)
	}
	if err := os.MkdirAll(tmp, 0o750); err != nil {
		return nil, fmt.Errorf("blobstore: create %s: %w", tmp, err)
	}
	return &FS{root: dir}, nil
}

func (s *FS) path(id string) (string, error) {
	h, err := ParseID(id)
	if err != nil {
		return "", err
	}
	return filepath.Join(s.root, h[:2], h), nil
}

// Put implements Store.
func (s *FS) Put(ctx context.Context, id string, r io.Reader, maxBytes int64) (int64, error) {
	dst, err := s.path(id)
	if err != nil {
		return 0, err
	}
	f, err := os.CreateTemp(filepath.Join(s.root, ".tmp"), "put-*")
	if err != nil {
		return 0, fmt.Errorf("blobstore: put %s: %w", id, err)
	}
	defer func() {
		_ = f.Close()
		_ = os.Remove(f.Name()) // fails harmlessly after the rename
	}()
	v := NewVerifier(ctx, r, id, maxBytes)
	buf := make([]byte, BufferSize)
	if _, err := io.CopyBuffer(f, v, buf); err != nil {
		return v.N(), fmt.Errorf("blobstore: put %s: %w", id, err)
	}
	if err := v.Check(); err != nil {
		return v.N(), err
	}
	if err := f.Sync(); err != nil {
		return v.N(), fmt.Errorf("blobstore: put %s: fsync: %w", id, err)
	}
	if err := f.Close(); err != nil {
		return v.N(), fmt.Errorf("blobstore: put %s: %w", id, err)
	}
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return v.N(), fmt.Errorf("blobstore: put %s: %w", id, err)
	}
	if err := os.Rename(f.Name(), dst); err != nil {
		return v.N(), fmt.Errorf("blobstore: put %s: rename: %w", id, err)
	}
	if err := syncDir(dir); err != nil {
		return v.N(), fmt.Errorf("blobstore: put %s: fsync dir: %w", id, err)
	}
	return v.N(), nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Stat implements Store.
func (s *FS) Stat(ctx context.Context, id string) (int64, error) {
	p, err := s.path(id)
	if err != nil {
		return 0, err
	}
	fi, err := os.Stat(p)
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return 0, fmt.Errorf("blobstore: stat %s: %w", id, err)
	}
	return fi.Size(), nil
}

// Open implements Store.
func (s *FS) Open(ctx context.Context, id string, offset, length int64) (io.ReadCloser, error) {
	p, err := s.path(id)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("blobstore: open %s: %w", id, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("blobstore: open %s: %w", id, err)
	}
	if length, err = CheckRange(id, offset, length, fi.Size()); err != nil {
		_ = f.Close()
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, offset, length), f}, nil
}

// Delete implements Store.
func (s *FS) Delete(ctx context.Context, id string) error {
	p, err := s.path(id)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("blobstore: delete %s: %w", id, err)
	}
	return nil
}
