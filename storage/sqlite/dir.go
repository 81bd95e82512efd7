package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/synclane/synclane/storage"
)

// Several database files.
//
// SQLite has one writer per database file: every push of every partition
// queues on it. A Dir spreads partitions over K files of one directory,
// each a Store with its own writer connection, write lock and group
// commit, so pushes to partitions of different files commit in parallel.
//
// A partition lives wholly in one file: FileOf(partition, K), a stable
// hash (FNV-1a 64 of the partition id's bytes, modulo K) that never
// changes for a K, so every row, commit, client record, lease, checkpoint
// and reaction of a partition is in the same file, and the push
// transaction of one partition is one transaction of one file, as with K
// = 1. What no partition owns lives in the home file (file 0,
// synclane.db): blob metadata (its references stay with their rows), the
// maintenance lease, and the layout record.
//
// Layout: file 0 is DirFileName (the single-file layout is exactly K =
// 1), file i > 0 is "synclane-<i>.db". Each file's sync_meta records the
// file count, its index and a layout id shared by the files of one
// directory, so a missing, misplaced or foreign file is refused at open
// rather than served as empty partitions. K is chosen when the directory
// is created (DirOptions.Files); an existing directory opens with the K it
// records, and one that records none (a directory made before several
// files existed, or by sqlite.Open) opens as K = 1 without migration.
// Changing K moves partitions between files: Respread does it offline.
//
// The serve gate stays database-wide (RFC 0007: a pending checkpoint of
// any partition closes the gate of processes that did not declare it):
// the gate of a partition reads its own file and the pending checkpoints
// of every other file.

// DirFileName is the home file of a data directory (file 0).
const DirFileName = "synclane.db"

// DefaultDirFiles is the default DirOptions.Files for a new directory.
// bench/RESULTS.md ("Several SQLite writers", issue 33) has the curve it
// was chosen from.
const DefaultDirFiles = 2

// MaxDirFiles bounds DirOptions.Files: each file holds a writer, a read
// pool and a page-scan pool of its own.
const MaxDirFiles = 64

// DirOptions configures OpenDir.
type DirOptions struct {
	// Options configures every file's Store (each file has its own read
	// pools of Options.ReadConns connections).
	Options
	// Files is K, the number of database files of a new directory; 0
	// means DefaultDirFiles. An existing directory keeps the K it
	// records: a different Files is refused with ErrFileCount when
	// FilesExplicit is set, and ignored (with a log line) otherwise.
	Files int
	// FilesExplicit says the caller asked for Files (a flag given), rather
	// than taking the default.
	FilesExplicit bool
}

// ErrFileCount reports a directory whose recorded file count differs from
// the one asked for; Respread changes it.
var ErrFileCount = errors.New("sqlite: the data directory has a different number of database files")

// ErrLayout reports a data directory whose files do not form one layout
// (a file missing, or one from another directory or position).
var ErrLayout = errors.New("sqlite: the data directory's database files do not match")

// FileOf returns the index of the file holding partition among files
// files: FNV-1a 64 of the partition id modulo files. It is part of the
// on-disk format: it never changes.
func FileOf(partition string, files int) int {
	if files <= 1 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(partition))
	return int(h.Sum64() % uint64(files))
}

// DirFileNames returns the names of the files of a K-file directory, home
// file first.
func DirFileNames(files int) []string {
	out := make([]string, max(files, 1))
	for i := range out {
		out[i] = dirFileName(i)
	}
	return out
}

func dirFileName(i int) string {
	if i == 0 {
		return DirFileName
	}
	return "synclane-" + strconv.Itoa(i) + ".db"
}

// Meta keys of the layout record.
const (
	metaFiles     = "layout_files"
	metaFileIndex = "layout_file_index"
	metaLayoutID  = "layout_id"
)

