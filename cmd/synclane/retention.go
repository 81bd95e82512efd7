package main

import (
	"context"
	"database/sql"
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
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/retention"
	"github.com/synclane/synclane/engine/segments"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/sqlite"
)

// retentionConfig holds the retention flags of serve and prune.
type retentionConfig struct {
	interval, activeWindow, ageForce time.Duration
	minCommits                       int64
	batch                            int
}

func retentionFlags(fs *flag.FlagSet, r *retentionConfig, loop bool) {
	if loop {
		fs.DurationVar(&r.interval, "retention-interval", 10*time.Minute, "run a maintenance pass (pruning) this often; 0 disables the loop")
	}
	fs.DurationVar(&r.activeWindow, "retention-active-window", storage.DefaultActiveWindow, "never prune past the cursor of a client seen within this window (floor 336h)")
	fs.DurationVar(&r.ageForce, "retention-age-force", storage.DefaultAgeForce, "commits at least this old may be pruned past active clients (floor 720h)")
	fs.Int64Var(&r.minCommits, "retention-min-commits", storage.DefaultMinRetainedCommits, "always keep this many of each partition's newest commits (floor 1000)")
	fs.IntVar(&r.batch, "retention-batch", retention.DefaultBatchCommits, "commits deleted per pruning transaction (bounds how long a partition's pushes wait)")
}

func (r retentionConfig) policy() storage.RetentionPolicy {
	return storage.RetentionPolicy{ActiveWindowMs: r.activeWindow.Milliseconds(), AgeForceMs: r.ageForce.Milliseconds(), MinRetainedCommits: r.minCommits}
}

// validate refuses a policy below the normative floors and bad sizes.
func (r retentionConfig) validate() error {
	if r.interval < 0 {
		return errors.New("--retention-interval must not be negative")
	}
	if r.batch < 1 {
		return errors.New("--retention-batch must be at least 1")
	}
	d := storage.DefaultRetentionPolicy()
	switch p := r.policy(); {
	case p.ActiveWindowMs < d.ActiveWindowMs:
		return fmt.Errorf("--retention-active-window %v is below the floor of %v (SPEC §4.6 floors may be raised, not lowered)", r.activeWindow, storage.DefaultActiveWindow)
	case p.AgeForceMs < d.AgeForceMs:
		return fmt.Errorf("--retention-age-force %v is below the floor of %v (SPEC §4.6 floors may be raised, not lowered)", r.ageForce, storage.DefaultAgeForce)
	case p.MinRetainedCommits < d.MinRetainedCommits:
		return fmt.Errorf("--retention-min-commits %d is below the floor of %d (SPEC §4.6 floors may be raised, not lowered)", r.minCommits, storage.DefaultMinRetainedCommits)
	}
	return r.policy().CheckFloors() // the same rule, kept in one place
}

func (r retentionConfig) engineConfig() retention.Options {
	return retention.Options{Policy: r.policy(), Interval: r.interval, BatchCommits: r.batch}
}

// adminFlags parses a maintenance command's flags (store flags plus
// extra), returning the config, the positional arguments and an exit code
// (>= 0: stop with it).
func adminFlags(name, synopsis string, args []string, lookup func(string) (string, bool), stderr io.Writer, extra func(fs *flag.FlagSet, c *serveConfig)) (*serveConfig, []string, int) {
	var c serveConfig
	fs := flag.NewFlagSet("synclane "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	storeFlags(fs, &c)
	extra(fs, &c)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s\n\nEvery flag can also be set through the environment variable shown under it; flags win.\n\n", synopsis)
		printFlags(stderr, fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, nil, 0
		}
		return nil, nil, 2
	}
	if err := applyEnv(fs, lookup); err != nil {
		fmt.Fprintln(stderr, "synclane:", err)
		return nil, nil, 2
	}
	return &c, fs.Args(), -1
}

