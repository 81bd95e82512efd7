package segstore_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/segstore"
)

// openSQLiteFile opens a segment file in a fresh directory and returns it
// with the directory that holds the segments' bytes.
func openSQLiteFile(t *testing.T) (*segstore.SQLiteFile, string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "segments.db")
	s, err := segstore.OpenSQLiteFile(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, path, path + "-data"
}

func segFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func metaFor(partition, key string, data []byte, createdMs, expiresMs int64) segstore.Meta {
	return segstore.Meta{Partition: partition, Key: key, ID: segstore.ID(data), MediaType: ssp2.MediaRows, Table: "todos",
		ScopeDigest: "d", AsOfCommitSeq: 1, ByteLength: int64(len(data)), RowCount: 1, CreatedAtMs: createdMs, ExpiresAtMs: expiresMs}
}

func TestSQLiteFileBytesLiveInFiles(t *testing.T) {
	ctx := context.Background()
	s, _, dir := openSQLiteFile(t)
	data := []byte("page bytes")
	m := metaFor("p", "k1", data, 1000, 10_000)
	if err := s.Put(ctx, m, data); err != nil {
		t.Fatal(err)
	}
	files := segFiles(t, dir)
	if len(files) != 1 {
		t.Fatalf("segment directory holds %v, want one file", files)
	}
	if b, err := os.ReadFile(filepath.Join(dir, files[0])); err != nil || string(b) != string(data) {
		t.Fatalf("segment file = %q, %v; want the bytes", b, err)
	}
	// A second Put of the unexpired key keeps the first entry and leaves
	// no second file behind.
	other := []byte("other bytes")
	if err := s.Put(ctx, metaFor("p", "k1", other, 2000, 20_000), other); err != nil {
		t.Fatal(err)
	}
	if got := segFiles(t, dir); len(got) != 1 || got[0] != files[0] {
		t.Fatalf("after a losing Put the directory holds %v, want %v", got, files)
	}
	metas, got, err := s.Get(ctx, "p", m.ID, 5000)
	if err != nil || string(got) != string(data) || len(metas) != 1 {
		t.Fatalf("Get = %d metas, %q, %v", len(metas), got, err)
	}
}

func TestSQLiteFileUnusableFileIsExpired(t *testing.T) {
	ctx := context.Background()
	cases := map[string]func(path string) error{
		"altered":   func(p string) error { return os.WriteFile(p, []byte("page bytez"), 0o600) },
		"truncated": func(p string) error { return os.Truncate(p, 3) },
		"removed":   os.Remove,
	}
	for name, spoil := range cases {
		t.Run(name, func(t *testing.T) {
			s, _, dir := openSQLiteFile(t)
			data := []byte("page bytes")
			m := metaFor("p", "k1", data, 1000, 10_000)
			if err := s.Put(ctx, m, data); err != nil {
				t.Fatal(err)
			}
			if err := spoil(filepath.Join(dir, segFiles(t, dir)[0])); err != nil {
				t.Fatal(err)
			}
			if _, got, err := s.Get(ctx, "p", m.ID, 5000); !errors.Is(err, segstore.ErrExpired) {
				t.Fatalf("Get of a %s file = %q, %v; want ErrExpired", name, got, err)
			}
		})
	}
}

func TestSQLiteFileSweepRemovesFiles(t *testing.T) {
	ctx := context.Background()
	s, _, dir := openSQLiteFile(t)
	old, live := []byte("expiring"), []byte("live")
	if err := s.Put(ctx, metaFor("p", "old", old, 1000, 2000), old); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, metaFor("p", "live", live, 1000, 50_000), live); err != nil {
		t.Fatal(err)
	}
	// A file no entry names: one from long ago (a crash between rename
	// and commit), one just written (a Put in progress).
	stale := filepath.Join(dir, "0123.seg")
	fresh := filepath.Join(dir, "4567.seg.tmp")
	for _, f := range []string{stale, fresh} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	if err := os.Chtimes(stale, now.Add(-2*time.Hour), now.Add(-2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	n, err := s.Sweep(ctx, 3000, 0)
	if err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1 expired", n, err)
	}
	files := segFiles(t, dir)
	if len(files) != 2 {
		t.Fatalf("after the sweep the directory holds %v, want the live segment's file and the fresh temporary", files)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatalf("the fresh unnamed file was removed: %v", err)
	}
	if _, _, err := s.Get(ctx, "p", segstore.ID(old), 3000); !errors.Is(err, segstore.ErrExpired) {
		t.Fatalf("Get of the swept segment: %v, want ErrExpired", err)
	}
	if _, got, err := s.Get(ctx, "p", segstore.ID(live), 3000); err != nil || string(got) != "live" {
		t.Fatalf("Get of the live segment = %q, %v", got, err)
	}
}

// Entries written by earlier versions hold their bytes in the data column;
// they are still served, and preferred over a file when both are set (an
// earlier version sharing the file rewrote the entry).
func TestSQLiteFileServesBlobEntries(t *testing.T) {
	ctx := context.Background()
	s, path, _ := openSQLiteFile(t)
	blob := []byte("bytes in the database")
	m := metaFor("p", "legacy", blob, 1000, 10_000)
	db, err := sql.Open("sqlite", "file:"+path+"?_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `INSERT INTO segments (partition, build_key, id, media_type, tbl, scope_digest, as_of, byte_length, row_count, created_at_ms, expires_at_ms, data, data_file)
VALUES (?, ?, ?, ?, 'todos', 'd', 1, ?, 1, 1000, 10000, ?, 'missing.seg')`, m.Partition, m.Key, m.ID, int64(m.MediaType), m.ByteLength, blob); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Lookup(ctx, "p", "legacy", 5000); err != nil || got.ID != m.ID {
		t.Fatalf("Lookup = %+v, %v", got, err)
	}
	if _, got, err := s.Get(ctx, "p", m.ID, 5000); err != nil || string(got) != string(blob) {
		t.Fatalf("Get = %q, %v; want the blob", got, err)
	}
}
