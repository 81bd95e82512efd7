package sqlitefile_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
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
	// A read reports whether it got bytes and any live publication.
	reads := map[string]func(s *sqlitefile.Store, id string) (bool, error){
		"Get": func(s *sqlitefile.Store, id string) (bool, error) {
			pubs, data, err := s.Get(ctx, "p", id, 5000)
			return data != nil || segstore.AnyLive(pubs), err
		},
		"OpenFile": func(s *sqlitefile.Store, id string) (bool, error) {
			pubs, f, err := s.OpenFile(ctx, "p", id, 5000)
			if f != nil {
				_ = f.Close()
			}
			return f != nil || segstore.AnyLive(pubs), err
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
				if served, err := read(s, m.ID); err != nil || served {
					t.Fatalf("%s of a %s file: served %v, %v; want no bytes, no live publication", rname, name, served, err)
				}
				// The publication is now a tombstone: a lookup misses, so the
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
	if pubs, data, err := s.Get(ctx, "p", segstore.ID(old), 3000); err != nil || data != nil || len(pubs) != 1 || pubs[0].Live {
		t.Fatalf("Get of the swept segment: %+v, %q, %v; want its expired publication, no bytes", pubs, data, err)
	}
	if _, got, err := s.Get(ctx, "p", segstore.ID(live), 3000); err != nil || string(got) != "live" {
		t.Fatalf("Get of the live segment = %q, %v", got, err)
	}
}

// Cache.Open hands a file-backed segment out as its open file (nothing
// page-sized in memory), except on its second download, when the hot set
// keeps the bytes; later downloads are served from memory, and say so
// (Opened.Kept: the list may predate a later publication).
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
			o, err := c.Open(ctx, "p", m.ID)
			metas, got, f := o.Pubs, o.Data, o.File
			if err != nil || len(metas) != 1 {
				t.Fatalf("hot=%d download %d: %d metas, %v", hot, i, len(metas), err)
			}
			wantFile := hot == 0 || i == 1
			if wantKept := hot != 0 && i == 3; o.Kept != wantKept {
				t.Fatalf("hot=%d download %d: kept %v, want %v", hot, i, o.Kept, wantKept)
			}
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
// column, the bytes in the data column) or before publications recorded
// their log epoch (no log_epoch column) opens and gains the columns; its
// rows become tombstones, published by nobody (no bytes, never live, a
// lookup misses), the blob is cleared, and new publications are served.
func TestSQLiteFileOpensAnOlderFile(t *testing.T) {
	ctx := context.Background()
	for _, layout := range []struct {
		name, create, insert string
		blob                 bool // the insert takes the bytes
	}{
		{"bytes in the database", `CREATE TABLE segments (
  partition TEXT NOT NULL, build_key TEXT NOT NULL, id TEXT NOT NULL,
  media_type INTEGER NOT NULL, tbl TEXT NOT NULL, scope_digest TEXT NOT NULL,
  as_of INTEGER NOT NULL, byte_length INTEGER NOT NULL, row_count INTEGER NOT NULL,
  row_cursor TEXT, next_row_cursor TEXT, created_at_ms INTEGER NOT NULL,
  expires_at_ms INTEGER NOT NULL, data BLOB,
  PRIMARY KEY (partition, build_key)) WITHOUT ROWID`,
			`INSERT INTO segments VALUES (?, ?, ?, ?, 'todos', 'd', 1, ?, 1, NULL, NULL, 1000, 10000, ?)`, true},
		{"segment files, no epochs", `CREATE TABLE segments (
  partition TEXT NOT NULL, build_key TEXT NOT NULL, id TEXT NOT NULL,
  media_type INTEGER NOT NULL, tbl TEXT NOT NULL, scope_digest TEXT NOT NULL,
  as_of INTEGER NOT NULL, byte_length INTEGER NOT NULL, row_count INTEGER NOT NULL,
  row_cursor TEXT, next_row_cursor TEXT, created_at_ms INTEGER NOT NULL,
  expires_at_ms INTEGER NOT NULL, data BLOB, data_file TEXT,
  PRIMARY KEY (partition, build_key)) WITHOUT ROWID`,
			`INSERT INTO segments VALUES (?, ?, ?, ?, 'todos', 'd', 1, ?, 1, NULL, NULL, 1000, 10000, NULL, 'old.seg')`, false},
	} {
		t.Run(layout.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "segments.db")
			db, err := sql.Open("sqlite", "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			blob := []byte("bytes from an older version")
			m := metaFor("p", "old", blob, 1000, 10_000)
			if _, err := db.ExecContext(ctx, layout.create); err != nil {
				t.Fatal(err)
			}
			args := []any{m.Partition, m.Key, m.ID, int64(m.MediaType), m.ByteLength}
			if layout.blob {
				args = append(args, blob)
			}
			if _, err := db.ExecContext(ctx, layout.insert, args...); err != nil {
				t.Fatal(err)
			}
			for i := range 2 { // and again once the columns exist
				s, err := sqlitefile.Open(ctx, path)
				if err != nil {
					t.Fatal(err)
				}
				pubs, got, err := s.Get(ctx, "p", m.ID, 5000)
				if err != nil || got != nil || len(pubs) != 1 || pubs[0].Live || pubs[0].LogEpoch != "" {
					t.Fatalf("open %d: Get of an older entry = %+v, %q, %v; want one dead publication of no epoch", i, pubs, got, err)
				}
				if _, err := s.Lookup(ctx, "p", "old", 5000); !errors.Is(err, segstore.ErrNotFound) {
					t.Fatalf("open %d: Lookup of an older entry: %v, want ErrNotFound", i, err)
				}
				var blobs int
				if err := db.QueryRowContext(ctx, `SELECT count(*) FROM segments WHERE data IS NOT NULL`).Scan(&blobs); err != nil || blobs != 0 {
					t.Fatalf("open %d: %d blobs left, %v", i, blobs, err)
				}
				data := []byte("a new page")
				nm := metaFor("p", "new", data, 1000, 10_000)
				nm.LogEpoch, nm.SchemaVersion = "e1", 3
				if err := s.Put(ctx, nm, data); err != nil {
					t.Fatal(err)
				}
				if pubs, got, err := s.Get(ctx, "p", segstore.ID(data), 5000); err != nil || string(got) != string(data) ||
					len(pubs) != 1 || !pubs[0].Live || pubs[0].LogEpoch != "e1" || pubs[0].SchemaVersion != 3 {
					t.Fatalf("open %d: Get of a new publication = %+v, %q, %v", i, pubs, got, err)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestSQLiteFileForms: a segment's forms are files beside its bytes that
// the orphan sweep keeps (their records name them) and the eviction of the
// bytes removes; a form file found short, or spoiled when a process first
// opens it, is dropped (ErrNotFound: built again), never served.
func TestSQLiteFileForms(t *testing.T) {
	ctx := context.Background()
	s, path, dir := openSQLiteFile(t)
	data := []byte("segment bytes, segment bytes, segment bytes, segment bytes")
	m := metaFor("p", "k", data, 1000, 50_000)
	if err := s.Put(ctx, m, data); err != nil {
		t.Fatal(err)
	}
	for _, enc := range []string{segstore.EncodingZstd, segstore.EncodingGzip} {
		form, err := segstore.Encode(enc, bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.PutForm(ctx, m.ID, enc, form); err != nil {
			t.Fatal(err)
		}
	}
	zpath := filepath.Join(dir, strings.TrimPrefix(m.ID, "sha256:")+".seg.zstd")
	gpath := filepath.Join(dir, strings.TrimPrefix(m.ID, "sha256:")+".seg.gzip")
	old := time.Now().Add(-2 * time.Hour)
	for _, f := range []string{zpath, gpath} {
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatalf("form file %s: %v", f, err)
		}
	}
	if _, err := s.Sweep(ctx, 2000, 0); err != nil {
		t.Fatal(err)
	}
	if got := segFiles(t, dir); len(got) != 3 {
		t.Fatalf("after the orphan sweep the directory holds %v, want the segment and its two forms", got)
	}
	held, err := s.Held(ctx)
	if err != nil || len(held) != 1 {
		t.Fatalf("Held = %+v, %v", held, err)
	}
	zst, _ := os.Stat(zpath)
	gst, _ := os.Stat(gpath)
	if want := int64(len(data)) + zst.Size() + gst.Size(); held[0].Bytes != want {
		t.Fatalf("Held bytes %d, want %d (the segment and its forms)", held[0].Bytes, want)
	}
	// Another process opening the store checks each form on first open:
	// a zstd file altered in place (same length) and a gzip file cut
	// short are both dropped.
	other, err := sqlitefile.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	b, _ := os.ReadFile(zpath)
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(zpath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(gpath, gst.Size()-1); err != nil {
		t.Fatal(err)
	}
	for _, enc := range []string{segstore.EncodingZstd, segstore.EncodingGzip} {
		if _, f, err := other.OpenForm(ctx, m.ID, enc); !errors.Is(err, segstore.ErrNotFound) {
			if f != nil {
				_ = f.Close()
			}
			t.Fatalf("spoiled %s form: %v, want ErrNotFound", enc, err)
		}
	}
	if got := segFiles(t, dir); len(got) != 1 {
		t.Fatalf("after dropping the spoiled forms the directory holds %v", got)
	}
	// Stored again, then evicted with the bytes.
	form, _ := segstore.Encode(segstore.EncodingZstd, bytes.NewReader(data), int64(len(data)))
	if err := other.PutForm(ctx, m.ID, segstore.EncodingZstd, form); err != nil {
		t.Fatal(err)
	}
	_, f, err := s.OpenForm(ctx, m.ID, segstore.EncodingZstd)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(f)
	_ = f.Close()
	if !bytes.Equal(got, form) {
		t.Fatal("the form read back differs")
	}
	if n, err := s.Evict(ctx, []string{m.ID}); err != nil || n != 1 {
		t.Fatalf("Evict = %d, %v", n, err)
	}
	if got := segFiles(t, dir); len(got) != 0 {
		t.Fatalf("after the eviction the directory holds %v", got)
	}
	if _, _, err := s.OpenForm(ctx, m.ID, segstore.EncodingZstd); !errors.Is(err, segstore.ErrNotFound) {
		t.Fatalf("form of an evicted segment: %v", err)
	}
}
