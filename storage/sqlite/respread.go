package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/storage"
)

// Re-spreading a directory over another number of files.
//
// Respread builds the new layout in the work directory RespreadWorkDir
// inside the data directory, every file complete, verified and fsynced;
// then it writes the journal (RespreadWorkDir/journal.json, fsynced and
// renamed into place: the commit point) and swaps: the old layout's files
// are moved into respread-old-<stamp>/ and the new ones into the data
// directory, the home file last, then the journal and the work directory
// are removed. So at any point one layout is complete: before the journal
// the old one, untouched in place (a leftover work directory without a
// journal is an unfinished copy, removed by the next Respread); from the
// journal on, the new one, in the work directory or already in place.
// While a journal exists OpenDir refuses the directory with
// ErrRespreadPending, and Respread finishes the swap first (renames only,
// each done once: a new file still in the work directory has not been
// swapped in, so what holds its name in the data directory is old).

// RespreadWorkDir is the work directory of Respread inside the data
// directory.
const RespreadWorkDir = ".respread"

const respreadJournal = "journal.json"

// ErrRespreadPending reports a data directory whose re-spread was
// interrupted after its new layout was complete: running Respread again
// (synclane respread) finishes it.
var ErrRespreadPending = errors.New("sqlite: the data directory's re-spread was interrupted (its new layout is complete): run `synclane respread` again, with the server stopped, to finish it")

// RespreadPending returns ErrRespreadPending (wrapped, naming dir) when
// dir holds the journal of an interrupted re-spread, nil otherwise.
func RespreadPending(dir string) error {
	_, err := os.Stat(filepath.Join(dir, RespreadWorkDir, respreadJournal))
	switch {
	case err == nil:
		return fmt.Errorf("%w (%s)", ErrRespreadPending, dir)
	case errors.Is(err, fs.ErrNotExist):
		return nil
	default:
		return fmt.Errorf("sqlite: %w", err)
	}
}

// RespreadOptions configures Respread.
type RespreadOptions struct {
	// Logger receives progress lines (default: none).
	Logger *zap.Logger
	// Now stamps the directory the old files are moved into (default
	// time.Now).
	Now func() time.Time
}

// TableRows is the row count of one table.
type TableRows struct {
	Table string
	Rows  int64
}

// RespreadReport says what Respread did.
type RespreadReport struct {
	// FilesBefore and FilesAfter are K of the old and the new layout.
	FilesBefore, FilesAfter int
	// Partitions counts the directory's partitions, Moved those now in
	// another file.
	Partitions, Moved int
	// Tables are the row counts of every copied table (sync_meta left
	// out), the same in the old and the new layout, by table name.
	Tables []TableRows
	// OldDir holds the old layout's files, kept for the operator to
	// delete ("" when nothing was changed).
	OldDir string
	// Resumed says an interrupted re-spread was finished first.
	Resumed bool
}

// respreadJournalRecord is the journal of a swap.
type respreadJournalRecord struct {
	FilesBefore int    `json:"filesBefore"`
	FilesAfter  int    `json:"filesAfter"`
	OldDir      string `json:"oldDir"`
	Layout      string `json:"layout,omitempty"`
}

