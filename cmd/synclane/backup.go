package main

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/synclane/synclane/engine/lease"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/storage/sqlite"
)

// A backup is a directory (created 0700, every file 0600):
//
//	synclane.db        an online, consistent snapshot (VACUUM INTO) of
//	synclane-<i>.db    each database file of the data directory (the
//	                   other files first, the home file synclane.db last)
//	blobs/<xx>/<hex>   every blob of the filesystem blob store
//	lease.key          the lease signing key, when the data directory has one
//	manifest.json      format version, creation time, versions, the number
//	                   of database files, and per file its path, size and
//	                   sha256 (written last)
//
// Format version 2 added databaseFiles (K) and synclane-<i>.db; a version
// 1 backup (synclane.db only) is still read, as K = 1.
//
// Segments are a cache and are not in it; the signed-URL key is never
// persisted (random per process, or --signed-url-key), so there is none
// to back up.
const (
	backupManifestName   = "manifest.json"
	backupFormat         = "synclane-backup"
	backupFormatVersion  = 2
	backupDBName         = sqlite.DirFileName
	backupBlobsDir       = "blobs"
	backupDirPermissions = 0o700
)

// backupManifest is manifest.json of a backup directory.
type backupManifest struct {
	Format          string    `json:"format"`
	FormatVersion   int       `json:"formatVersion"`
	CreatedAt       time.Time `json:"createdAt"`
	SynclaneVersion string    `json:"synclaneVersion,omitempty"`
	SchemaVersion   string    `json:"schemaVersion,omitempty"`
	// DatabaseFiles is K, the number of database files (version 2; a
	// version 1 backup has one).
	DatabaseFiles int          `json:"databaseFiles,omitempty"`
	Files         []backupFile `json:"files"`
}

// backupFile is one file of a backup, its path relative to the backup
// directory with forward slashes.
type backupFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// backupCmd writes a complete backup directory of a SQLite deployment; it
// is safe next to a running server (it reads a snapshot of the database
// and copies blob files, and opens no blob store).
func backupCmd(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	var to string
	c, rest, code := adminFlags("backup", "synclane backup --to DIR [--data DIR] [--blob-store /ABS/DIR]", args, lookup, stderr, func(fs *flag.FlagSet, c *serveConfig) {
		fs.StringVar(&to, "to", "", "the backup directory to write (must not exist): every database file (synclane.db, synclane-<i>.db), blobs/, lease.key and manifest.json")
		blobFlags(fs, &c.blobs)
	})
	if code >= 0 {
		return code
	}
	if err := c.blobs.validate(); err != nil {
		fmt.Fprintf(stderr, "synclane backup: %v\n", err)
		return 2
	}
	switch {
	case len(rest) > 0:
		fmt.Fprintf(stderr, "synclane backup: unexpected argument %q\n", rest[0])
		return 2
	case to == "":
		fmt.Fprintln(stderr, "synclane backup: --to DIR is required")
		return 2
	case c.postgresURL != "":
		fmt.Fprintln(stderr, "synclane backup: backs up the embedded SQLite database; back PostgreSQL up with pg_dump or PITR, then restore it with synclane restore --rotate-epochs (see docs/retention.md)")
		return 2
	case strings.HasSuffix(to, ".db"):
		fmt.Fprintf(stderr, "synclane backup: --to %s looks like a database file: a backup is now a directory (the database files, blobs/, lease.key, manifest.json); give a directory that does not exist\n", to)
		return 2
	}
	fail := func(err error) int { fmt.Fprintln(stderr, "synclane backup:", err); return 1 }
	blobDir, blobNote := localBlobDir(*c)
	start := time.Now()
	m, err := writeBackup(ctx, c.data, blobDir, to)
	if err != nil {
		return fail(err)
	}
	var total int64
	blobs := 0
	for _, f := range m.Files {
		total += f.Size
		if strings.HasPrefix(f.Path, backupBlobsDir+"/") {
			blobs++
		} else {
			fmt.Fprintf(stdout, "  %s (%d bytes)\n", f.Path, f.Size)
		}
	}
	fmt.Fprintf(stdout, "  %s/ (%d blobs)\n", backupBlobsDir, blobs)
	if blobNote != "" {
		fmt.Fprintln(stdout, "  note:", blobNote)
	}
	fmt.Fprintf(stdout, "backed up %s to %s: %d files, %d bytes, %s (segments are a cache: not backed up, rebuilt on demand)\n",
		c.data, to, len(m.Files)+1, total, time.Since(start).Round(time.Millisecond))
	return 0
}

