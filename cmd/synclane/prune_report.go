package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/synclane/synclane/engine/retention"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/sqlite"
)

// Exit codes of synclane prune beyond 0 (done), 1 (failed) and 2 (usage).
const (
	// exitPruneSkipped: another holder runs the maintenance lock; nothing
	// was pruned (so cron notices).
	exitPruneSkipped = 3
	// exitInterrupted: stopped by SIGINT or SIGTERM after the batch in
	// flight; the output counts what was pruned.
	exitInterrupted = 130
)

// maintenanceHolderReader is a store that can say who holds the
// maintenance lock (the SQLite store's lease row).
type maintenanceHolderReader interface {
	MaintenanceHolder(ctx context.Context) (storage.MaintenanceHolder, bool, error)
}

// spaceReader is a store that can count its files' free pages (SQLite:
// a Store, or a Dir summing its files).
type spaceReader interface {
	Space(ctx context.Context) (sqlite.Space, error)
}

// skippedMessage says that the pass was skipped and, as far as the store
// records it, who holds the maintenance lock.
func skippedMessage(ctx context.Context, st store) string {
	who := "another process holds the maintenance lock (a server's maintenance pass or another synclane prune)"
	if r, ok := st.Retention.(maintenanceHolderReader); ok {
		if h, held, err := r.MaintenanceHolder(ctx); err == nil && held {
			who = "another process holds the maintenance lock: "
			if h.PID > 0 {
				who += fmt.Sprintf("pid %d on %s", h.PID, h.Host)
			} else {
				who += h.Holder
			}
			if !h.Since.IsZero() {
				who += " since " + h.Since.UTC().Format(time.RFC3339)
			}
			if !h.Expires.IsZero() {
				who += ", lease expires " + h.Expires.UTC().Format(time.RFC3339) + " unless renewed"
			}
			who += " (a server's maintenance pass or another synclane prune)"
		}
	}
	return "skipped: " + who + "; nothing pruned"
}

// printBatch prints one pruning batch's progress line.
func printBatch(w io.Writer, b retention.BatchProgress) {
	if b.DryRun {
		fmt.Fprintf(w, "%s: would prune %d commits, %d changes, %d idempotency records, %d tombstones through horizon %d (%s)\n",
			b.Partition, b.Commits, b.Changes, b.IdempotencyRecords, b.Tombstones, b.Target, b.Elapsed.Round(time.Millisecond))
		return
	}
	fmt.Fprintf(w, "%s: batch %d: pruned %d commits, %d changes, %d idempotency records, %d tombstones; horizon %d of %d (%s)\n",
		b.Partition, b.Batch, b.Commits, b.Changes, b.IdempotencyRecords, b.Tombstones, b.HorizonSeq, b.Target, b.Elapsed.Round(time.Millisecond))
}

// keptReason explains in words the limit that bound a plan.
func keptReason(p storage.RetentionPlan, policy storage.RetentionPolicy) string {
	switch p.Binding {
	case storage.BindingNothing:
		return "nothing above the horizon"
	case storage.BindingMinRetained:
		return fmt.Sprintf("below the floor: the newest %d commits are kept", policy.MinRetainedCommits)
	case storage.BindingActiveClient:
		return fmt.Sprintf("inside the active window: %d clients seen within %v, the lowest at cursor %d",
			p.ActiveClients, time.Duration(policy.ActiveWindowMs)*time.Millisecond, p.MinActiveCursor)
	case storage.BindingCheckpoint:
		return fmt.Sprintf("pinned by a backfill checkpoint not yet activated (watermark %d)", p.CheckpointFloor)
	case storage.BindingAgeForce:
		return fmt.Sprintf("commits older than %v forced out", time.Duration(policy.AgeForceMs)*time.Millisecond)
	}
	return p.Binding
}