// openAdminStore opens the configured store and makes it current for the
// schema (a pending checkpoint is no reason to stop a maintenance command).
func openAdminStore(ctx context.Context, c *serveConfig) (store, *schema.Schema, error) {
	src, err := schemaSource(c.schemaFile)
	if err != nil {
		return store{}, nil, err
	}
	sch, err := schema.Parse(src)
	if err == nil {
		err = checkMergers(sch)
	}
	if err != nil {
		return store{}, nil, err
	}
	st, _, err := openStore(ctx, *c, zap.NewNop())
	if err != nil {
		return store{}, nil, err
	}
	if err := st.Lifecycle.EnsureSchema(ctx, sch); err != nil && !errors.Is(err, storage.ErrCheckpointIncomplete) {
		st.Close()
		return store{}, nil, err
	}
	return st, sch, nil
}

// pruneCmd runs one maintenance pass (or one partition) against the
// database and prints its progress per batch, then what it removed and
// kept. It exits 3 when another holder runs the maintenance lock and 130
// when a signal stopped it (after the batch in flight). A full pass also sweeps orphan
// blobs from the blob store the blob flags name (the same flags and
// defaults as serve, so it finds serve's store); --partition and
// --dry-run sweep none.
func pruneCmd(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	var dryRun bool
	var part string
	c, rest, code := adminFlags("prune", "synclane prune [--dry-run] [--partition P] [flags]", args, lookup, stderr, func(fs *flag.FlagSet, c *serveConfig) {
		retentionFlags(fs, &c.retention, false)
		fs.BoolVar(&dryRun, "dry-run", false, "report what would be pruned; delete nothing")
		fs.StringVar(&part, "partition", "", "prune only this partition (default: every partition)")
		blobFlags(fs, &c.blobs) // the same blob store as serve: a full pass sweeps its orphans
	})
	if code >= 0 {
		return code
	}
	if len(rest) > 0 {
		fmt.Fprintf(stderr, "synclane prune: unexpected argument %q\n", rest[0])
		return 2
	}
	c.retention.interval = 0
	c.blobs.lookup = lookup
	if err := errors.Join(c.retention.validate(), c.blobs.validate()); err != nil {
		fmt.Fprintln(stderr, "synclane:", err)
		return 2
	}
	fail := func(err error) int { fmt.Fprintln(stderr, "synclane prune:", err); return 1 }
	// Offline, prune holds the data directory; next to a server it opens
	// no filesystem blob store (its open sweeps the server's uploads).
	if err := checkAdminSchema(c); err != nil {
		return fail(err) // before the lock: a bad schema leaves no data directory behind
	}
	lock, err := lockDataDir(c, "synclane prune")
	server, nextToServer := servedBy(err)
	if err != nil && !nextToServer {
		return fail(err)
	}
	defer lock.Release() //nolint:errcheck
	skipBlobs := nextToServer && fsBlobStore(c.blobs, c.postgresURL)
	if skipBlobs {
		c.blobs.store = "off"
	}
	st, sch, err := openAdminStore(ctx, c)
	if err != nil {
		return fail(err)
	}
	defer st.Close()
	segs, err := openSegments(ctx, *c, st)
	if err != nil {
		return fail(fmt.Errorf("open segment store: %w", err))
	}
	blobs, err := openBlobs(ctx, *c, st, zap.NewNop())
	if err != nil {
		return fail(fmt.Errorf("open blob store: %w", err))
	}
	eng, err := engine.New(ctx, engine.Config{Schema: sch, Backend: st.Backend, Retention: c.retention.engineConfig(), Segments: segments.Options{Store: segs}, Blobs: blobs, Mergers: builtinMergers(),
		Resolver: engine.ScopeResolverFunc(func(context.Context, engine.Identity) (map[string][]string, error) {
			return nil, errors.New("synclane prune serves no requests")
		})})
	if err != nil {
		return fail(err)
	}
	defer eng.Close()
	var rep retention.MaintenanceReport
	opts := retention.PassOptions{DryRun: dryRun, OnBatch: func(b retention.BatchProgress) { printBatch(stdout, b) }}
	if part == "" {
		rep, err = eng.Retention().MaintenancePassWith(ctx, opts)
	} else {
		rep, err = prunePartition(ctx, eng, st, part, opts)
	}
	// Report with a context of its own: ctx has ended after a signal.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if rep.Skipped {
		fmt.Fprintln(stdout, skippedMessage(rctx, st))
		return exitPruneSkipped
	}
	printPrune(stdout, rep, eng.Retention().Policy(), dryRun)
	if skipBlobs {
		fmt.Fprintf(stdout, "blob sweep skipped: the server (pid %d) sweeps blobs itself\n", server.PID)
	}
	printFreePages(rctx, stdout, st)
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "synclane prune: interrupted: stopped after the batch in flight; the counts above were pruned (committed) and the rest is left for the next run")
		return exitInterrupted
	}
	if err != nil {
		return fail(err)
	}
	return 0
}