// localBlobDir returns the directory of the filesystem blob store the
// blob flags name ("" when blobs live elsewhere or are off) and a note
// for the operator about blobs a backup cannot hold.
func localBlobDir(c serveConfig) (dir, note string) {
	switch loc := c.blobs.location(); loc.kind {
	case blobOff:
		return "", ""
	case blobPostgres, blobS3:
		return "", fmt.Sprintf("blobs live in %s, not in the data directory: back them up with that store's own tools", c.blobs.store)
	case blobDefault:
		return filepath.Join(c.data, backupBlobsDir), ""
	default:
		return loc.dir, ""
	}
}

// writeBackup writes the backup directory to (which must not exist) from
// the data directory: the database snapshot first, then the blob files
// (so every blob the snapshot says present is copied: blob files are
// written before their metadata and never change), the lease key, and
// the manifest last. On failure it removes what it wrote.
func writeBackup(ctx context.Context, data, blobDir, to string) (m backupManifest, err error) {
	db := filepath.Join(data, backupDBName)
	if _, err := os.Stat(db); err != nil {
		return m, fmt.Errorf("no database: %w", err)
	}
	if err := os.Mkdir(to, backupDirPermissions); err != nil {
		return m, fmt.Errorf("create the backup directory: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(to)
		}
	}()
	if err := os.Chmod(to, backupDirPermissions); err != nil { // whatever the umask
		return m, err
	}
	// Files 1, not explicit: the directory's own K, and a directory
	// without a layout record is not stamped.
	d, err := sqlite.OpenDir(ctx, data, sqlite.DirOptions{Files: 1})
	if err != nil {
		return m, err
	}
	k := d.Files()
	dbs := make([]backupFile, k)
	// The other files first, the home file last (as sqlite.Dir.Backup):
	// every blob a copied row references has its metadata in the copy.
	for i := k - 1; i >= 0; i-- {
		name := sqlite.DirFileNames(k)[i]
		snap := filepath.Join(to, name)
		if err = d.File(i).Backup(ctx, snap); err == nil {
			err = os.Chmod(snap, 0o600)
		}
		if err == nil {
			dbs[i], err = hashFile(snap)
		}
		if err != nil {
			break
		}
		dbs[i].Path = name
	}
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return m, err
	}
	// The files are copied one after another: an offline respread or
	// restore swapping the directory's files meanwhile (they take the
	// data directory's lock; a backup does not, it runs beside serve)
	// would leave copies of two layouts, which restore refuses. Refused
	// here instead, while the operator can take the backup again.
	paths := make([]string, k)
	for i, f := range dbs {
		paths[i] = filepath.Join(to, f.Path)
	}
	if err = sqlite.CheckLayoutFiles(ctx, paths); err != nil {
		return m, fmt.Errorf("the copied database files are not of one layout (did a respread or restore run meanwhile? take the backup again): %w", err)
	}
	m = backupManifest{Format: backupFormat, FormatVersion: backupFormatVersion, CreatedAt: time.Now().UTC(),
		SynclaneVersion: version, SchemaVersion: snapshotSchemaVersion(ctx, filepath.Join(to, backupDBName)), DatabaseFiles: k, Files: dbs}

	if blobDir != "" {
		blobs, err := copyBlobs(ctx, blobDir, filepath.Join(to, backupBlobsDir))
		if err != nil {
			return m, err
		}
		m.Files = append(m.Files, blobs...)
	}
	if kf, err := copyFileHashed(filepath.Join(data, lease.KeyFileName), filepath.Join(to, lease.KeyFileName)); err == nil {
		kf.Path = lease.KeyFileName
		m.Files = append(m.Files, kf)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return m, fmt.Errorf("copy the lease key: %w", err)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return m, err
	}
	if err := writeFileSync(filepath.Join(to, backupManifestName), append(b, '\n')); err != nil {
		return m, err
	}
	return m, syncDir(to)
}