// printPrune prints the final table (pruned and kept partitions) and the
// totals.
func printPrune(w io.Writer, rep retention.MaintenanceReport, policy storage.RetentionPolicy, dryRun bool) {
	verb := "pruned"
	if dryRun {
		verb = "would prune"
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tRESULT\tHORIZON_BEFORE\tHORIZON_AFTER\tCOMMITS\tCHANGES\tIDEMPOTENCY_RECORDS\tTOMBSTONES\tBATCHES\tTOOK\tBOUND_BY\tWHY")
	var commits, changes, idem, tombs int64
	for _, p := range rep.Pruned {
		after := p.HorizonAfter
		if dryRun {
			after = p.Plan.Target
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", p.Partition, verb, p.HorizonBefore, after, p.Commits, p.Changes, p.IdempotencyRecords,
			p.Tombstones, p.Batches, p.Took.Round(time.Millisecond), p.Plan.Binding, keptReason(p.Plan, policy))
		commits, changes, idem, tombs = commits+p.Commits, changes+p.Changes, idem+p.IdempotencyRecords, tombs+p.Tombstones
	}
	for _, p := range rep.Kept {
		fmt.Fprintf(tw, "%s\tkept\t%d\t%d\t0\t0\t0\t0\t0\t-\t%s\t%s\n", p.Partition, p.HorizonBefore, p.HorizonBefore, p.Plan.Binding, keptReason(p.Plan, policy))
	}
	tw.Flush()
	if dryRun {
		fmt.Fprintf(w, "%s %d commits, %d changes, %d idempotency records, %d tombstones in %d of %d partitions (dry run: nothing deleted)\n", verb, commits, changes, idem, tombs, len(rep.Pruned), rep.Checked)
		return
	}
	fmt.Fprintf(w, "%s %d commits, %d changes, %d idempotency records, %d tombstones in %d of %d partitions; expired %d segments; swept %d orphan blobs (%s)\n",
		verb, commits, changes, idem, tombs, len(rep.Pruned), rep.Checked, rep.SegmentsExpired, rep.BlobsSwept, rep.Took.Round(time.Millisecond))
}

// printFreePages says how much of the SQLite file is free pages and how to
// reclaim them (nothing on other stores).
func printFreePages(ctx context.Context, w io.Writer, st store) {
	r, ok := st.Retention.(spaceReader)
	if !ok {
		return
	}
	sp, err := r.Space(ctx)
	if err != nil || sp.Pages == 0 {
		return
	}
	what := "the database file has"
	if st.dir != nil && st.dir.Files() > 1 {
		what = fmt.Sprintf("the %d database files have", st.dir.Files())
	}
	fmt.Fprintf(w, "%s %d free pages (%s of %s, %d%%): later writes reuse them; synclane vacuum returns them to the file system (stop the server first)\n",
		what, sp.FreePages, byteSize(sp.FreeBytes()), byteSize(sp.Bytes()), sp.FreePages*100/sp.Pages)
}

// byteSize formats n bytes in binary units.
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// vacuumCmd rewrites every SQLite database file of the data directory
// without its free pages.
func vacuumCmd(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	c, rest, code := adminFlags("vacuum", "synclane vacuum [--data DIR]", args, lookup, stderr, func(fs *flag.FlagSet, _ *serveConfig) {})
	if code >= 0 {
		return code
	}
	switch {
	case len(rest) > 0:
		fmt.Fprintf(stderr, "synclane vacuum: unexpected argument %q\n", rest[0])
		return 2
	case c.postgresURL != "":
		fmt.Fprintln(stderr, "synclane vacuum: reclaims the embedded SQLite file's free pages; PostgreSQL reuses its own (autovacuum; VACUUM FULL to shrink, see docs/retention.md)")
		return 2
	}
	db := filepath.Join(c.data, sqlite.DirFileName)
	if _, err := os.Stat(db); err != nil {
		fmt.Fprintln(stderr, "synclane vacuum: no database:", err)
		return 1
	}
	// The data directory's lock names a server (or prune, restore) using
	// the directory; the exclusive open below also refuses any other
	// process that has a file open.
	lock, err := lockDataDir(c, "synclane vacuum")
	if err != nil {
		fmt.Fprintf(stderr, "synclane vacuum: %v: stop it first; nothing changed\n", err)
		return 1
	}
	defer lock.Release() //nolint:errcheck
	// Every database file of the directory's layout (Files 1, not
	// explicit: its own K; a directory without a record is not stamped).
	d, err := sqlite.OpenDir(ctx, c.data, sqlite.DirOptions{Files: 1})
	if err != nil {
		fmt.Fprintln(stderr, "synclane vacuum:", err)
		return 1
	}
	paths := d.Paths()
	if err := d.Close(); err != nil {
		fmt.Fprintln(stderr, "synclane vacuum:", err)
		return 1
	}
	var size int64
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil {
			size = max(size, fi.Size())
		}
	}
	fmt.Fprintf(stdout, "vacuuming %d database files of %s: each is rewritten whole, one at a time, which needs about %s of free disk (the largest file), and no other process may have the database open while it runs\n",
		len(paths), c.data, byteSize(size))
	start := time.Now()
	var before, after sqlite.Space
	for _, p := range paths {
		b, a, err := sqlite.VacuumFile(ctx, p)
		if errors.Is(err, sqlite.ErrInUse) {
			fmt.Fprintf(stderr, "synclane vacuum: another process has %s open (a running synclane serve or prune): stop it first; the files before it were vacuumed, nothing else changed\n", p)
			return 1
		}
		if err != nil {
			fmt.Fprintln(stderr, "synclane vacuum:", err)
			return 1
		}
		if len(paths) > 1 {
			fmt.Fprintf(stdout, "  %s: %s → %s (%d free pages reclaimed)\n", filepath.Base(p), byteSize(b.Bytes()), byteSize(a.Bytes()), b.FreePages)
		}
		before.PageSize, before.Pages, before.FreePages = b.PageSize, before.Pages+b.Pages, before.FreePages+b.FreePages
		after.PageSize, after.Pages, after.FreePages = a.PageSize, after.Pages+a.Pages, after.FreePages+a.FreePages
	}
	fmt.Fprintf(stdout, "vacuumed: %s → %s (%d free pages reclaimed, %s)\n", byteSize(before.Bytes()), byteSize(after.Bytes()), before.FreePages, time.Since(start).Round(time.Millisecond))
	return 0
}
