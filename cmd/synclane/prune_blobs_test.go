package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/storage/blobstore/pgblob"
)

// TestPruneCommandSweepsOrphanBlobs: `synclane prune` (a full pass) removes
// the blobs no row has referenced for 24 h from the blob store serve would
// use with the same flags (<data>/blobs next to SQLite, the database's
// chunks with --postgres), and keeps a referenced blob and a recent
// orphan; --dry-run, --partition and --blob-store off sweep nothing.
func TestPruneCommandSweepsOrphanBlobs(t *testing.T) {
	for name, store := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st := openArgs(t, store)
			var bs blobstore.Store
			var err error
			if pg := st.pg; pg != nil {
				bs, err = pgblob.New(ctx, pg.Pool(), pg.SchemaName())
			} else {
				bs, err = blobstore.NewFS(filepath.Join(store[1], "blobs"))
			}
			if err != nil {
				t.Fatal(err)
			}
			bi := st.Blobs
			old := time.Now().Add(-25 * time.Hour).UnixMilli()
			blobs := []struct {
				name      string
				data      []byte
				touchedAt int64
				ref       bool
				kept      bool
			}{
				{"old orphan", []byte("old orphan"), old, false, false},
				{"recent orphan", []byte("recent orphan"), time.Now().UnixMilli(), false, true},
				{"old but referenced", []byte("referenced"), old, true, true},
			}
			for _, b := range blobs {
				id := blobstore.IDOf(b.data)
				if _, err := bi.BeginBlobUpload(ctx, id, b.touchedAt); err != nil {
					t.Fatal(err)
				}
				if _, err := bs.Put(ctx, id, bytes.NewReader(b.data), 1<<20); err != nil {
					t.Fatal(err)
				}
				if err := bi.CompleteBlobUpload(ctx, id, int64(len(b.data)), "", b.touchedAt); err != nil {
					t.Fatal(err)
				}
				if b.ref {
					tx, err := st.Log.BeginPush(ctx, "default")
					if err != nil {
						t.Fatal(err)
					}
					if err := tx.SetRowBlobs(ctx, "todos", "t1", map[string]string{"list_id": "L"}, []string{id}); err != nil {
						t.Fatal(err)
					}
					if err := tx.Commit(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			if name == "sqlite" {
				st.Close() // the command opens the file itself
			} else {
				defer st.Close()
			}
			runs := []struct {
				args []string
				want string
			}{
				{[]string{"prune", "--dry-run"}, "dry run: nothing deleted"},
				{[]string{"prune", "--blob-store", "off"}, "swept 0 orphan blobs"},
				{[]string{"prune", "--partition", "default"}, "swept 0 orphan blobs"},
				{[]string{"prune"}, "swept 1 orphan blobs"},
				{[]string{"prune"}, "swept 0 orphan blobs"},
			}
			for i, r := range runs {
				code, out, errOut := runCmd(t, append(r.args, store...)...)
				if code != 0 || !strings.Contains(out, r.want) {
					t.Fatalf("run %d %v: exit %d, want %q\n%s%s", i, r.args, code, r.want, out, errOut)
				}
				if i == 2 { // nothing swept so far: every blob still stored
					for _, b := range blobs {
						if _, err := bs.Stat(ctx, blobstore.IDOf(b.data)); err != nil {
							t.Fatalf("after %v: %s gone: %v", r.args, b.name, err)
						}
					}
				}
			}
			for _, b := range blobs {
				_, err := bs.Stat(ctx, blobstore.IDOf(b.data))
				if gone := errors.Is(err, blobstore.ErrNotFound); gone == b.kept || (err != nil && !gone) {
					t.Errorf("%s: Stat after prune: %v; want kept=%v", b.name, err, b.kept)
				}
			}
		})
	}
}
