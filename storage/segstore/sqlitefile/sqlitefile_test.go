package sqlitefile_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/segstore"
	"github.com/synclane/synclane/storage/segstore/sqlitefile"
)

// openSQLiteFile opens a segment file in a fresh directory and returns it
// with the directory that holds the segments' bytes.
func openSQLiteFile(t *testing.T) (*sqlitefile.Store, string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "segments.db")
	s, err := sqlitefile.Open(context.Background(), path)
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
	reads := map[string]func(s *sqlitefile.Store, id string) error{
		"Get": func(s *sqlitefile.Store, id string) error { _, _, err := s.Get(ctx, "p", id, 5000); return err },
		"OpenFile": func(s *sqlitefile.Store, id string) error {
			_, f, err := s.OpenFile(ctx, "p", id, 5000)
			if f != nil {
				_ = f.Close()
			}
			return err
		},
	}
	for name, spoil := range cases {
		for rname, read := range reads {
			t.Run(name+"/"+rname, func(t *testing.T) {
				s, _, dir := openSQLiteFile(t)
				data := []byte("page bytes")
				m := metaFor("p", "k1", data, 1000, 10_000)
				if err := s.Put(ctx, m, data); err != nil {
					t.Fatal(err)
				}
				if err := spoil(filepath.Join(dir, segFiles(t, dir)[0])); err != nil {
					t.Fatal(err)
				}
				if err := read(s, m.ID); !errors.Is(err, segstore.ErrExpired) {
					t.Fatalf("%s of a %s file: %v; want ErrExpired", rname, name, err)
				}
				// The entry is now a tombstone: a lookup misses, so the
				// segment is built again, and the rebuilt bytes replace it.
				if _, err := s.Lookup(ctx, "p", "k1", 5000); !errors.Is(err, segstore.ErrNotFound) {
					t.Fatalf("Lookup after an unusable file: %v, want ErrNotFound", err)
				}
				if err := s.Put(ctx, metaFor("p", "k1", data, 6000, 10_000), data); err != nil {
					t.Fatal(err)
				}
				if _, got, err := s.Get(ctx, "p", m.ID, 7000); err != nil || string(got) != string(data) {
					t.Fatalf("Get after the rebuild = %q, %v", got, err)
				}
				if files := segFiles(t, dir); len(files) != 1 {
					t.Fatalf("directory holds %v, want the rebuilt file only", files)
				}
			})
		}
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

// Cache.Open hands a file-backed segment out as its open file (nothing
// page-sized in memory), except on its second download, when the hot set
// keeps the bytes; later downloads are served from memory.
func TestCacheOpenStreamsFiles(t *testing.T) {
	ctx := context.Background()
	for _, hot := range []int{0, 1 << 20} {
		s, _, _ := openSQLiteFile(t)
		c := segstore.NewCache(s, time.Hour, time.Now, nil)
		c.KeepHot(hot)
		data := []byte("segment bytes for streaming")
		m, _, err := c.Obtain(ctx, "p", segstore.KeyParts{Table: "todos", ScopeDigest: "d", PageRows: 10, SchemaVersion: 1, Lane: "rows"},
			func(context.Context) (segstore.Built, error) {
				return segstore.Built{Meta: segstore.Meta{MediaType: ssp2.MediaRows, Table: "todos", ScopeDigest: "d", RowCount: 1}, Data: data}, nil
			})
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 3; i++ {
			metas, got, f, err := c.Open(ctx, "p", m.ID)
			if err != nil || len(metas) != 1 {
				t.Fatalf("hot=%d download %d: %d metas, %v", hot, i, len(metas), err)
			}
			wantFile := hot == 0 || i == 1
			if (f != nil) != wantFile || (got != nil) == wantFile {
				t.Fatalf("hot=%d download %d: file %v, %d bytes in memory; want a file: %v", hot, i, f != nil, len(got), wantFile)
			}
			if f != nil {
				b, err := io.ReadAll(f)
				_ = f.Close()
				if err != nil {
					t.Fatal(err)
				}
				got = b
			}
			if string(got) != string(data) {
				t.Fatalf("hot=%d download %d: %q", hot, i, got)
			}
		}
		if want := map[int]int{0: 0, 1 << 20: len(data)}[hot]; c.HotBytes() != want {
			t.Fatalf("hot=%d: %d bytes kept, want %d", hot, c.HotBytes(), want)
		}
	}
}

// A segments.db written before segment files existed (no data_file
// column) opens, gains the column, and still serves its blob entries.
func TestSQLiteFileOpensAnOlderFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "segments.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	blob := []byte("bytes from an older version")
	m := metaFor("p", "old", blob, 1000, 10_000)
	if _, err := db.ExecContext(ctx, `CREATE TABLE segments (
  partition TEXT NOT NULL, build_key TEXT NOT NULL, id TEXT NOT NULL,
  media_type INTEGER NOT NULL, tbl TEXT NOT NULL, scope_digest TEXT NOT NULL,
  as_of INTEGER NOT NULL, byte_length INTEGER NOT NULL, row_count INTEGER NOT NULL,
  row_cursor TEXT, next_row_cursor TEXT, created_at_ms INTEGER NOT NULL,
  expires_at_ms INTEGER NOT NULL, data BLOB,
  PRIMARY KEY (partition, build_key)) WITHOUT ROWID`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO segments VALUES (?, ?, ?, ?, 'todos', 'd', 1, ?, 1, NULL, NULL, 1000, 10000, ?)`,
		m.Partition, m.Key, m.ID, int64(m.MediaType), m.ByteLength, blob); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 { // and again once the column exists
		s, err := sqlitefile.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if _, got, err := s.Get(ctx, "p", m.ID, 5000); err != nil || string(got) != string(blob) {
			t.Fatalf("Get of an older entry = %q, %v", got, err)
		}
		data := []byte("a new page")
		if err := s.Put(ctx, metaFor("p", "new", data, 1000, 10_000), data); err != nil {
			t.Fatal(err)
		}
		if _, got, err := s.Get(ctx, "p", segstore.ID(data), 5000); err != nil || string(got) != string(data) {
			t.Fatalf("Get of a new entry = %q, %v", got, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
