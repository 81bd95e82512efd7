// Package sqlitefile is the segment store of the embedded mode: the
// entries in one SQLite file, each segment's bytes in a file beside it. It
// links the SQLite driver; the segment cache (package segstore) does not.
package sqlitefile

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/segstore"
)

// Store is the embedded-mode segstore.Store: one SQLite file (WAL) holding
// every segment's entries for the processes that open it, and a directory
// beside it (the file's path + "-data") holding each segment's bytes as a
// file of its own. Writing a page-sized segment as a file costs one
// write of its bytes, where a blob in the database was written to the WAL
// and again at checkpoint. Bytes are written to a temporary file and
// renamed into place before their entry is committed, and are checked
// against their id (sha256) when read back, so a file torn by a power
// loss (files are not fsync'd: a segment is a cache) or altered on disk is
// answered as expired (the client re-pulls and the page is rebuilt),
// never served. Entries written by earlier versions, with the bytes in
// the database, are still served. Sweep deletes the files of expired
// entries, and files no entry names (left by a crash between the rename
// and the commit, or by an entry replaced after expiring) once they are an
// hour old.
//
// Files are content-addressed: a segment's file is named after its id
// (the hash of its bytes), so every entry of the same bytes (the same page
// under several scope digests, pins or page keys) shares one file, and a
// file is removed only once no entry with bytes names it. Held and Evict
// let the segment cache bound the directory (segstore.Quota).
type Store struct {
	db  *sql.DB
	dir string
	// files serializes, in this process, deciding that a shared file is
	// unnamed (and removing it) with writing or reusing it for a new
	// entry, so a Put never commits an entry naming a file being removed.
	files sync.Mutex
}

// orphanAge is how old a segment file no entry names must be before Sweep
// deletes it: far longer than a Put's rename-to-commit window.
const orphanAge = time.Hour

const sqliteSchema = `CREATE TABLE IF NOT EXISTS segments (
  partition TEXT NOT NULL, build_key TEXT NOT NULL, id TEXT NOT NULL,
  media_type INTEGER NOT NULL, tbl TEXT NOT NULL, scope_digest TEXT NOT NULL,
  as_of INTEGER NOT NULL, byte_length INTEGER NOT NULL, row_count INTEGER NOT NULL,
  row_cursor TEXT, next_row_cursor TEXT, created_at_ms INTEGER NOT NULL,
  expires_at_ms INTEGER NOT NULL, data BLOB,
  PRIMARY KEY (partition, build_key)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS segments_by_id ON segments (id, partition);
CREATE INDEX IF NOT EXISTS segments_by_expiry ON segments (expires_at_ms);`

// fileIndex indexes entries by their file (shared by the entries of one
// segment id), created once the data_file column exists.
const fileIndex = `CREATE INDEX IF NOT EXISTS segments_by_file ON segments (data_file) WHERE data_file IS NOT NULL`

// sqliteFileTuning keeps whole-blob reads cheap for entries that hold
// their bytes in the database (written by earlier versions): 64 KiB pages
// (a blob's overflow chain is 16x shorter; takes effect when the file is
// created, an existing file keeps its page size) and reads through a
// memory map of up to 256 MiB instead of one pread per page.
const sqliteFileTuning = "&_pragma=page_size(65536)&_pragma=mmap_size(268435456)"