// snapshotSchemaVersion reads the stored schema version of the snapshot
// ("" when it has none).
func snapshotSchemaVersion(ctx context.Context, path string) string {
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?mode=ro")
	if err != nil {
		return ""
	}
	defer db.Close()
	var v string
	if err := db.QueryRowContext(ctx, `SELECT value FROM sync_meta WHERE key = 'schema_version'`).Scan(&v); err != nil {
		return ""
	}
	return v
}

// copyBlobs copies every blob file of the filesystem store at from (the
// <xx>/<hex> layout; .tmp and anything else is skipped) into to. A blob
// deleted while the walk runs (an orphan swept) is skipped.
func copyBlobs(ctx context.Context, from, to string) ([]backupFile, error) {
	if _, err := os.Stat(from); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var files []backupFile
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel != "." && (d.Name() == ".tmp" || !isBlobShard(rel)) {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !isBlobPath(filepath.ToSlash(rel)) {
			return nil
		}
		dst := filepath.Join(to, rel)
		if err := os.MkdirAll(filepath.Dir(dst), backupDirPermissions); err != nil {
			return err
		}
		f, err := copyFileHashed(p, dst)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("copy blob %s: %w", rel, err)
		}
		f.Path = backupBlobsDir + "/" + filepath.ToSlash(rel)
		files = append(files, f)
		return nil
	})
	return files, err
}

// isBlobShard reports whether rel is a shard directory (two hex digits).
func isBlobShard(rel string) bool {
	return len(rel) == 2 && strings.Trim(rel, "0123456789abcdef") == ""
}

// isBlobPath reports whether rel ("xx/<hex>") is where the filesystem
// store keeps a blob.
func isBlobPath(rel string) bool {
	shard, name, ok := strings.Cut(rel, "/")
	if !ok || !isBlobShard(shard) {
		return false
	}
	h, err := blobstore.ParseID(blobstore.IDPrefix + name)
	return err == nil && h == name && h[:2] == shard
}