// Respread re-spreads the partitions of the data directory dir over files
// database files, offline: the caller holds the data directory (no
// server or other process may have its files open). Every row of a table
// with a partition_id column (the sync_* tables and the row tables) goes
// to FileOf(partition, files); the tables without one (sync_blobs) go to
// the home file; sync_meta's keys other than the layout record and the
// maintenance lease (schema_version, schema_fingerprint) are copied to
// every file. Rows of tables whose id is INTEGER PRIMARY KEY AUTOINCREMENT
// (sync_reactions, with the dead letters) get new ids in their new file:
// those ids are meaningful per file only. Row counts per table are
// compared between the layouts before the swap. See the comment at the
// top of respread.go for the swap and what a crash leaves.
func Respread(ctx context.Context, dir string, files int, opts RespreadOptions) (RespreadReport, error) {
	var rep RespreadReport
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if files < 1 || files > MaxDirFiles {
		return rep, fmt.Errorf("sqlite: respread to %d database files: must be 1 to %d", files, MaxDirFiles)
	}
	work := filepath.Join(dir, RespreadWorkDir)
	if j, ok, err := readRespreadJournal(work); err != nil {
		return rep, err
	} else if ok {
		opts.Logger.Info("finishing an interrupted respread", zap.String("dir", dir), zap.Int("files_before", j.FilesBefore), zap.Int("files_after", j.FilesAfter))
		if err := finishRespread(dir, j); err != nil {
			return rep, fmt.Errorf("%w: %w", ErrRespreadPending, err)
		}
		rep.Resumed, rep.OldDir = true, filepath.Join(dir, j.OldDir)
	}
	if _, err := os.Stat(filepath.Join(dir, DirFileName)); err != nil {
		return rep, fmt.Errorf("sqlite: respread: no database in %s: %w", dir, err)
	}
	// A work directory without a journal is an unfinished copy.
	if err := os.RemoveAll(work); err != nil {
		return rep, fmt.Errorf("sqlite: respread: remove the unfinished copy: %w", err)
	}

	// The old layout, as OpenDir sees it (Files 1: a directory without a
	// record is not stamped).
	old, err := OpenDir(ctx, dir, DirOptions{Options: Options{Logger: opts.Logger}, Files: 1})
	if err != nil {
		return rep, err
	}
	oldPaths := old.Paths()
	if err := old.Close(); err != nil {
		return rep, err
	}
	rep.FilesBefore, rep.FilesAfter = len(oldPaths), files
	if len(oldPaths) == files {
		return rep, nil
	}

	tables, others, err := readSchemaObjects(ctx, oldPaths[0])
	if err != nil {
		return rep, err
	}
	for _, p := range oldPaths[1:] { // every table of a file is one of the home file's
		ts, _, err := readSchemaObjects(ctx, p)
		if err != nil {
			return rep, err
		}
		for _, t := range ts {
			if !slices.ContainsFunc(tables, func(h schemaTable) bool { return h.name == t.name }) {
				return rep, fmt.Errorf("%w: table %s of %s is not in the home file", ErrLayout, t.name, p)
			}
		}
	}
	// The partitions of every old file, each checked to be where FileOf
	// puts it.
	parts := make([][]string, len(oldPaths))
	for i, p := range oldPaths {
		if parts[i], err = filePartitions(ctx, p, tables); err != nil {
			return rep, err
		}
		for _, part := range parts[i] {
			if f := FileOf(part, len(oldPaths)); f != i {
				return rep, fmt.Errorf("%w: partition %q is in %s, but belongs in file %d", ErrLayout, part, p, f)
			}
			rep.Partitions++
			if FileOf(part, files) != i {
				rep.Moved++
			}
		}
	}

	if err := os.Mkdir(work, 0o750); err != nil {
		return rep, fmt.Errorf("sqlite: respread: %w", err)
	}
	layout := ""
	if files > 1 {
		layout = storage.NewLogEpoch()
	}
	newPaths := make([]string, files)
	for j := range files {
		newPaths[j] = filepath.Join(work, dirFileName(j))
		into := make([][]string, len(oldPaths))
		for i := range oldPaths {
			for _, part := range parts[i] {
				if FileOf(part, files) == j {
					into[i] = append(into[i], part)
				}
			}
		}
		opts.Logger.Info("respread: writing", zap.String("file", newPaths[j]))
		if err := buildFile(ctx, newPaths[j], oldPaths, into, tables, others, layoutRecord{files: files, index: j, id: layout}); err != nil {
			return rep, err
		}
	}

	// Verify: every table's count the same, every partition where FileOf
	// puts it, and the new layout opens.
	oldCounts, err := countRows(ctx, oldPaths, tables)
	if err != nil {
		return rep, err
	}
	newCounts, err := countRows(ctx, newPaths, tables)
	if err != nil {
		return rep, err
	}
	for _, t := range tables {
		if t.name == "sync_meta" {
			continue
		}
		if oldCounts[t.name] != newCounts[t.name] {
			return rep, fmt.Errorf("sqlite: respread: table %s has %d rows in the new layout, %d in the old one; nothing was changed", t.name, newCounts[t.name], oldCounts[t.name])
		}
		rep.Tables = append(rep.Tables, TableRows{Table: t.name, Rows: oldCounts[t.name]})
	}
	slices.SortFunc(rep.Tables, func(a, b TableRows) int { return strings.Compare(a.Table, b.Table) })
	for j, p := range newPaths {
		ps, err := filePartitions(ctx, p, tables)
		if err != nil {
			return rep, err
		}
		for _, part := range ps {
			if FileOf(part, files) != j {
				return rep, fmt.Errorf("sqlite: respread: partition %q was written to file %d, belongs in %d; nothing was changed", part, j, FileOf(part, files))
			}
		}
	}
	check, err := OpenDir(ctx, work, DirOptions{Options: Options{Logger: opts.Logger}, Files: files, FilesExplicit: true})
	if err != nil {
		return rep, fmt.Errorf("sqlite: respread: the new layout does not open: %w", err)
	}
	if err := check.Close(); err != nil {
		return rep, err
	}
	for _, p := range newPaths {
		if err := syncPath(p); err != nil {
			return rep, err
		}
	}
	if err := syncPath(work); err != nil {
		return rep, err
	}

	// The commit point, then the swap.
	j := respreadJournalRecord{FilesBefore: len(oldPaths), FilesAfter: files, Layout: layout,
		OldDir: "respread-old-" + opts.Now().UTC().Format("20060102T150405.000Z")}
	if err := writeRespreadJournal(work, j); err != nil {
		return rep, err
	}
	if err := finishRespread(dir, j); err != nil {
		return rep, fmt.Errorf("%w: %w", ErrRespreadPending, err)
	}
	rep.OldDir = filepath.Join(dir, j.OldDir)
	opts.Logger.Info("respread done", zap.String("dir", dir), zap.Int("files_before", rep.FilesBefore), zap.Int("files_after", files), zap.String("old_files", rep.OldDir))
	return rep, nil
}

