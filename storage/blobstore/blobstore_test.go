package blobstore_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/storage/blobstore/blobstoretest"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

func TestFSContract(t *testing.T) {
	blobstoretest.Run(t, func(t *testing.T) blobstore.Store {
		s, err := blobstore.NewFS(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestPostgresContract(t *testing.T) {
	blobstoretest.Run(t, func(t *testing.T) blobstore.Store {
		schema := pgtest.NewSchema(t)
		pool, err := pgxpool.New(t.Context(), pgtest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		s, err := blobstore.NewPostgres(t.Context(), pool, schema)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestFSLeavesNoTemporaryFiles: refused puts leave nothing in the
// temporary directory, and a crash's leftovers are cleared on open.
func TestFSLeavesNoTemporaryFiles(t *testing.T) {
	dir := t.TempDir()
	s, err := blobstore.NewFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	b := []byte("some bytes")
	if _, err := s.Put(context.Background(), blobstore.IDOf([]byte("other")), bytes.NewReader(b), 100); err == nil {
		t.Fatal("mismatching Put succeeded")
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, ".tmp")); len(ents) != 0 {
		t.Errorf("temporary files left: %v", ents)
	}
	if err := os.WriteFile(filepath.Join(dir, ".tmp", "put-crash"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := blobstore.NewFS(dir); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, ".tmp")); len(ents) != 0 {
		t.Errorf("crash leftovers kept: %v", ents)
	}
}

func FuzzParseID(f *testing.F) {
	f.Add("sha256:" + string(bytes.Repeat([]byte("a"), 64)))
	f.Add("sha256:../x")
	f.Fuzz(func(t *testing.T, id string) {
		h, err := blobstore.ParseID(id)
		if err != nil {
			return
		}
		if len(h) != 64 || "sha256:"+h != id {
			t.Fatalf("ParseID(%q) = %q", id, h)
		}
		for _, c := range h {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				t.Fatalf("ParseID(%q) accepted %q", id, c)
			}
		}
	})
}