// Dir is a data directory of one or more database files (see the
// comment at the top of dir.go). It is safe for concurrent use.
type Dir struct {
	log   *zap.Logger
	dir   string
	files []*Store
	// k is the number of files (len(files) once open); layout is the
	// layout id shared by the files ("" for K = 1).
	k      int
	layout string
	// claimTurn rotates the file ClaimReactions asks first.
	claimTurn atomic.Uint64
	// pending holds, per file, the last reading of the other files'
	// pending checkpoints (dir_gate.go); gateReads counts readings.
	pending   []atomic.Pointer[pendingReading]
	gateReads atomic.Uint64
	// orphanMu guards orphanAfter: the blob id MarkOrphanBlobs' walk of
	// candidates stopped after ("": from the start).
	orphanMu    sync.Mutex
	orphanAfter string
}

// OpenDir opens (creating if missing) the data directory dir's database
// files. EnsureSchema (of Backend().Lifecycle) must run before any other
// method.
func OpenDir(ctx context.Context, dir string, opts DirOptions) (*Dir, error) {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Files == 0 {
		opts.Files = DefaultDirFiles
	}
	if opts.Files < 1 || opts.Files > MaxDirFiles {
		return nil, fmt.Errorf("sqlite: %d database files: must be 1 to %d", opts.Files, MaxDirFiles)
	}
	if err := RespreadPending(dir); err != nil {
		return nil, err // a swap half done: neither layout is whole in place
	}
	home, err := Open(ctx, filepath.Join(dir, DirFileName), opts.Options)
	if err != nil {
		return nil, err
	}
	d := &Dir{log: opts.Logger, dir: dir, files: []*Store{home}}
	fail := func(err error) (*Dir, error) {
		_ = d.Close()
		return nil, err
	}
	rec, err := home.readLayout(ctx)
	if err != nil {
		return fail(err)
	}
	k := rec.files
	d.k = k
	switch {
	case k == 0:
		used, err := home.holdsData(ctx)
		if err != nil {
			return fail(err)
		}
		if used {
			k = 1 // a directory of the single-file layout: kept as it is
			d.k = k
		} else {
			if stray, err := strayFiles(ctx, dir); err != nil || len(stray) > 0 {
				if err == nil {
					err = fmt.Errorf("%w: %s has %s but its home file %s holds no layout (it is new or was missing): files of another layout, left by an interrupted restore or respread? Run that command again, or move them out of the directory",
						ErrLayout, dir, strings.Join(stray, ", "), DirFileName)
				}
				return fail(err)
			}
			k = opts.Files
			d.k = k
			if err := d.create(ctx, k, opts.Options); err != nil {
				return fail(err)
			}
		}
	default:
		d.layout = rec.id
		for i := 1; i < k; i++ {
			st, err := d.openFile(ctx, i, opts.Options, false)
			if err != nil {
				return fail(err)
			}
			d.files = append(d.files, st)
		}
	}
	if k != opts.Files {
		if opts.FilesExplicit {
			return fail(fmt.Errorf("%w: %s has %d, %d asked for (run `synclane respread --files %d` with the server stopped to change it)",
				ErrFileCount, dir, k, opts.Files, opts.Files))
		}
		d.log.Info("sqlite data directory keeps its number of database files", zap.String("dir", dir), zap.Int("files", k), zap.Int("default_files", opts.Files))
	}
	d.pending = make([]atomic.Pointer[pendingReading], len(d.files))
	if k > 1 {
		d.log.Info("sqlite data directory opened", zap.String("dir", dir), zap.Int("files", k))
	}
	return d, nil
}

// strayFiles returns the names of the numbered database files
// (synclane-<i>.db, 1 ≤ i < MaxDirFiles) in dir that hold data (a
// partition or a schema): a directory whose home file holds no layout
// must have none, or a new layout would be stamped next to another
// layout's data. Files a create interrupted before its home file's
// record (stamped, empty) are not counted: the create is run again.
func strayFiles(ctx context.Context, dir string) ([]string, error) {
	var out []string
	for i := 1; i < MaxDirFiles; i++ {
		name := dirFileName(i)
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("sqlite: %w", err)
		}
		used, err := fileHoldsData(ctx, path)
		if err != nil {
			return nil, err
		}
		if used {
			out = append(out, name)
		}
	}
	return out, nil
}

// holdsDataSQL tells whether a database holds a partition or a schema.
const holdsDataSQL = `SELECT EXISTS(SELECT 1 FROM sync_partitions) OR EXISTS(SELECT 1 FROM sync_meta WHERE key = 'schema_version')`

