// Package sqlitefile is the segment store of the embedded mode: the
// publications in one SQLite file, each segment's bytes in a file beside it. It
// links the SQLite driver; the segment cache (package segstore) does not.
package sqlitefile

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/segstore"
)

// Store is the embedded-mode segstore.Store: one SQLite file (WAL) holding
// every segment's publications for the processes that open it (one row
// each, keyed by partition and build key), and a directory beside it (the
// file's path + "-data") holding each segment's bytes as a file of its
// own. Writing a page-sized segment as a file costs one write of its
// bytes, where a blob in the database was written to the WAL and again at
// checkpoint. Bytes are written to a temporary file and renamed into
// place before their publication is committed, and are checked against
// their id (sha256) when read back, so a file torn by a power loss (files
// are not fsync'd: a segment is a cache) or altered on disk is answered
// as expired (the client re-pulls and the page is rebuilt), never served.
// Sweep deletes the files of segments whose last publication expired, and
// files no publication names (left by a crash between the rename and the
// commit, or by a publication replaced after expiring) once they are an
// hour old.
//
// Files are content-addressed: a segment's file is named after its id
// (the hash of its bytes), so every publication of the same bytes (the
// same page under several scope digests, pins, page keys or partitions)
// shares one file, and a file is removed only once no publication with
// bytes names it. A publication is one row written by one statement, so
// two publishers of the same bytes never drop each other's. Naming a file
// in a publication (after making sure it is in place) and removing an
// unnamed file are each done under SQLite's write lock (an IMMEDIATE
// transaction), which every process opening the file shares: one process
// never removes a file another has just named. Held and Evict let the
// segment cache bound the directory (segstore.Quota).
//
// A segments.db written before publications recorded their log epoch
// (no log_epoch column) is migrated when opened: its rows become
// tombstones (published by nobody, never served: a download of one
// answers sync.not_found and the client's next pull builds the page
// again) and their files go with the orphan sweep. Rows of still older
// versions that hold their bytes in the database go the same way.
type Store struct {
	db  *sql.DB
	dir string

	mu       sync.Mutex
	verified map[string]fileStamp // form file path → the file checked (see OpenForm)

	// lookupStmt is Lookup's statement, prepared on first use (a
	// bootstrap storm looks a build key up per request: parsing the SQL
	// each time cost more than running it).
	lookupOnce sync.Once
	lookupStmt *sql.Stmt
	lookupErr  error
}

// fileStamp identifies one write of a file.
type fileStamp struct {
	size int64
	mod  time.Time
}

// orphanAge is how old a segment file no publication names must be before Sweep
// deletes it: far longer than a Put's rename-to-commit window.
const orphanAge = time.Hour

// sqliteSchema creates the publications table. Columns added since its
// first layout are added by Open to a file that lacks them (data_file,
// log_epoch, schema_version); data is what versions before segment files
// stored the bytes in (never read now).
const sqliteSchema = `CREATE TABLE IF NOT EXISTS segments (
  partition TEXT NOT NULL, build_key TEXT NOT NULL, id TEXT NOT NULL,
  media_type INTEGER NOT NULL, tbl TEXT NOT NULL, scope_digest TEXT NOT NULL,
  as_of INTEGER NOT NULL, byte_length INTEGER NOT NULL, row_count INTEGER NOT NULL,
  row_cursor TEXT, next_row_cursor TEXT, created_at_ms INTEGER NOT NULL,
  expires_at_ms INTEGER NOT NULL, data BLOB, data_file TEXT,
  log_epoch TEXT NOT NULL DEFAULT '', schema_version INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (partition, build_key)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS segments_by_id ON segments (id, partition);
CREATE INDEX IF NOT EXISTS segments_by_expiry ON segments (expires_at_ms);
CREATE TABLE IF NOT EXISTS segment_forms (
  id TEXT NOT NULL, enc TEXT NOT NULL, bytes INTEGER NOT NULL,
  PRIMARY KEY (id, enc)) WITHOUT ROWID;`