// prunePartition prunes one partition under the maintenance lock.
func prunePartition(ctx context.Context, eng *engine.Engine, st store, part string, opts retention.PassOptions) (retention.MaintenanceReport, error) {
	var rep retention.MaintenanceReport
	unlock, ok, err := st.Retention.TryLockMaintenance(ctx)
	if err != nil {
		return rep, err
	}
	if !ok {
		rep.Skipped = true
		return rep, nil
	}
	defer unlock()
	info, err := st.Log.ReadPartition(ctx, part)
	if err != nil {
		return rep, err
	}
	if !info.Exists {
		return rep, fmt.Errorf("no partition %q in this database", part)
	}
	rep.Checked = 1
	pr, err := eng.Retention().PruneWith(ctx, part, eng.Retention().Policy(), opts)
	if pr.Commits > 0 {
		rep.Pruned = []retention.PruneReport{pr}
	} else {
		rep.Kept = []retention.PruneReport{pr}
	}
	return rep, err
}

// restoreCmd installs a SQLite backup (--from) and rotates every
// partition's log epoch, or only rotates (--rotate-epochs, after a
// PostgreSQL restore).
func restoreCmd(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	var from string
	var rotateOnly bool
	c, rest, code := adminFlags("restore", "synclane restore --from DIR [--data DIR] [--blob-store /ABS/DIR] | synclane restore --rotate-epochs [--data DIR | --postgres URL]", args, lookup, stderr, func(fs *flag.FlagSet, c *serveConfig) {
		fs.StringVar(&from, "from", "", "backup directory (from synclane backup) to verify and install in --data; the server must be stopped")
		blobFlags(fs, &c.blobs) // where the backup's blobs go (default <data>/blobs)
		fs.BoolVar(&rotateOnly, "rotate-epochs", false, "only rotate every partition's log epoch (after restoring the database by other means, e.g. pg_restore)")
	})
	if code >= 0 {
		return code
	}
	if err := c.blobs.validate(); err != nil {
		fmt.Fprintf(stderr, "synclane restore: %v\n", err)
		return 2
	}
	switch {
	case len(rest) > 0:
		fmt.Fprintf(stderr, "synclane restore: unexpected argument %q\n", rest[0])
		return 2
	case (from == "") == !rotateOnly:
		fmt.Fprintln(stderr, "synclane restore: give exactly one of --from DIR and --rotate-epochs")
		return 2
	case from != "" && c.postgresURL != "":
		fmt.Fprintln(stderr, "synclane restore: --from installs a SQLite backup; restore PostgreSQL with pg_restore (or PITR), then run synclane restore --rotate-epochs --postgres URL")
		return 2
	}
	var stamp string // of the files a restore --from moved aside
	fail := func(err error) int {
		if aside, _ := filepath.Glob(filepath.Join(c.data, "*.before-restore-"+stamp+"*")); stamp != "" && len(aside) > 0 &&
			!strings.Contains(err.Error(), ".before-restore-") {
			err = fmt.Errorf("%w (the replaced files are kept as *.before-restore-%s in %s)", err, stamp, c.data)
		}
		fmt.Fprintln(stderr, "synclane restore:", err)
		return 1
	}
	lock, err := lockDataDir(c, "synclane restore")
	if err != nil {
		return fail(fmt.Errorf("%w: stop it first, nothing was changed", err))
	}
	defer lock.Release() //nolint:errcheck
	if from != "" {
		if stamp, err = restoreFrom(ctx, *c, from, stdout); err != nil {
			return fail(err)
		}
	}
	st, _, err := openAdminStore(ctx, c)
	if err != nil {
		return fail(err)
	}
	defer st.Close()
	parts, err := st.Retention.ListPartitions(ctx)
	if err != nil {
		return fail(err)
	}
	now := time.Now().UnixMilli()
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tMAX_COMMIT_SEQ\tNEW_LOG_EPOCH")
	for _, p := range parts {
		ep, err := st.Log.RotateLogEpoch(ctx, p.Partition, now)
		if err != nil {
			tw.Flush()
			return fail(fmt.Errorf("rotate the epoch of %q: %w (run the command again: rotating twice is harmless)", p.Partition, err))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", p.Partition, p.MaxCommitSeq, ep)
	}
	tw.Flush()
	if c.postgresURL == "" {
		if err := clearRestorePending(c.data); err != nil {
			return fail(err)
		}
	}
	fmt.Fprintf(stdout, "rotated the log epoch of %d partitions: clients get resetRequired and bootstrap again\n", len(parts))
	if stamp != "" {
		// Only now, with the epochs rotated, is the restore done: a
		// failure before this keeps the replaced files.
		note, err := removeAside(c.data, stamp)
		if err != nil {
			return fail(err)
		}
		if note != "" {
			fmt.Fprintln(stdout, note)
		}
	}
	return 0
}

// installBackup installs the database files srcs (file i of the backup's
// layout at srcs[i], the home file first; srcs themselves are only read)
// into the data directory dir: it copies them into a staging directory
// inside dir, checks each copy is an intact synclane SQLite database
// (PRAGMA quick_check, a partition registry) and that together they open
// as one layout, then moves every database file of the current layout
// (synclane.db and any synclane-<i>.db, with their -wal and -shm) aside
// as <name>.before-restore-<stamp> and the copies in place: the old other
// files aside, the new ones in (synclane-1.db first), then the old home
// file aside and the new one in. So the directory ends up with exactly the
// backup's files, and an interrupted swap leaves no directory that opens
// as a new, empty one (but for a single-file backup's one rename). It
// returns lines for the operator.
func installBackup(ctx context.Context, srcs []string, dir, stamp string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	if err := sqlite.RespreadPending(dir); err != nil {
		return nil, fmt.Errorf("%w; nothing was changed", err)
	}
	stage := filepath.Join(dir, ".restoring")
	if err := os.RemoveAll(stage); err != nil { // an earlier restore's, interrupted
		return nil, err
	}
	if err := os.Mkdir(stage, 0o750); err != nil {
		return nil, err
	}
	defer os.RemoveAll(stage) //nolint:errcheck
	names := sqlite.DirFileNames(len(srcs))
	for i, from := range srcs {
		tmp := filepath.Join(stage, names[i])
		if err := copyFile(from, tmp); err != nil {
			return nil, err
		}
		if err := checkBackup(ctx, tmp); err != nil {
			return nil, fmt.Errorf("%s: %w", from, err)
		}
	}
	d, err := sqlite.OpenDir(ctx, stage, sqlite.DirOptions{Files: len(srcs), FilesExplicit: true})
	if err == nil {
		err = d.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("the backup's database files do not open together: %w", err)
	}
	var out []string
	current, err := layoutFiles(dir)
	if err != nil {
		return nil, err
	}
	// From here until the epochs are rotated (restoreCmd) serve refuses
	// the directory: a restore stopped in between leaves the backup's
	// commits under their old epochs.
	if err := markRestorePending(dir, stamp); err != nil {
		return nil, err
	}
	// A failure from here on leaves the swap midway: the old files are
	// kept aside, the backup's are in the backup still.
	midway := func(err error) error {
		return fmt.Errorf("%w: the swap of the database files stopped midway; run synclane restore again to finish it (the old files are kept as <name>.before-restore-%s)", err, stamp)
	}
	moveAside := func(name string) error {
		aside := name + ".before-restore-" + stamp
		for _, suffix := range []string{"", "-wal", "-shm"} {
			if err := restoreRename(filepath.Join(dir, name+suffix), filepath.Join(dir, aside+suffix)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		out = append(out, fmt.Sprintf("moved the old %s aside as %s", name, aside))
		return nil
	}
	moveIn := func(name string) error {
		return restoreRename(filepath.Join(stage, name), filepath.Join(dir, name))
	}
	// The old home file stays until every other new file is in: while it
	// is there, the old layout's record refuses the new files (or, with a
	// single old file, serves the old layout whole), and once it is gone
	// synclane-1.db, in place first, holds data of another layout, so no
	// open takes the directory for a new, empty one. Only with a
	// single-file backup does a moment without any database file remain
	// (serve refuses the directory then: restore-pending is written).
	for _, name := range current {
		if name == sqlite.DirFileName {
			continue
		}
		if err := moveAside(name); err != nil {
			return out, midway(err)
		}
	}
	for _, name := range names[1:] { // synclane-1.db first
		if err := moveIn(name); err != nil {
			return out, midway(err)
		}
	}
	if slices.Contains(current, sqlite.DirFileName) {
		if err := moveAside(sqlite.DirFileName); err != nil {
			return out, midway(err)
		}
	}
	if err := moveIn(sqlite.DirFileName); err != nil {
		return out, midway(err)
	}
	if err := syncDir(dir); err != nil {
		return out, err
	}
	return append([]string{fmt.Sprintf("installed %d database files (%s) into %s", len(names), strings.Join(names, ", "), dir)}, out...), nil
}

// restoreRename renames during installBackup's swap (a test makes it fail
// to stop the swap before each rename).
var restoreRename = os.Rename

// layoutFiles returns the names of the database files in dir of any
// layout: synclane-<i>.db by i descending, then synclane.db.
func layoutFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var idx []int
	home := false
	for _, e := range ents {
		n := e.Name()
		if n == sqlite.DirFileName {
			home = true
			continue
		}
		num, ok := strings.CutPrefix(n, "synclane-")
		if num, ok = strings.CutSuffix(num, ".db"); !ok {
			continue
		}
		if i, err := strconv.Atoi(num); err == nil && i > 0 && strconv.Itoa(i) == num {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	slices.Reverse(idx)
	var out []string
	for _, i := range idx {
		out = append(out, "synclane-"+strconv.Itoa(i)+".db")
	}
	if home {
		out = append(out, sqlite.DirFileName)
	}
	return out, nil
}

// checkBackup opens path read-only and checks it.
func checkBackup(ctx context.Context, path string) error {
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?mode=ro")
	if err != nil {
		return err
	}
	defer db.Close()
	var check string
	if err := db.QueryRowContext(ctx, `PRAGMA quick_check`).Scan(&check); err != nil {
		return fmt.Errorf("not a readable SQLite database: %w", err)
	}
	if check != "ok" {
		return fmt.Errorf("the database is damaged: %s", check)
	}
	var n int64
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sync_partitions`).Scan(&n); err != nil {
		return fmt.Errorf("not a synclane database: %w", err)
	}
	return nil
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	if err := dst.Sync(); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}