// fileHoldsData reports whether path holds a partition or a schema
// (Store.holdsData of a file not opened as a Store). It only reads, on a
// connection of its own that SQLite may use to replay the file's -wal.
func fileHoldsData(ctx context.Context, path string) (bool, error) {
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_busy_timeout=10000")
	if err != nil {
		return false, fmt.Errorf("sqlite: read %s: %w", path, err)
	}
	defer db.Close()
	var tables int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('sync_partitions', 'sync_meta')`).Scan(&tables); err != nil {
		return false, fmt.Errorf("sqlite: read %s: %w", path, err)
	}
	if tables < 2 {
		return false, nil
	}
	var used bool
	if err := db.QueryRowContext(ctx, holdsDataSQL).Scan(&used); err != nil {
		return false, fmt.Errorf("sqlite: read %s: %w", path, err)
	}
	return used, nil
}

// create stamps a new directory with k files: the other files first, the
// home file's record last, so a crash midway leaves a home file without a
// record (a new directory again).
func (d *Dir) create(ctx context.Context, k int, opts Options) error {
	if k == 1 {
		return nil
	}
	d.layout = storage.NewLogEpoch()
	for i := 1; i < k; i++ {
		st, err := d.openFile(ctx, i, opts, true)
		if err != nil {
			return err
		}
		d.files = append(d.files, st)
	}
	return d.files[0].writeLayout(ctx, layoutRecord{files: k, index: 0, id: d.layout})
}

// openFile opens file i; fresh stamps it (a file that already holds data
// is refused), otherwise its record must match the home file's.
func (d *Dir) openFile(ctx context.Context, i int, opts Options, fresh bool) (*Store, error) {
	path := filepath.Join(d.dir, dirFileName(i))
	if !fresh {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("%w: %s is missing (the directory has %d files)", ErrLayout, path, d.k)
		}
	}
	st, err := Open(ctx, path, opts)
	if err != nil {
		return nil, err
	}
	rec, err := st.readLayout(ctx)
	if err == nil && fresh {
		var used bool
		if used, err = st.holdsData(ctx); err == nil && used && rec.id != d.layout {
			err = fmt.Errorf("%w: %s holds data of another layout; refusing to overwrite it", ErrLayout, path)
		} else if err == nil {
			err = st.writeLayout(ctx, layoutRecord{files: d.k, index: i, id: d.layout})
		}
	} else if err == nil && (rec.id != d.layout || rec.index != i) {
		err = fmt.Errorf("%w: %s is file %d of layout %q, want file %d of %q", ErrLayout, path, rec.index, rec.id, i, d.layout)
	}
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	return st, nil
}

// layoutRecord is one file's layout record.
type layoutRecord struct {
	files, index int
	id           string
}

// readLayout reads the file's layout record (files 0: none).
func (s *Store) readLayout(ctx context.Context) (layoutRecord, error) {
	return scanLayout(ctx, s.rdb, s.path)
}

// scanLayout reads the layout record of the database db (at path, for
// errors).
func scanLayout(ctx context.Context, db *sql.DB, path string) (layoutRecord, error) {
	var rec layoutRecord
	rows, err := db.QueryContext(ctx, `SELECT key, value FROM sync_meta WHERE key IN (?, ?, ?)`, metaFiles, metaFileIndex, metaLayoutID)
	if err != nil {
		return rec, fmt.Errorf("sqlite: read layout of %s: %w", path, err)
	}
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return rec, fmt.Errorf("sqlite: read layout of %s: %w", path, err)
		}
		switch k {
		case metaFiles:
			rec.files, err = strconv.Atoi(v)
		case metaFileIndex:
			rec.index, err = strconv.Atoi(v)
		case metaLayoutID:
			rec.id = v
		}
		if err != nil {
			return rec, fmt.Errorf("sqlite: read layout of %s: %s: %w", path, k, err)
		}
	}
	return rec, rows.Err()
}

// CheckLayoutFiles reads, without changing them, the layout records of
// paths, database files nothing writes (copies: a -wal beside one is not
// read) in file order (home file first), and reports ErrLayout unless
// they are the files 0 … len-1 of one layout (a single file: of none, or
// of a one-file layout). A backup
// checks its copies with it: files copied while an offline respread or
// restore swapped the directory's files would be of two layouts.
func CheckLayoutFiles(ctx context.Context, paths []string) error {
	var id string
	for i, path := range paths {
		// immutable: nothing writes the copies, and SQLite creates no
		// -wal or -shm beside them
		db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?mode=ro&immutable=1")
		if err != nil {
			return fmt.Errorf("sqlite: read layout of %s: %w", path, err)
		}
		rec, err := scanLayout(ctx, db, path)
		_ = db.Close()
		if err != nil {
			return err
		}
		if len(paths) == 1 {
			if rec.files > 1 {
				return fmt.Errorf("%w: %s is file %d of a layout of %d files, alone", ErrLayout, path, rec.index, rec.files)
			}
			return nil
		}
		if i == 0 {
			id = rec.id
		}
		if rec.files != len(paths) || rec.index != i || rec.id != id || id == "" {
			return fmt.Errorf("%w: %s is file %d of %d of layout %q, want file %d of %d of layout %q",
				ErrLayout, path, rec.index, rec.files, rec.id, i, len(paths), id)
		}
	}
	return nil
}

// writeLayout stores the file's layout record.
func (s *Store) writeLayout(ctx context.Context, rec layoutRecord) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.unlock()
	return s.inWriteTx(ctx, "write layout", func(ctx context.Context) error {
		for k, v := range map[string]string{metaFiles: strconv.Itoa(rec.files), metaFileIndex: strconv.Itoa(rec.index), metaLayoutID: rec.id} {
			if _, err := s.conn.ExecContext(ctx, `INSERT INTO sync_meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value`, k, v); err != nil {
				return err
			}
		}
		return nil
	})
}

// holdsData reports whether the file has been used: a schema marker or a
// partition.
func (s *Store) holdsData(ctx context.Context) (bool, error) {
	var used bool
	err := s.rdb.QueryRowContext(ctx, holdsDataSQL).Scan(&used)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, fmt.Errorf("sqlite: read %s: %w", s.path, err)
	}
	return used, nil
}

// Files returns K, the number of database files.
func (d *Dir) Files() int { return len(d.files) }

// File returns the Store of file i (0 is the home file), for tools and
// tests that work on one file (Backup, Space).
func (d *Dir) File(i int) *Store { return d.files[i] }

// Paths returns the files' paths, home file first.
func (d *Dir) Paths() []string {
	out := make([]string, len(d.files))
	for i, st := range d.files {
		out[i] = st.path
	}
	return out
}

// of returns the store holding partition.
func (d *Dir) of(partition string) *Store {
	if len(d.files) == 1 {
		return d.files[0]
	}
	return d.files[FileOf(partition, len(d.files))]
}

// home is file 0.
func (d *Dir) home() *Store { return d.files[0] }

// Close closes every file; calling it again returns the first result.
func (d *Dir) Close() error {
	var errs []error
	for _, st := range d.files {
		if err := st.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Backup writes a consistent copy of every file into the directory to
// (created; it must not exist), under the files' own names: each file is
// one snapshot (Store.Backup), the other files first and the home file
// last, so every blob a copied row references has its metadata in the
// copy (unless the orphan sweep removed it while the backup ran).
func (d *Dir) Backup(ctx context.Context, to string) error {
	if err := os.Mkdir(to, 0o750); err != nil {
		return fmt.Errorf("sqlite: backup: %w", err)
	}
	for i := len(d.files) - 1; i >= 0; i-- {
		if err := d.files[i].Backup(ctx, filepath.Join(to, dirFileName(i))); err != nil {
			return err
		}
	}
	return nil
}

// Space sums the page counts of every file.
func (d *Dir) Space(ctx context.Context) (Space, error) {
	var sum Space
	for _, st := range d.files {
		sp, err := st.Space(ctx)
		if err != nil {
			return Space{}, err
		}
		sum.PageSize = sp.PageSize
		sum.Pages += sp.Pages
		sum.FreePages += sp.FreePages
	}
	return sum, nil
}
