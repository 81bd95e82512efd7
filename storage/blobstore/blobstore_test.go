package blobstore_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/storage/blobstore/blobstoretest"
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