// verifyBackup reads the manifest of the backup directory dir and checks
// that every file it lists is present with its size and sha256, and that
// every path is one a backup holds (so a manifest cannot direct restore
// outside the data directory). It touches nothing.
func verifyBackup(dir string) (backupManifest, error) {
	var m backupManifest
	b, err := os.ReadFile(filepath.Join(dir, backupManifestName))
	if err != nil {
		return m, fmt.Errorf("%s is not a backup directory: %w", dir, err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: %w", backupManifestName, err)
	}
	if m.Format != backupFormat || m.FormatVersion < 1 || m.FormatVersion > backupFormatVersion {
		return m, fmt.Errorf("%s: format %q version %d, want %q version 1 to %d", backupManifestName, m.Format, m.FormatVersion, backupFormat, backupFormatVersion)
	}
	switch {
	case m.FormatVersion == 1 && m.DatabaseFiles == 0:
		m.DatabaseFiles = 1 // version 1: synclane.db only
	case m.FormatVersion == 1 || m.DatabaseFiles < 1 || m.DatabaseFiles > sqlite.MaxDirFiles:
		return m, fmt.Errorf("%s: databaseFiles %d: want 1 to %d", backupManifestName, m.DatabaseFiles, sqlite.MaxDirFiles)
	}
	dbNames := sqlite.DirFileNames(m.DatabaseFiles)
	seen := map[string]bool{}
	for _, f := range m.Files {
		switch {
		case seen[f.Path]:
			return m, fmt.Errorf("%s lists %s twice", backupManifestName, f.Path)
		case slices.Contains(dbNames, f.Path):
		case f.Path == lease.KeyFileName:
		case strings.HasPrefix(f.Path, backupBlobsDir+"/") && isBlobPath(strings.TrimPrefix(f.Path, backupBlobsDir+"/")):
		default:
			return m, fmt.Errorf("%s lists %q, which is no file of a backup", backupManifestName, f.Path)
		}
		seen[f.Path] = true
		got, err := hashFile(filepath.Join(dir, filepath.FromSlash(f.Path)))
		if err != nil {
			return m, fmt.Errorf("backup file %s: %w", f.Path, err)
		}
		if got.Size != f.Size {
			return m, fmt.Errorf("backup file %s is corrupted: %d bytes, the manifest says %d", f.Path, got.Size, f.Size)
		}
		if got.SHA256 != f.SHA256 {
			return m, fmt.Errorf("backup file %s is corrupted: sha256 %s, the manifest says %s", f.Path, got.SHA256, f.SHA256)
		}
	}
	for _, name := range dbNames {
		if !seen[name] {
			return m, fmt.Errorf("%s lists no %s (the backup has %d database files)", backupManifestName, name, m.DatabaseFiles)
		}
	}
	return m, nil
}

// installBackupDir installs a verified backup directory into the data
// directory: the database files (installBackup: checked, the old layout's
// files moved aside), the blobs into blobDir (when not ""), the lease key (the old
// one moved aside when it differs), and moves segments.db aside so no
// segment of the old data is served. It returns lines for the operator.
//
// Files moved aside are named <name>.before-restore-<stamp>: the caller's
// stamp, so it can remove them once the whole restore has succeeded.
func installBackupDir(ctx context.Context, m backupManifest, from, data, blobDir, stamp string) ([]string, error) {
	for _, f := range m.Files {
		if strings.HasPrefix(f.Path, backupBlobsDir+"/") && blobDir == "" {
			return nil, fmt.Errorf("the backup holds blobs but the blob flags name no local directory to restore them into (--blob-store DIR); nothing in %s was changed", data)
		}
	}
	var srcs []string
	for _, name := range sqlite.DirFileNames(m.DatabaseFiles) {
		srcs = append(srcs, filepath.Join(from, name))
	}
	out, err := installBackup(ctx, srcs, data, stamp)
	if err != nil {
		return nil, err
	}
	blobs := 0
	for _, f := range m.Files {
		rel, ok := strings.CutPrefix(f.Path, backupBlobsDir+"/")
		if !ok {
			continue
		}
		dst := filepath.Join(blobDir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(dst), 0o750); err != nil {
			return out, err
		}
		if err := installFile(filepath.Join(from, filepath.FromSlash(f.Path)), dst, 0o640); err != nil {
			return out, fmt.Errorf("restore blob %s: %w", rel, err)
		}
		blobs++
	}
	if blobDir != "" {
		out = append(out, fmt.Sprintf("restored %d blobs into %s", blobs, blobDir))
	}
	keyPath := filepath.Join(data, lease.KeyFileName)
	for _, f := range m.Files {
		if f.Path != lease.KeyFileName {
			continue
		}
		if err := moveAsideIfDifferent(keyPath, f.SHA256, stamp); err != nil {
			return out, err
		}
		if err := installFile(filepath.Join(from, lease.KeyFileName), keyPath, 0o600); err != nil {
			return out, fmt.Errorf("restore the lease key: %w", err)
		}
		out = append(out, "restored "+keyPath+" (leases issued before the backup stay valid)")
	}
	note, err := moveSegmentsAside(data, stamp)
	if err != nil {
		return out, err
	}
	return append(out, note), nil
}

// moveSegmentsAside renames segments.db (with its -wal and -shm) in data
// to *.before-restore-<stamp>, so no segment built from the replaced
// database is served, and returns a line for the operator.
func moveSegmentsAside(data, stamp string) (string, error) {
	seg := filepath.Join(data, "segments.db")
	moved := false
	for _, suffix := range []string{"", "-wal", "-shm"} {
		err := os.Rename(seg+suffix, seg+".before-restore-"+stamp+suffix)
		if err == nil {
			moved = true
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("move the segment cache aside: %w", err)
		}
	}
	note := "segments are a cache, not in the backup: rebuilt on demand"
	if moved {
		note += fmt.Sprintf(" (the old segments.db was moved aside as segments.db.before-restore-%s)", stamp)
	}
	return note, nil
}

// moveAsideIfDifferent renames path to path.before-restore-<stamp> when
// it exists and its sha256 is not want.
func moveAsideIfDifferent(path, want, stamp string) error {
	got, err := hashFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if got.SHA256 == want {
		return nil
	}
	return os.Rename(path, path+".before-restore-"+stamp)
}

// installFile copies from to a temporary file next to to, fsyncs it and
// renames it into place with mode perm.
func installFile(from, to string, perm os.FileMode) error {
	tmp := to + ".restoring"
	if err := copyFile(from, tmp); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Chmod(tmp, perm); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, to)
}