// fileIndex indexes publications by their file (shared by the
// publications of one segment id).
const fileIndex = `CREATE INDEX IF NOT EXISTS segments_by_file ON segments (data_file) WHERE data_file IS NOT NULL`

// sqliteFileTuning dates from when versions kept the bytes in the
// database (64 KiB pages, reads through a memory map of up to 256 MiB);
// kept so files of those versions and new ones open alike. The page size
// takes effect when the file is created.
const sqliteFileTuning = "&_pragma=page_size(65536)&_pragma=mmap_size(268435456)"

// Open opens (creating if needed) the segment file at path.
func Open(ctx context.Context, path string) (*Store, error) {
	// _txlock=immediate: every transaction takes the write lock at BEGIN
	// (see locked).
	db, err := sql.Open("sqlite", "file:"+path+"?_busy_timeout=10000&_journal_mode=WAL&_synchronous=NORMAL&_txlock=immediate"+sqliteFileTuning)
	if err != nil {
		return nil, fmt.Errorf("segstore: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(4)
	if _, err := db.ExecContext(ctx, sqliteSchema); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("segstore: create tables in %s: %w", path, err)
	}
	err = migrate(ctx, db)
	if err != nil && strings.Contains(err.Error(), "duplicate column") {
		err = migrate(ctx, db) // another process migrated it meanwhile: look again
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("segstore: migrate %s: %w", path, err)
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
	return &Store{db: db, dir: dir, verified: map[string]fileStamp{}}, nil
}

// migrate brings a segments.db of an earlier version to the current
// layout, in one transaction: data_file (versions before segment files
// kept the bytes in the data column) and the publication's log_epoch and
// schema_version. A file that lacked log_epoch holds rows published
// before epochs were recorded: they become tombstones (no bytes, data
// cleared), published by nobody; their files, no longer named, go with
// the orphan sweep.
func migrate(ctx context.Context, db *sql.DB) error {
	has := map[string]bool{}
	rows, err := db.QueryContext(ctx, `SELECT name FROM pragma_table_info('segments')`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			_ = rows.Close()
			return err
		}
		has[n] = true
	}
	if err := rows.Close(); err != nil {
		return err
	}
	if has["data_file"] && has["log_epoch"] && has["schema_version"] {
		return nil
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	for _, col := range []struct{ name, def string }{
		{"data_file", "data_file TEXT"},
		{"log_epoch", "log_epoch TEXT NOT NULL DEFAULT ''"},
		{"schema_version", "schema_version INTEGER NOT NULL DEFAULT 0"},
	} {
		if !has[col.name] {
			if _, err := tx.ExecContext(ctx, `ALTER TABLE segments ADD COLUMN `+col.def); err != nil {
				return err
			}
		}
	}
	if !has["log_epoch"] {
		if _, err := tx.ExecContext(ctx, `UPDATE segments SET data = NULL, data_file = NULL`); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// hasBytes is the SQL condition "the publication still holds its bytes".
const hasBytes = `data_file IS NOT NULL`

const metaCols = `partition, build_key, id, log_epoch, schema_version, media_type, tbl, scope_digest, as_of, byte_length, row_count, row_cursor, next_row_cursor, created_at_ms, expires_at_ms`

type scanner interface{ Scan(dest ...any) error }

func scanMeta(r scanner, extra ...any) (segstore.Meta, error) {
	var m segstore.Meta
	var mt int64
	var rc, nrc sql.NullString
	dest := append([]any{&m.Partition, &m.Key, &m.ID, &m.LogEpoch, &m.SchemaVersion, &mt, &m.Table, &m.ScopeDigest, &m.AsOfCommitSeq,
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
	s.lookupOnce.Do(func() {
		s.lookupStmt, s.lookupErr = s.db.PrepareContext(context.WithoutCancel(ctx), `SELECT `+metaCols+` FROM segments WHERE partition = ? AND build_key = ? AND expires_at_ms > ? AND `+hasBytes)
	})
	if s.lookupErr != nil {
		return segstore.Meta{}, fmt.Errorf("segstore: lookup: %w", s.lookupErr)
	}
	m, err := scanMeta(s.lookupStmt.QueryRowContext(ctx, partition, key, nowMs))
	if errors.Is(err, sql.ErrNoRows) {
		return segstore.Meta{}, segstore.ErrNotFound
	}
	if err != nil {
		return segstore.Meta{}, fmt.Errorf("segstore: lookup: %w", err)
	}
	return m, nil
}

// Put implements segstore.Store. The bytes go to the file named after
// their id: written to a temporary name first (unless a file of that many
// bytes is already there, written for another publication of the same
// id), then, under the write lock (locked), renamed into place or
// discarded for the one in place, and the publication naming the file is
// written, in one statement that replaces a publication of the same key
// only when it no longer holds bytes or has expired. When the publication
// is not stored (another builder's live one holds the key) a file this
// call put in place and no publication names is removed again.
func (s *Store) Put(ctx context.Context, m segstore.Meta, data []byte) error {
	name, err := fileName(m.ID)
	if err != nil {
		return fmt.Errorf("segstore: put: %w", err)
	}
	final := filepath.Join(s.dir, name)
	tmp := ""
	if st, err := os.Stat(final); err != nil || st.Size() != int64(len(data)) {
		if tmp, err = writeTemp(final, data); err != nil {
			return fmt.Errorf("segstore: put %s: %w", m.ID, err)
		}
		defer os.Remove(tmp) // gone already once renamed into place
	}
	err = s.locked(ctx, func(tx *sql.Tx) error {
		placed, err := s.place(final, tmp, m.ID, data)
		if err != nil {
			return err
		}
		var stored int
		err = tx.QueryRowContext(ctx, `INSERT INTO segments (`+metaCols+`, data, data_file) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,NULL,?)
ON CONFLICT (partition, build_key) DO UPDATE SET id = excluded.id, log_epoch = excluded.log_epoch, schema_version = excluded.schema_version,
  media_type = excluded.media_type, tbl = excluded.tbl,
  scope_digest = excluded.scope_digest, as_of = excluded.as_of, byte_length = excluded.byte_length, row_count = excluded.row_count,
  row_cursor = excluded.row_cursor, next_row_cursor = excluded.next_row_cursor, created_at_ms = excluded.created_at_ms,
  expires_at_ms = excluded.expires_at_ms, data = NULL, data_file = excluded.data_file
WHERE segments.data_file IS NULL OR segments.expires_at_ms <= excluded.created_at_ms
RETURNING 1`,
			m.Partition, m.Key, m.ID, m.LogEpoch, m.SchemaVersion, int64(m.MediaType), m.Table, m.ScopeDigest, m.AsOfCommitSeq, m.ByteLength, m.RowCount,
			nullable(m.RowCursor), nullable(m.NextRowCursor), m.CreatedAtMs, m.ExpiresAtMs, name).Scan(&stored)
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		// Another builder's live publication holds the key: a file this
		// call put in place goes unless a publication names it.
		if placed {
			_, err = s.removeUnnamed(ctx, tx, name)
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("segstore: put %s: %w", m.ID, err)
	}
	return nil
}

// locked runs fn in a transaction holding SQLite's write lock (the
// database is opened with _txlock=immediate), committing when fn returns
// nil. Every process opening the segment file takes the same lock, so
// decisions about which files are named are serialized across them.
func (s *Store) locked(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// writeTemp writes data to a fresh temporary file beside final and
// returns its path.
func writeTemp(final string, data []byte) (string, error) {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", err
	}
	tmp := final + "." + hex.EncodeToString(rnd[:]) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// place makes final hold data (the bytes of segment id), reporting whether
// it put a file there (false: one of len(data) bytes was in place,
// written for another publication of the same id; a file altered since is
// caught by the check of every read, which then removes it). tmp, when
// not "", holds data already and is renamed into place; otherwise data is
// written to a temporary file first. A file of another length is replaced
// when it does not hold the bytes of id (torn by a power loss, altered);
// one that does is a hash collision, refused with segstore.ErrCollision.
// A file is complete under its final name or absent (a crash leaves at
// most a temporary file, which the orphan sweep removes). Called under
// the write lock.
func (s *Store) place(final, tmp, id string, data []byte) (bool, error) {
	if st, err := os.Stat(final); err == nil && st.Mode().IsRegular() {
		if st.Size() == int64(len(data)) {
			return false, nil
		}
		if f, err := os.Open(final); err == nil {
			ok, err := fileHolds(f, segstore.Meta{ID: id, ByteLength: st.Size()})
			_ = f.Close()
			if err == nil && ok {
				return false, segstore.ErrCollision
			}
		}
	}
	if tmp == "" {
		var err error
		if tmp, err = writeTemp(final, data); err != nil {
			return false, err
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		_ = os.Remove(tmp)
		return false, err
	}
	return true, nil
}

// removeUnnamed removes segment file name unless a publication names it,
// reporting whether it did. Called under the write lock (tx).
func (s *Store) removeUnnamed(ctx context.Context, tx *sql.Tx, name string) (bool, error) {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM segments WHERE data_file = ? LIMIT 1`, name).Scan(&one)
	switch {
	case err == nil:
		return false, nil // named
	case !errors.Is(err, sql.ErrNoRows):
		return false, err
	}
	path, err := s.filePath(name)
	if err != nil {
		return false, nil
	}
	if err := s.dropForms(ctx, tx, name); err != nil {
		return false, err
	}
	return os.Remove(path) == nil, nil
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

// Get implements segstore.Store.
func (s *Store) Get(ctx context.Context, partition, id string, nowMs int64) ([]segstore.Publication, []byte, error) {
	pubs, live, err := s.publications(ctx, partition, id, nowMs)
	if err != nil || live == nil {
		return pubs, nil, err
	}
	name, _ := fileName(id) // a publication names it, so id is well formed
	data, err := s.readFile(name, *live)
	if err != nil {
		return nil, nil, fmt.Errorf("segstore: get data: %w", err)
	}
	if data == nil { // swept meanwhile, or its file is unusable
		s.dropFile(ctx, name)
		return dead(pubs), nil, nil
	}
	return pubs, data, nil
}

// Publications implements segstore.PublicationReader: the publications
// as Get reads them, the segment's file neither opened nor checked.
func (s *Store) Publications(ctx context.Context, partition, id string, nowMs int64) ([]segstore.Publication, error) {
	pubs, _, err := s.publications(ctx, partition, id, nowMs)
	return pubs, err
}

// OpenFile implements segstore.FileOpener: the segment's file, open at its
// start, after its bytes were checked against the id (a torn or altered
// file, or one swept meanwhile, leaves every publication dead and no
// file).
func (s *Store) OpenFile(ctx context.Context, partition, id string, nowMs int64) ([]segstore.Publication, *os.File, error) {
	pubs, live, err := s.publications(ctx, partition, id, nowMs)
	if err != nil || live == nil {
		return pubs, nil, err
	}
	name, _ := fileName(id)
	f, err := s.openVerified(name, *live)
	if err != nil {
		return nil, nil, fmt.Errorf("segstore: open segment file: %w", err)
	}
	if f == nil {
		s.dropFile(ctx, name)
		return dead(pubs), nil, nil
	}
	return pubs, f, nil
}

// dead marks every publication of pubs not live (their bytes are gone).
func dead(pubs []segstore.Publication) []segstore.Publication {
	for i := range pubs {
		pubs[i].Live = false
	}
	return pubs
}

// dropFile turns the publications naming segment file name, found gone
// or unusable, into tombstones (so a lookup misses and the segment is
// built again, instead of every download answering "expired" until its
// TTL ends) and removes the file. Best effort: the download is answered
// as expired either way.
func (s *Store) dropFile(ctx context.Context, name string) {
	_ = s.locked(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE segments SET data_file = NULL WHERE data_file = ?`, name); err != nil {
			return err
		}
		if err := s.dropForms(ctx, tx, name); err != nil {
			return err
		}
		if path, err := s.filePath(name); err == nil {
			_ = os.Remove(path)
		}
		return nil
	})
}

// publications reads every publication of segment id in partition ("" for
// any), live or not, and one live one (nil when none is):
// segstore.ErrNotFound when there is none.
func (s *Store) publications(ctx context.Context, partition, id string, nowMs int64) ([]segstore.Publication, *segstore.Meta, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+metaCols+`, `+hasBytes+` AND expires_at_ms > ? FROM segments WHERE id = ? AND (? = '' OR partition = ?)`, nowMs, id, partition, partition)
	if err != nil {
		return nil, nil, fmt.Errorf("segstore: get: %w", err)
	}
	defer rows.Close()
	var pubs []segstore.Publication
	var live *segstore.Meta
	for rows.Next() {
		var p segstore.Publication
		if p.Meta, err = scanMeta(rows, &p.Live); err != nil {
			return nil, nil, fmt.Errorf("segstore: get: %w", err)
		}
		if p.Live {
			live = &p.Meta
		}
		pubs = append(pubs, p)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("segstore: get: %w", err)
	}
	if len(pubs) == 0 {
		return nil, nil, segstore.ErrNotFound
	}
	return pubs, live, nil
}

// verifyBufs are the buffers openVerified hashes a file through.
var verifyBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// openVerified opens segment file name of publication m and checks its length
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

// readFile reads the segment file name of publication m in one pass: nil when it
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

// Sweep implements segstore.Store: the expired publications stop naming
// their file, and a file no publication names any more is removed (the
// last publication of its bytes expired), under the write lock. It also
// deletes the segment files no publication names once they are orphanAge
// old by the system clock.
func (s *Store) Sweep(ctx context.Context, nowMs, forgetBeforeMs int64) (int, error) {
	n := 0
	err := s.locked(ctx, func(tx *sql.Tx) error {
		// The files of the publications about to expire, read first
		// (RETURNING would give the updated, NULL, names).
		files, err := queryStrings(ctx, tx, `SELECT DISTINCT data_file FROM segments WHERE expires_at_ms <= ? AND data_file IS NOT NULL`, nowMs)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE segments SET data_file = NULL WHERE expires_at_ms <= ? AND `+hasBytes, nowMs); err != nil {
			return err
		}
		// The expired publications no longer name these files; one an
		// unexpired publication of the same id still names stays. A
		// download that read a publication before the update finds the
		// file gone and answers "expired".
		for _, f := range files {
			removed, err := s.removeUnnamed(ctx, tx, f)
			if err != nil {
				return err
			}
			if removed {
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("segstore: sweep: %w", err)
	}
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

// querier is what queryStrings reads through (*sql.DB, *sql.Tx).
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// queryStrings reads the one text column of a query's rows.
func queryStrings(ctx context.Context, q querier, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// removeOrphans deletes the files of the segment directory that no
// publication names and that were last written before cutoff, under the
// write lock.
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
	return s.locked(ctx, func(tx *sql.Tx) error {
		files, err := queryStrings(ctx, tx, `SELECT data_file FROM segments WHERE data_file IS NOT NULL
UNION ALL SELECT substr(id, 8) || '.seg.' || enc FROM segment_forms`)
		if err != nil {
			return err
		}
		for _, f := range old {
			if !slices.Contains(files, f) {
				_ = os.Remove(filepath.Join(s.dir, f))
			}
		}
		return nil
	})
}

// Held implements segstore.Evicter: every segment id whose bytes the store
// holds (expired or not), with the bytes of its one file (content-
// addressed: all its publications share it) and of its encoded forms.
func (s *Store) Held(ctx context.Context) ([]segstore.Held, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, max(byte_length) + coalesce((SELECT sum(f.bytes) FROM segment_forms f WHERE f.id = segments.id), 0),
  max(created_at_ms), max(expires_at_ms) FROM segments WHERE `+hasBytes+` GROUP BY id`)
	if err != nil {
		return nil, fmt.Errorf("segstore: held segments: %w", err)
	}
	defer rows.Close()
	return segstore.ScanHeld(rows)
}

// Evict implements segstore.Evicter: every publication of each id becomes
// a tombstone (downloads answer "expired", lookups miss and rebuild) and
// its file is removed, under the write lock. It returns how many ids held
// bytes.
func (s *Store) Evict(ctx context.Context, ids []string) (int, error) {
	n := 0
	err := s.locked(ctx, func(tx *sql.Tx) error {
		for _, id := range ids {
			files, err := queryStrings(ctx, tx, `SELECT DISTINCT data_file FROM segments WHERE id = ? AND data_file IS NOT NULL`, id)
			if err != nil {
				return err
			}
			if len(files) == 0 {
				continue
			}
			if _, err := tx.ExecContext(ctx, `UPDATE segments SET data_file = NULL WHERE id = ? AND `+hasBytes, id); err != nil {
				return err
			}
			n++
			for _, f := range files {
				if _, err := s.removeUnnamed(ctx, tx, f); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("segstore: evict: %w", err)
	}
	return n, nil
}

// Close implements segstore.Store.
func (s *Store) Close() error {
	if s.lookupStmt != nil {
		_ = s.lookupStmt.Close()
	}
	return s.db.Close()
}

// formFileName is the name of the file holding the enc form of segment
// id: its bytes' file name and the encoding ("<hex>.seg.zstd").
func formFileName(id, enc string) (string, error) {
	if !segstore.ValidEncoding(enc) {
		return "", fmt.Errorf("segment form encoding %q", enc)
	}
	name, err := fileName(id)
	if err != nil {
		return "", err
	}
	return name + "." + enc, nil
}

// dropForms forgets the forms of the segment whose bytes' file is name
// and removes their files (the bytes are going). Called under the write
// lock (tx).
func (s *Store) dropForms(ctx context.Context, tx *sql.Tx, name string) error {
	hexID, ok := strings.CutSuffix(name, ".seg")
	if !ok {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM segment_forms WHERE id = ?`, "sha256:"+hexID); err != nil {
		return err
	}
	for _, enc := range []string{segstore.EncodingZstd, segstore.EncodingGzip} {
		_ = os.Remove(filepath.Join(s.dir, name+"."+enc))
	}
	return nil
}

// PutForm implements segstore.FormStore: the form goes to the file named
// after the segment's and the encoding (written to a temporary name, then,
// under the write lock, renamed into place and recorded with its length)
// while a publication still names the segment's bytes. A form recorded
// already stays.
func (s *Store) PutForm(ctx context.Context, id, enc string, data []byte) error {
	name, err := formFileName(id, enc)
	if err != nil {
		return fmt.Errorf("segstore: put form: %w", err)
	}
	final := filepath.Join(s.dir, name)
	tmp, err := writeTemp(final, data)
	if err != nil {
		return fmt.Errorf("segstore: put form %s %s: %w", id, enc, err)
	}
	defer os.Remove(tmp) // gone already once renamed into place
	placed := false
	err = s.locked(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM segments WHERE id = ? AND `+hasBytes+` LIMIT 1`, id).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return segstore.ErrNotFound // the bytes went meanwhile
		} else if err != nil {
			return err
		}
		var n int64
		err = tx.QueryRowContext(ctx, `SELECT bytes FROM segment_forms WHERE id = ? AND enc = ?`, id, enc).Scan(&n)
		if err == nil || !errors.Is(err, sql.ErrNoRows) {
			return err // nil: recorded already (another process built it)
		}
		if err := os.Rename(tmp, final); err != nil {
			return err
		}
		placed = true
		_, err = tx.ExecContext(ctx, `INSERT INTO segment_forms (id, enc, bytes) VALUES (?, ?, ?)`, id, enc, len(data))
		return err
	})
	if err != nil {
		if placed {
			_ = os.Remove(final) // the record was rolled back
		}
		return fmt.Errorf("segstore: put form %s %s: %w", id, enc, err)
	}
	if placed {
		if st, err := os.Stat(final); err == nil {
			s.markVerified(final, st) // it holds what was just built
		}
	}
	return nil
}

// OpenForm implements segstore.FormStore: the form's file, open at its
// start, its length checked against the record on every open; the first
// open of each file in a process also decodes it and checks the result
// against the segment id (a form file, like a segment's, is not fsync'd:
// one torn by a power loss is caught then, before the process serves it).
// A missing, short or spoiled form is dropped (segstore.ErrNotFound: it is
// built again).
func (s *Store) OpenForm(ctx context.Context, id, enc string) ([]byte, *os.File, error) {
	name, err := formFileName(id, enc)
	if err != nil {
		return nil, nil, fmt.Errorf("segstore: open form: %w", err)
	}
	var n int64
	err = s.db.QueryRowContext(ctx, `SELECT bytes FROM segment_forms WHERE id = ? AND enc = ?`, id, enc).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil, segstore.ErrNotFound
	} else if err != nil {
		return nil, nil, fmt.Errorf("segstore: open form: %w", err)
	}
	path := filepath.Join(s.dir, name)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		_ = s.DropForm(ctx, id, enc)
		return nil, nil, segstore.ErrNotFound
	} else if err != nil {
		return nil, nil, fmt.Errorf("segstore: open form: %w", err)
	}
	ok, err := s.formUsable(f, path, n, id, enc)
	if err != nil || !ok {
		_ = f.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("segstore: open form: %w", err)
		}
		_ = s.DropForm(ctx, id, enc)
		return nil, nil, segstore.ErrNotFound
	}
	return nil, f, nil
}

// formUsable checks an open form file: its length n, and once per write
// of the file in this process its decoding (leaving it at its start).
func (s *Store) formUsable(f *os.File, path string, n int64, id, enc string) (bool, error) {
	st, err := f.Stat()
	if err != nil {
		return false, err
	}
	if st.Size() != n {
		return false, nil
	}
	stamp := fileStamp{size: st.Size(), mod: st.ModTime()}
	s.mu.Lock()
	seen := s.verified[path] == stamp
	s.mu.Unlock()
	if seen {
		return true, nil
	}
	ok, err := segstore.FormHolds(enc, bufio.NewReaderSize(struct{ io.Reader }{f}, 64<<10), id)
	if err != nil || !ok {
		return false, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return false, err
	}
	s.markVerified(path, st)
	return true, nil
}

// markVerified records that the form file at path, as st describes it,
// holds its segment's form.
func (s *Store) markVerified(path string, st os.FileInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.verified) >= 1<<16 {
		clear(s.verified) // bounded: a file forgotten is checked again
	}
	s.verified[path] = fileStamp{size: st.Size(), mod: st.ModTime()}
}

// DropForm implements segstore.FormStore, under the write lock.
func (s *Store) DropForm(ctx context.Context, id, enc string) error {
	name, err := formFileName(id, enc)
	if err != nil {
		return fmt.Errorf("segstore: drop form: %w", err)
	}
	err = s.locked(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM segment_forms WHERE id = ? AND enc = ?`, id, enc); err != nil {
			return err
		}
		_ = os.Remove(filepath.Join(s.dir, name))
		return nil
	})
	if err != nil {
		return fmt.Errorf("segstore: drop form %s %s: %w", id, enc, err)
	}
	return nil
}