// Open opens (creating if needed) the segment file at path.
func Open(ctx context.Context, path string) (*Store, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_busy_timeout=10000&_journal_mode=WAL&_synchronous=NORMAL"+sqliteFileTuning)
	if err != nil {
		return nil, fmt.Errorf("segstore: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(4)
	if _, err := db.ExecContext(ctx, sqliteSchema); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("segstore: create tables in %s: %w", path, err)
	}
	// data_file names the file holding the bytes (NULL: in the data column,
	// as versions before it stored them, or swept).
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('segments') WHERE name = 'data_file'`).Scan(&n); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("segstore: read the schema of %s: %w", path, err)
	}
	if n == 0 {
		if _, err := db.ExecContext(ctx, `ALTER TABLE segments ADD COLUMN data_file TEXT`); err != nil && !strings.Contains(err.Error(), "duplicate column") {
			_ = db.Close()
			return nil, fmt.Errorf("segstore: add data_file to %s: %w", path, err)
		}
	}
	if _, err := db.ExecContext(ctx, fileIndex); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("segstore: index data_file in %s: %w", path, err)
	}
	dir := path + "-data"
	if err := os.MkdirAll(dir, 0o700); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("segstore: segment directory: %w", err)
	}
	return &Store{db: db, dir: dir}, nil
}

// hasBytes is the SQL condition "the entry still holds its bytes". Whether
// the data column does is read with typeof(data), which SQLite answers
// from the record header; "data IS NOT NULL" would load a whole blob
// (hundreds of KiB) through its overflow pages.
const hasBytes = `(data_file IS NOT NULL OR typeof(data) <> 'null')`

const metaCols = `partition, build_key, id, media_type, tbl, scope_digest, as_of, byte_length, row_count, row_cursor, next_row_cursor, created_at_ms, expires_at_ms`

type scanner interface{ Scan(dest ...any) error }

func scanMeta(r scanner, extra ...any) (segstore.Meta, error) {
	var m segstore.Meta
	var mt int64
	var rc, nrc sql.NullString
	dest := append([]any{&m.Partition, &m.Key, &m.ID, &mt, &m.Table, &m.ScopeDigest, &m.AsOfCommitSeq,
		&m.ByteLength, &m.RowCount, &rc, &nrc, &m.CreatedAtMs, &m.ExpiresAtMs}, extra...)
	if err := r.Scan(dest...); err != nil {
		return segstore.Meta{}, err
	}
	m.MediaType = ssp2.MediaType(mt)
	if rc.Valid {
		m.RowCursor = &rc.String
	}
	if nrc.Valid {
		m.NextRowCursor = &nrc.String
	}
	return m, nil
}

func nullable(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

// Lookup implements segstore.Store.
func (s *Store) Lookup(ctx context.Context, partition, key string, nowMs int64) (segstore.Meta, error) {
	row := s.db.QueryRowContext(ctx, `SELECT `+metaCols+` FROM segments WHERE partition = ? AND build_key = ? AND expires_at_ms > ? AND `+hasBytes, partition, key, nowMs)
	m, err := scanMeta(row)
	if errors.Is(err, sql.ErrNoRows) {
		return segstore.Meta{}, segstore.ErrNotFound
	}
	if err != nil {
		return segstore.Meta{}, fmt.Errorf("segstore: lookup: %w", err)
	}
	return m, nil
}

// Put implements segstore.Store. The bytes go to the file named after
// their id (written to a temporary name, then renamed; kept as it is when
// it already holds that many bytes, written for another entry of the same
// id) before the entry naming it is committed; when the entry is not
// stored (another builder's unexpired entry holds the key) a file this
// call wrote and no entry names is removed again.
func (s *Store) Put(ctx context.Context, m segstore.Meta, data []byte) error {
	name, err := fileName(m.ID)
	if err != nil {
		return fmt.Errorf("segstore: put: %w", err)
	}
	s.files.Lock()
	defer s.files.Unlock()
	wrote, err := s.writeFile(name, data)
	if err != nil {
		return fmt.Errorf("segstore: put: %w", err)
	}
	var stored int
	err = s.db.QueryRowContext(ctx, `INSERT INTO segments (`+metaCols+`, data, data_file) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,NULL,?)
ON CONFLICT (partition, build_key) DO UPDATE SET id = excluded.id, media_type = excluded.media_type, tbl = excluded.tbl,
  scope_digest = excluded.scope_digest, as_of = excluded.as_of, byte_length = excluded.byte_length, row_count = excluded.row_count,
  row_cursor = excluded.row_cursor, next_row_cursor = excluded.next_row_cursor, created_at_ms = excluded.created_at_ms,
  expires_at_ms = excluded.expires_at_ms, data = NULL, data_file = excluded.data_file
WHERE NOT (segments.data_file IS NOT NULL OR typeof(segments.data) <> 'null') OR segments.expires_at_ms <= excluded.created_at_ms
RETURNING 1`,
		m.Partition, m.Key, m.ID, int64(m.MediaType), m.Table, m.ScopeDigest, m.AsOfCommitSeq, m.ByteLength, m.RowCount,
		nullable(m.RowCursor), nullable(m.NextRowCursor), m.CreatedAtMs, m.ExpiresAtMs, name).Scan(&stored)
	if err == nil {
		return nil
	}
	if wrote {
		// Ours is not needed (another builder's entry holds the key) or
		// could not be stored: the file goes unless an entry names it.
		s.removeUnnamed(context.WithoutCancel(ctx), name)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	return fmt.Errorf("segstore: put: %w", err)
}

// fileName is the name of the file holding segment id's bytes.
func fileName(id string) (string, error) {
	hexID, ok := strings.CutPrefix(id, "sha256:")
	if !ok || len(hexID) != 64 {
		return "", fmt.Errorf("segment id %q", id)
	}
	if _, err := hex.DecodeString(hexID); err != nil {
		return "", fmt.Errorf("segment id %q", id)
	}
	return hexID + ".seg", nil
}

// writeFile makes file name of the segment directory hold data, reporting
// whether it wrote it (false: it already had len(data) bytes, written for
// another entry of the same id; a file altered since is caught by the
// check of every read, which then removes it). A file is complete under
// its final name or absent (a crash leaves at most a temporary file,
// which the orphan sweep removes). Called with s.files held.
func (s *Store) writeFile(name string, data []byte) (bool, error) {
	final := filepath.Join(s.dir, name)
	if st, err := os.Stat(final); err == nil && st.Mode().IsRegular() && st.Size() == int64(len(data)) {
		return false, nil
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return false, err
	}
	tmp := final + "." + hex.EncodeToString(rnd[:]) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		_ = os.Remove(tmp)
		return false, err
	}
	if err := os.Rename(tmp, final); err != nil {
		_ = os.Remove(tmp)
		return false, err
	}
	return true, nil
}

// removeUnnamed removes segment file name unless an entry names it.
// Called with s.files held.
func (s *Store) removeUnnamed(ctx context.Context, name string) {
	var one int
	err := s.db.QueryRowContext(ctx, `SELECT 1 FROM segments WHERE data_file = ? LIMIT 1`, name).Scan(&one)
	if !errors.Is(err, sql.ErrNoRows) {
		return // named, or unknown: the orphan sweep decides later
	}
	if path, err := s.filePath(name); err == nil {
		_ = os.Remove(path)
	}
}

// fileOfEntry selects the file holding an entry's bytes, or the empty
// string when they are in the data column. An entry with bytes in both
// was last written by an earlier version sharing the file (it stores
// blobs and leaves data_file alone), so its blob is the current one.
const fileOfEntry = `CASE WHEN typeof(data) <> 'null' THEN '' ELSE coalesce(data_file, '') END`

// Get implements segstore.Store.
func (s *Store) Get(ctx context.Context, partition, id string, nowMs int64) ([]segstore.Meta, []byte, error) {
	metas, live, liveFile, err := s.entries(ctx, partition, id, nowMs)
	if err != nil {
		return nil, nil, err
	}
	var data []byte
	if liveFile != "" {
		if data, err = s.readFile(liveFile, live); err == nil && data == nil {
			s.dropFile(ctx, liveFile)
		}
	} else {
		data, err = s.readData(ctx, live.Partition, live.Key)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("segstore: get data: %w", err)
	}
	if data == nil {
		return nil, nil, segstore.ErrExpired // swept meanwhile, or its file is unusable
	}
	return metas, data, nil
}

// OpenFile implements segstore.FileOpener: the segment's file, open at its start,
// after its bytes were checked against the id (a torn or altered file is
// segstore.ErrExpired, as is one swept meanwhile). An entry whose bytes are in the
// database (written by an earlier version) gives a nil file and no error.
func (s *Store) OpenFile(ctx context.Context, partition, id string, nowMs int64) ([]segstore.Meta, *os.File, error) {
	metas, live, liveFile, err := s.entries(ctx, partition, id, nowMs)
	if err != nil || liveFile == "" {
		return metas, nil, err
	}
	f, err := s.openVerified(liveFile, live)
	if err != nil {
		return nil, nil, fmt.Errorf("segstore: open segment file: %w", err)
	}
	if f == nil {
		s.dropFile(ctx, liveFile)
		return nil, nil, segstore.ErrExpired
	}
	return metas, f, nil
}

// dropFile turns the entry naming segment file name, found gone or
// unusable, into a tombstone (so a lookup misses and the segment is built
// again, instead of every download answering "expired" until its TTL
// ends) and removes the file. Best effort: the download is answered as
// expired either way.
func (s *Store) dropFile(ctx context.Context, name string) {
	s.files.Lock()
	defer s.files.Unlock()
	if _, err := s.db.ExecContext(ctx, `UPDATE segments SET data_file = NULL WHERE data_file = ?`, name); err == nil {
		if path, err := s.filePath(name); err == nil {
			_ = os.Remove(path)
		}
	}
}

// entries reads the unexpired entries of segment id in partition ("" for
// any), the last of them and the file holding its bytes ("" when they are
// in the database): segstore.ErrExpired when every entry has expired, segstore.ErrNotFound
// when there is none.
func (s *Store) entries(ctx context.Context, partition, id string, nowMs int64) ([]segstore.Meta, segstore.Meta, string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+metaCols+`, `+hasBytes+` AND expires_at_ms > ?, `+fileOfEntry+` FROM segments WHERE id = ? AND (? = '' OR partition = ?)`, nowMs, id, partition, partition)
	if err != nil {
		return nil, segstore.Meta{}, "", fmt.Errorf("segstore: get: %w", err)
	}
	defer rows.Close()
	var metas []segstore.Meta
	known := false
	var live segstore.Meta
	var liveFile string
	for rows.Next() {
		var ok bool
		var file string
		m, err := scanMeta(rows, &ok, &file)
		if err != nil {
			return nil, segstore.Meta{}, "", fmt.Errorf("segstore: get: %w", err)
		}
		known = true
		if ok {
			metas, live, liveFile = append(metas, m), m, file
		}
	}
	if err := rows.Err(); err != nil {
		return nil, segstore.Meta{}, "", fmt.Errorf("segstore: get: %w", err)
	}
	if len(metas) == 0 {
		if known {
			return nil, segstore.Meta{}, "", segstore.ErrExpired
		}
		return nil, segstore.Meta{}, "", segstore.ErrNotFound
	}
	return metas, live, liveFile, nil
}

// verifyBufs are the buffers openVerified hashes a file through.
var verifyBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// openVerified opens segment file name of entry m and checks its length
// and hash, reading it through a small pooled buffer (no page-sized
// allocation): nil when the file is gone or does not hold m's bytes. The
// file is returned at its start. Segment files are never rewritten once
// renamed into place, only removed, which an open file survives, so what
// was checked is what a reader of the file gets.
func (s *Store) openVerified(name string, m segstore.Meta) (*os.File, error) {
	path, err := s.filePath(name)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ok, err := fileHolds(f, m)
	if err == nil && ok {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil || !ok {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// fileHolds reports whether f holds exactly m's bytes.
func fileHolds(f *os.File, m segstore.Meta) (bool, error) {
	st, err := f.Stat()
	if err != nil {
		return false, err
	}
	if st.Size() != m.ByteLength {
		return false, nil
	}
	h := sha256.New()
	buf := verifyBufs.Get().(*[]byte)
	defer verifyBufs.Put(buf)
	n, err := io.CopyBuffer(h, struct{ io.Reader }{f}, *buf)
	if err != nil {
		return false, err
	}
	return n == m.ByteLength && "sha256:"+hex.EncodeToString(h.Sum(nil)) == m.ID, nil
}

// readFile reads the segment file name of entry m in one pass: nil when it
// is gone (swept meanwhile) or does not hold m's bytes (torn by a power
// loss, or altered), which the caller answers as expired.
func (s *Store) readFile(name string, m segstore.Meta) ([]byte, error) {
	path, err := s.filePath(name)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != m.ByteLength || segstore.ID(data) != m.ID {
		return nil, nil
	}
	return data, nil
}

// filePath is the path of segment file name, refusing a name that is not
// a plain file name of the segment directory.
func (s *Store) filePath(name string) (string, error) {
	if filepath.Base(name) != name || name == "." || name == ".." {
		return "", fmt.Errorf("segment file name %q", name)
	}
	return filepath.Join(s.dir, name), nil
}

// readData reads a segment's bytes (nil when swept) through the driver
// directly: database/sql copies every []byte it scans, and the driver
// already made the value a fresh Go slice, so going through Scan would hold
// two copies of a page-sized blob at once. A driver value left in dest is
// not modified by Rows.Close (database/sql/driver.Rows), so it may be kept.
func (s *Store) readData(ctx context.Context, partition, key string) ([]byte, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var data []byte
	err = conn.Raw(func(dc any) error {
		q, ok := dc.(driver.QueryerContext)
		if !ok {
			return fmt.Errorf("driver connection %T cannot query", dc)
		}
		rows, err := q.QueryContext(ctx, `SELECT data FROM segments WHERE partition = ? AND build_key = ?`,
			[]driver.NamedValue{{Ordinal: 1, Value: partition}, {Ordinal: 2, Value: key}})
		if err != nil {
			return err
		}
		dest := make([]driver.Value, 1)
		err = rows.Next(dest)
		if cerr := rows.Close(); err == nil {
			err = cerr
		}
		switch {
		case errors.Is(err, io.EOF):
			return nil // the row is gone (forgotten): treat as swept
		case err != nil:
			return err
		}
		switch v := dest[0].(type) {
		case nil:
		case []byte:
			data = v
		default:
			return fmt.Errorf("segment data of type %T", v)
		}
		return nil
	})
	return data, err
}

// Sweep implements segstore.Store. It also deletes the segment files no entry
// names once they are orphanAge old by the system clock.
func (s *Store) Sweep(ctx context.Context, nowMs, forgetBeforeMs int64) (int, error) {
	// The files of the entries about to expire, read first (RETURNING
	// would give the updated, NULL, names). An entry replaced in between
	// leaves its old file unnamed, so removing it is right; one that
	// expires in between keeps its file until the orphan sweep.
	rows, err := s.db.QueryContext(ctx, `SELECT data_file FROM segments WHERE expires_at_ms <= ? AND data_file IS NOT NULL`, nowMs)
	if err != nil {
		return 0, fmt.Errorf("segstore: sweep: %w", err)
	}
	var files []string
	for rows.Next() {
		var f string
		if err := rows.Scan(&f); err != nil {
			_ = rows.Close()
			return 0, fmt.Errorf("segstore: sweep: %w", err)
		}
		files = append(files, f)
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("segstore: sweep: %w", err)
	}
	_ = rows.Close()
	s.files.Lock()
	res, err := s.db.ExecContext(ctx, `UPDATE segments SET data = NULL, data_file = NULL WHERE expires_at_ms <= ? AND `+hasBytes, nowMs)
	if err != nil {
		s.files.Unlock()
		return 0, fmt.Errorf("segstore: sweep: %w", err)
	}
	n64, _ := res.RowsAffected()
	n := int(n64)
	// The expired entries no longer name these files; one an unexpired
	// entry of the same id still names stays. A download that read an
	// entry before the update finds the file gone and answers "expired".
	for _, f := range files {
		s.removeUnnamed(ctx, f)
	}
	s.files.Unlock()
	if _, err := s.db.ExecContext(ctx, `DELETE FROM segments WHERE expires_at_ms < ? AND NOT `+hasBytes, forgetBeforeMs); err != nil {
		return n, fmt.Errorf("segstore: forget tombstones: %w", err)
	}
	// File times are the operating system's, so the cutoff is too (nowMs
	// may be a test clock).
	if err := s.removeOrphans(ctx, time.Now().Add(-orphanAge)); err != nil {
		return n, fmt.Errorf("segstore: sweep orphan files: %w", err)
	}
	return n, nil
}

// removeOrphans deletes the files of the segment directory that no entry
// names and that were last written before cutoff.
func (s *Store) removeOrphans(ctx context.Context, cutoff time.Time) error {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	var old []string
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		if info, err := e.Info(); err == nil && info.ModTime().Before(cutoff) {
			old = append(old, e.Name())
		}
	}
	if len(old) == 0 {
		return nil
	}
	s.files.Lock()
	defer s.files.Unlock()
	named := map[string]bool{}
	rows, err := s.db.QueryContext(ctx, `SELECT data_file FROM segments WHERE data_file IS NOT NULL`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var f string
		if err := rows.Scan(&f); err != nil {
			_ = rows.Close()
			return err
		}
		named[f] = true
	}
	if err := rows.Err(); err != nil {
		return err
	}
	_ = rows.Close()
	for _, f := range old {
		if !named[f] {
			_ = os.Remove(filepath.Join(s.dir, f))
		}
	}
	return nil
}

// Held implements segstore.Evicter: every segment id whose bytes the store
// holds (expired or not), with the bytes of its one file (content-
// addressed: all its entries share it).
func (s *Store) Held(ctx context.Context) ([]segstore.Held, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, max(byte_length), max(created_at_ms), max(expires_at_ms) FROM segments WHERE `+hasBytes+` GROUP BY id`)
	if err != nil {
		return nil, fmt.Errorf("segstore: held segments: %w", err)
	}
	defer rows.Close()
	return segstore.ScanHeld(rows)
}