// hashFile returns the size and sha256 of the file at p.
func hashFile(p string) (backupFile, error) {
	f, err := os.Open(p)
	if err != nil {
		return backupFile{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return backupFile{}, err
	}
	return backupFile{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// copyFileHashed copies from to a new file to (mode 0600, fsynced) and
// returns its size and sha256.
func copyFileHashed(from, to string) (backupFile, error) {
	src, err := os.Open(from)
	if err != nil {
		return backupFile{}, err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return backupFile{}, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(dst, h), src)
	if err == nil {
		err = dst.Sync()
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return backupFile{}, err
	}
	return backupFile{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// writeFileSync writes a new file (mode 0600) and fsyncs it.
func writeFileSync(p string, b []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncDir fsyncs a directory so the names in it are durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// restoreFileCount refuses a backup of k database files when
// --sqlite-files (or SYNCLANE_SQLITE_FILES) asks for another number:
// restore installs the backup's own layout, which the store opened
// afterwards to rotate the epochs would refuse, leaving the directory
// replaced and its epochs not rotated.
func restoreFileCount(c serveConfig, k int) error {
	if !c.sqliteFiles.set || c.sqliteFiles.n == k {
		return nil
	}
	return fmt.Errorf("refusing the backup, nothing in %s was changed: it has %d database file(s) and restore installs them as they are, but --sqlite-files (or SYNCLANE_SQLITE_FILES) asks for %d: restore without it, then run `synclane respread --files %d` with the server stopped to change the number",
		c.data, k, c.sqliteFiles.n, c.sqliteFiles.n)
}

// backupIsDir reports whether --from names a backup directory (true) or
// a single database file (an older backup: the database only).
func backupIsDir(from string) (bool, error) {
	fi, err := os.Stat(from)
	if err != nil {
		return false, err
	}
	return fi.IsDir(), nil
}

// restoreFrom installs the backup at from into the data directory of c:
// a backup directory is verified against its manifest before anything in
// the data directory is touched; a single database file (an older
// backup) installs the database only, and says so.
//
// It returns the stamp of the files it moved aside
// (<name>.before-restore-<stamp>, see removeAside).
func restoreFrom(ctx context.Context, c serveConfig, from string, stdout io.Writer) (stamp string, err error) {
	isDir, err := backupIsDir(from)
	if err != nil {
		return "", err
	}
	home := from
	if isDir {
		home = filepath.Join(from, backupDBName)
	}
	if err := checkBackupSchema(ctx, home, c.schemaFile); err != nil {
		return "", fmt.Errorf("refusing the backup, nothing in %s was changed: %w", c.data, err)
	}
	stamp = time.Now().UTC().Format("20060102T150405Z")
	if !isDir {
		if err := restoreFileCount(c, 1); err != nil {
			return "", err
		}
		lines, err := installBackup(ctx, []string{from}, c.data, stamp)
		for _, l := range lines {
			fmt.Fprintln(stdout, l)
		}
		if err != nil {
			return stamp, err
		}
		fmt.Fprintf(stdout, "installed %s as %s (a single database file, an older backup: no blobs and no lease key restored)\n", from, filepath.Join(c.data, backupDBName))
		note, err := moveSegmentsAside(c.data, stamp)
		if err == nil {
			fmt.Fprintln(stdout, note)
		}
		return stamp, err
	}
	m, err := verifyBackup(from)
	if err != nil {
		return "", fmt.Errorf("refusing the backup, nothing in %s was changed: %w", c.data, err)
	}
	fmt.Fprintf(stdout, "verified %s: %d files match %s (created %s)\n", from, len(m.Files), backupManifestName, m.CreatedAt.Format(time.RFC3339))
	if err := restoreFileCount(c, m.DatabaseFiles); err != nil {
		return "", err
	}
	blobDir, _ := localBlobDir(c)
	lines, err := installBackupDir(ctx, m, from, c.data, blobDir, stamp)
	for _, l := range lines {
		fmt.Fprintln(stdout, l)
	}
	return stamp, err
}

// checkBackupSchema refuses a backup whose home database file (read-only,
// as an immutable file) was written under a schema restore could not
// open it with: a stored schema version above the one of schemaFile (the
// built-in demo schema when ""), or the same version with another
// fingerprint. The error names the --schema flag: restore must be given
// the schema file the backed-up server ran with. A database without a
// stored version or fingerprint (before fingerprints) is not refused here.
func checkBackupSchema(ctx context.Context, home, schemaFile string) error {
	src, err := schemaSource(schemaFile)
	if err != nil {
		return err
	}
	sch, err := schema.Parse(src)
	if err != nil {
		return schemaFileError(schemaFile, err)
	}
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: home}).EscapedPath()+"?mode=ro&immutable=1")
	if err != nil {
		return err
	}
	defer db.Close()
	meta := map[string]string{}
	rows, err := db.QueryContext(ctx, `SELECT key, value FROM sync_meta WHERE key IN ('schema_version', 'schema_fingerprint')`)
	if err != nil {
		return fmt.Errorf("%s: read the stored schema version: %w", home, err)
	}
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return fmt.Errorf("%s: read the stored schema version: %w", home, err)
		}
		meta[k] = v
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%s: read the stored schema version: %w", home, err)
	}
	given := "the built-in demo schema (no --schema given)"
	if schemaFile != "" {
		given = "--schema " + schemaFile
	}
	stored, err := strconv.ParseInt(meta["schema_version"], 10, 32)
	if err != nil {
		return nil // no stored version: nothing to compare
	}
	fix := "pass --schema FILE (or SYNCLANE_SCHEMA), the schema file the server that made the backup ran with"
	switch {
	case stored > int64(sch.Version):
		return fmt.Errorf("the backup's database holds schema v%d, newer than %s (v%d): %s", stored, given, sch.Version, fix)
	case stored == int64(sch.Version) && meta["schema_fingerprint"] != "" && meta["schema_fingerprint"] != sch.Fingerprint():
		return fmt.Errorf("the backup's database holds another schema at v%d than %s: %s", stored, given, fix)
	}
	return nil
}

// removeAside removes the files a successful restore moved aside in data
// (<name>.before-restore-<stamp>, with their -wal and -shm: the replaced
// database files, segments.db and the lease key) and returns a line for
// the operator. A failed restore keeps them (its error names them).
func removeAside(data, stamp string) (string, error) {
	files, err := filepath.Glob(filepath.Join(data, "*.before-restore-"+stamp+"*"))
	if err != nil || len(files) == 0 {
		return "", err
	}
	for _, f := range files {
		if err := os.Remove(f); err != nil {
			return "", fmt.Errorf("remove the replaced %s: %w", f, err)
		}
	}
	return fmt.Sprintf("removed the %d replaced files (*.before-restore-%s): the restore succeeded", len(files), stamp), nil
}
