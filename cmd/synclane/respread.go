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

	"github.com/synclane/synclane/storage/sqlite"
)

// respreadHelp is the description under respread's usage line.
const respreadHelp = `Re-spreads the partitions of the SQLite data directory over K database files
(synclane.db, synclane-1.db, ... synclane-<K-1>.db; partition P lives in file
FNV-1a(P) mod K), offline: the server must be stopped (the data directory's
lock is taken). The new layout is written into <data>/.respread/ and every
table's row count and every partition's file are checked before the swap;
the old files are then moved into <data>/respread-old-<time>/, kept for you
to delete. Reaction ids (sync_reactions, with the dead letters) are
renumbered: they are only meaningful per file, and change with K anyway.

If it is interrupted, one layout is always complete: before the new one is
verified, the old files are untouched in place (the next run removes the
unfinished copy); after, the new one is in .respread/ or in place, the
directory is refused by serve, and running synclane respread again finishes
the swap.
`

// respreadCmd re-spreads a SQLite data directory over --files files.
func respreadCmd(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	files := 0
	c, rest, code := adminFlags("respread", "synclane respread --files K [--data DIR]\n\n"+respreadHelp, args, lookup, stderr, func(fs *flag.FlagSet, _ *serveConfig) {
		fs.IntVar(&files, "files", 0, fmt.Sprintf("the number of database files (1-%d) to spread the partitions over (required)", sqlite.MaxDirFiles))
	})
	if code >= 0 {
		return code
	}
	if files == 0 && c.sqliteFiles.set {
		files = c.sqliteFiles.n // serve's flag, given here by habit
	}
	switch {
	case len(rest) > 0:
		fmt.Fprintf(stderr, "synclane respread: unexpected argument %q\n", rest[0])
		return 2
	case c.postgresURL != "":
		fmt.Fprintln(stderr, "synclane respread: re-spreads the embedded SQLite database's files; PostgreSQL has no database files to spread")
		return 2
	case files < 1 || files > sqlite.MaxDirFiles:
		fmt.Fprintf(stderr, "synclane respread: --files K is required, 1 to %d\n", sqlite.MaxDirFiles)
		return 2
	}
	fail := func(err error) int { fmt.Fprintln(stderr, "synclane respread:", err); return 1 }
	// An interrupted swap may have the home file in the work directory
	// still: the journal says so, and Respread finishes it first.
	if _, err := os.Stat(filepath.Join(c.data, sqlite.DirFileName)); err != nil && !errors.Is(sqlite.RespreadPending(c.data), sqlite.ErrRespreadPending) {
		return fail(fmt.Errorf("no database: %w", err))
	}
	lock, err := lockDataDir(c, "synclane respread")
	if err != nil {
		return fail(fmt.Errorf("%w: stop it first, nothing was changed", err))
	}
	defer lock.Release() //nolint:errcheck
	start := time.Now()
	// A signal stops the copy (the next run removes it); the swap, once
	// the journal is written, takes no context and is not stopped halfway.
	rep, err := sqlite.Respread(ctx, c.data, files, sqlite.RespreadOptions{})
	if rep.Resumed {
		fmt.Fprintf(stdout, "finished an interrupted respread: its old files are in %s\n", rep.OldDir)
	}
	if err != nil {
		return fail(err)
	}
	if rep.FilesBefore == rep.FilesAfter {
		if !rep.Resumed {
			fmt.Fprintf(stdout, "%s already has %d database files: nothing to do\n", c.data, rep.FilesAfter)
		}
		return 0
	}
	fmt.Fprintf(stdout, "respread %s: %d → %d database files; %d partitions, %d moved to another file (%s)\n",
		c.data, rep.FilesBefore, rep.FilesAfter, rep.Partitions, rep.Moved, time.Since(start).Round(time.Millisecond))
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  TABLE\tROWS")
	for _, t := range rep.Tables {
		fmt.Fprintf(tw, "  %s\t%d\n", t.Table, t.Rows)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "every table's row count matches the old layout; the old files are in %s: delete them once the server runs on the new layout\n", rep.OldDir)
	return 0
}