// schemaTable is one table of a database file.
type schemaTable struct {
	name, sql string
	// cols are the columns copied (an AUTOINCREMENT id left out).
	cols          []string
	partitioned   bool
	autoincrement string // the id column renumbered, or ""
}

// schemaObject is an index, trigger or view, created after the rows.
type schemaObject struct{ kind, name, sql string }

// readSchemaObjects reads the tables and the other schema objects of the
// database file at path (SQLite's own objects left out).
func readSchemaObjects(ctx context.Context, path string) ([]schemaTable, []schemaObject, error) {
	db, err := openRaw(path, "")
	if err != nil {
		return nil, nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite\_%' ESCAPE '\' ORDER BY rowid`)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlite: respread: read the schema of %s: %w", path, err)
	}
	var tables []schemaTable
	var others []schemaObject
	for rows.Next() {
		var kind, name, q string
		if err := rows.Scan(&kind, &name, &q); err != nil {
			rows.Close()
			return nil, nil, err
		}
		if kind == "table" {
			tables = append(tables, schemaTable{name: name, sql: q})
		} else {
			others = append(others, schemaObject{kind: kind, name: name, sql: q})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	for i := range tables {
		t := &tables[i]
		auto := strings.Contains(strings.ToUpper(t.sql), "AUTOINCREMENT")
		cr, err := db.QueryContext(ctx, `SELECT name, type, pk FROM pragma_table_info(?) ORDER BY cid`, t.name)
		if err != nil {
			return nil, nil, fmt.Errorf("sqlite: respread: read the columns of %s: %w", t.name, err)
		}
		for cr.Next() {
			var col, typ string
			var pk int
			if err := cr.Scan(&col, &typ, &pk); err != nil {
				cr.Close()
				return nil, nil, err
			}
			if col == "partition_id" {
				t.partitioned = true
			}
			if auto && pk == 1 && strings.EqualFold(typ, "INTEGER") {
				t.autoincrement = col
				continue
			}
			t.cols = append(t.cols, quote(col))
		}
		cr.Close()
		if err := cr.Err(); err != nil {
			return nil, nil, err
		}
	}
	return tables, others, nil
}

// filePartitions returns the partition ids of every partitioned table of
// the file at path, sorted.
func filePartitions(ctx context.Context, path string, tables []schemaTable) ([]string, error) {
	db, err := openRaw(path, "")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var union []string
	for _, t := range tables {
		if t.partitioned {
			union = append(union, "SELECT DISTINCT partition_id FROM "+quote(t.name))
		}
	}
	if len(union) == 0 {
		return nil, nil
	}
	out, err := scanColumn[string](db.QueryContext(ctx, `SELECT partition_id FROM (`+strings.Join(union, " UNION ")+`) ORDER BY partition_id`))
	if err != nil {
		return nil, fmt.Errorf("sqlite: respread: read the partitions of %s: %w", path, err)
	}
	return out, nil
}

// countRows sums every table's rows over the files at paths.
func countRows(ctx context.Context, paths []string, tables []schemaTable) (map[string]int64, error) {
	out := map[string]int64{}
	for _, p := range paths {
		db, err := openRaw(p, "")
		if err != nil {
			return nil, err
		}
		for _, t := range tables {
			var n int64
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+quote(t.name)).Scan(&n); err != nil {
				db.Close()
				return nil, fmt.Errorf("sqlite: respread: count %s of %s: %w", t.name, p, err)
			}
			out[t.name] += n
		}
		if err := db.Close(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// buildFile writes the new file path (index rec.index of the new layout):
// the old home file's tables, the rows of partitions into[i] from old
// file i, the unpartitioned tables' rows when it is the home file,
// sync_meta's schema keys, then the indexes and triggers (after the rows:
// the writer-fence trigger must not judge copied history) and the layout
// record.
func buildFile(ctx context.Context, path string, oldPaths []string, into [][]string, tables []schemaTable, others []schemaObject, rec layoutRecord) error {
	// Written without syncs (nothing depends on it until it is fsynced
	// and the journal names it), then switched to WAL as every file is.
	db, err := openRaw(path, "&_pragma=synchronous(OFF)&_pragma=journal_mode(MEMORY)")
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlite: respread: %w", err)
	}
	defer conn.Close()
	fail := func(what string, err error) error {
		return fmt.Errorf("sqlite: respread: %s of %s: %w", what, path, err)
	}
	exec := func(q string, args ...any) error {
		_, err := conn.ExecContext(ctx, q, args...)
		return err
	}
	for _, t := range tables {
		if err := exec(t.sql); err != nil {
			return fail("create table "+t.name, err)
		}
	}
	if err := exec(`CREATE TEMP TABLE respread_moving (p TEXT PRIMARY KEY) WITHOUT ROWID`); err != nil {
		return fail("create the partition list", err)
	}
	home := rec.index == 0
	for i, src := range oldPaths {
		if len(into[i]) == 0 && i != 0 && !home {
			continue
		}
		if err := exec(`ATTACH DATABASE ? AS src`, src); err != nil {
			return fail("attach "+src, err)
		}
		err := func() error {
			if err := exec(`BEGIN`); err != nil {
				return err
			}
			if err := exec(`DELETE FROM temp.respread_moving`); err != nil {
				return err
			}
			for _, p := range into[i] {
				if err := exec(`INSERT INTO temp.respread_moving(p) VALUES (?)`, p); err != nil {
					return err
				}
			}
			for _, t := range tables {
				cols := strings.Join(t.cols, ", ")
				ins := `INSERT INTO main.` + quote(t.name) + ` (` + cols + `) SELECT ` + cols + ` FROM src.` + quote(t.name)
				switch {
				case t.partitioned:
					ins += ` WHERE partition_id IN (SELECT p FROM temp.respread_moving)`
				case t.name == "sync_meta":
					if i != 0 {
						continue
					}
					ins += ` WHERE key NOT IN ('` + metaFiles + `', '` + metaFileIndex + `', '` + metaLayoutID + `', 'maintenance_lease')`
				case !home:
					continue
				}
				if t.autoincrement != "" {
					ins += ` ORDER BY ` + quote(t.autoincrement)
				}
				if err := exec(ins); err != nil {
					return fmt.Errorf("copy %s: %w", t.name, err)
				}
			}
			return exec(`COMMIT`)
		}()
		if err != nil {
			_ = exec(`ROLLBACK`)
			_ = exec(`DETACH DATABASE src`)
			return fail("copy from "+src, err)
		}
		if err := exec(`DETACH DATABASE src`); err != nil {
			return fail("detach "+src, err)
		}
	}
	for _, o := range others {
		if err := exec(o.sql); err != nil {
			return fail("create "+o.kind+" "+o.name, err)
		}
	}
	if rec.files > 1 {
		for k, v := range map[string]string{metaFiles: strconv.Itoa(rec.files), metaFileIndex: strconv.Itoa(rec.index), metaLayoutID: rec.id} {
			if err := exec(`INSERT INTO sync_meta(key, value) VALUES(?, ?)`, k, v); err != nil {
				return fail("write the layout record", err)
			}
		}
	}
	if err := exec(`PRAGMA journal_mode=WAL`); err != nil {
		return fail("switch to WAL", err)
	}
	var check string
	if err := conn.QueryRowContext(ctx, `PRAGMA quick_check`).Scan(&check); err != nil || check != "ok" {
		return fail("quick_check", errors.Join(err, fmt.Errorf("%s", check)))
	}
	if err := conn.Close(); err != nil {
		return fail("close", err)
	}
	return db.Close()
}

// rawDSN is the DSN of a plain connection to the file at path.
func rawDSN(path, extra string) string {
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?_busy_timeout=10000" + extra
}

// openRaw opens one plain connection to the file at path.
func openRaw(path, extra string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", rawDSN(path, extra))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

func readRespreadJournal(work string) (respreadJournalRecord, bool, error) {
	var j respreadJournalRecord
	b, err := os.ReadFile(filepath.Join(work, respreadJournal))
	if errors.Is(err, fs.ErrNotExist) {
		return j, false, nil
	}
	if err != nil {
		return j, false, fmt.Errorf("sqlite: respread: read the journal: %w", err)
	}
	if err := json.Unmarshal(b, &j); err != nil || j.FilesBefore < 1 || j.FilesAfter < 1 || j.FilesBefore > MaxDirFiles || j.FilesAfter > MaxDirFiles ||
		!strings.HasPrefix(j.OldDir, "respread-old-") || strings.ContainsAny(j.OldDir, `/\`) {
		return j, false, fmt.Errorf("sqlite: respread: the journal %s is damaged (%v): compare %s with the data directory by hand", filepath.Join(work, respreadJournal), err, work)
	}
	return j, true, nil
}

func writeRespreadJournal(work string, j respreadJournalRecord) error {
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(work, respreadJournal+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("sqlite: respread: write the journal: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(work, respreadJournal))
	}
	if err == nil {
		err = syncPath(work)
	}
	if err != nil {
		return fmt.Errorf("sqlite: respread: write the journal: %w", err)
	}
	return nil
}

// respreadRename renames during the swap (a test makes it fail to stop
// the swap at each step).
var respreadRename = os.Rename

// finishRespread swaps the new layout of the journal j into dir: the old
// layout's files (with their -wal and -shm) into j.OldDir, the new files
// from the work directory into dir, the home file last; then it removes
// the journal and the work directory. Run again after a crash it goes on
// where it stopped: a new file still in the work directory has not been
// swapped in, so the file of its name in dir is an old one.
func finishRespread(dir string, j respreadJournalRecord) error {
	work := filepath.Join(dir, RespreadWorkDir)
	old := filepath.Join(dir, j.OldDir)
	if err := os.MkdirAll(old, 0o750); err != nil {
		return fmt.Errorf("sqlite: respread: %w", err)
	}
	moveAside := func(name string) error {
		for _, suffix := range []string{"", "-wal", "-shm"} {
			from, to := filepath.Join(dir, name+suffix), filepath.Join(old, name+suffix)
			if _, err := os.Lstat(from); errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if _, err := os.Lstat(to); err == nil {
				return fmt.Errorf("sqlite: respread: both %s and %s exist: compare them by hand", from, to)
			}
			if err := respreadRename(from, to); err != nil {
				return fmt.Errorf("sqlite: respread: move the old file aside: %w", err)
			}
		}
		return nil
	}
	newNames := DirFileNames(j.FilesAfter)
	for _, name := range DirFileNames(j.FilesBefore) {
		if !slices.Contains(newNames, name) {
			if err := moveAside(name); err != nil {
				return err
			}
		}
	}
	for i := len(newNames) - 1; i >= 0; i-- { // the home file last
		name := newNames[i]
		if _, err := os.Lstat(filepath.Join(work, name)); errors.Is(err, fs.ErrNotExist) {
			continue // swapped in already
		}
		if err := moveAside(name); err != nil {
			return err
		}
		if err := respreadRename(filepath.Join(work, name), filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("sqlite: respread: move the new file in: %w", err)
		}
	}
	if err := errors.Join(syncPath(old), syncPath(dir)); err != nil {
		return fmt.Errorf("sqlite: respread: %w", err)
	}
	if err := os.Remove(filepath.Join(work, respreadJournal)); err != nil {
		return fmt.Errorf("sqlite: respread: remove the journal: %w", err)
	}
	if err := os.RemoveAll(work); err != nil {
		return fmt.Errorf("sqlite: respread: remove %s: %w", work, err)
	}
	return syncPath(dir)
}

// syncPath fsyncs a file or directory.
func syncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