// Evict implements segstore.Evicter: every entry of each id becomes a
// tombstone (downloads answer "expired", lookups miss and rebuild) and its
// file is removed. It returns how many ids held bytes.
func (s *Store) Evict(ctx context.Context, ids []string) (int, error) {
	s.files.Lock()
	defer s.files.Unlock()
	n := 0
	for _, id := range ids {
		rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT data_file FROM segments WHERE id = ? AND data_file IS NOT NULL`, id)
		if err != nil {
			return n, fmt.Errorf("segstore: evict: %w", err)
		}
		var files []string
		for rows.Next() {
			var f string
			if err := rows.Scan(&f); err != nil {
				_ = rows.Close()
				return n, fmt.Errorf("segstore: evict: %w", err)
			}
			files = append(files, f)
		}
		_ = rows.Close()
		res, err := s.db.ExecContext(ctx, `UPDATE segments SET data = NULL, data_file = NULL WHERE id = ? AND `+hasBytes, id)
		if err != nil {
			return n, fmt.Errorf("segstore: evict: %w", err)
		}
		if k, _ := res.RowsAffected(); k > 0 {
			n++
		}
		for _, f := range files {
			s.removeUnnamed(ctx, f)
		}
	}
	return n, nil
}

// Close implements segstore.Store.
func (s *Store) Close() error { return s.db.Close() }
