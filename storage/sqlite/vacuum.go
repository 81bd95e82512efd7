package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
)

// Space is how the database file's pages are used.
type Space struct {
	// PageSize is the page size in bytes; Pages counts the file's pages
	// and FreePages those on the free list (reusable by later writes,
	// returned to the file system only by Vacuum).
	PageSize, Pages, FreePages int64
}

// Bytes is the size the pages take (the file's size without the -wal).
func (s Space) Bytes() int64 { return s.PageSize * s.Pages }

// FreeBytes is the size of the free pages.
func (s Space) FreeBytes() int64 { return s.PageSize * s.FreePages }

// Space reads the page counts from a read connection.
func (s *Store) Space(ctx context.Context) (Space, error) {
	var sp Space
	err := s.readQueryRow(ctx, `SELECT (SELECT page_size FROM pragma_page_size()), (SELECT page_count FROM pragma_page_count()), (SELECT freelist_count FROM pragma_freelist_count())`).
		Scan(&sp.PageSize, &sp.Pages, &sp.FreePages)
	if err != nil {
		return Space{}, fmt.Errorf("sqlite: read page counts: %w", err)
	}
	return sp, nil
}

// ErrInUse reports VacuumFile on a database another connection has open
// (a running server, a synclane prune): stop it first.
var ErrInUse = errors.New("sqlite: the database is in use by another process (stop the server first)")

// VacuumFile rewrites the database file at path without its free pages
// (VACUUM), then truncates the write-ahead log, on a connection of its own
// in exclusive locking mode: it refuses with ErrInUse when any other
// connection has the database open (a server keeps it open for its whole
// life), and nobody can open it while it runs. Its cost: it copies every
// live page (time grows with the file) and needs free disk about the
// file's size for the copy and the log. It returns the page counts before
// and after.
func VacuumFile(ctx context.Context, path string) (before, after Space, err error) {
	if _, err := os.Stat(path); err != nil {
		return before, after, fmt.Errorf("sqlite: vacuum: %w", err)
	}
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_busy_timeout=1000&_pragma=locking_mode(EXCLUSIVE)")
	if err != nil {
		return before, after, fmt.Errorf("sqlite: vacuum: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		return before, after, fmt.Errorf("sqlite: vacuum: %w", err)
	}
	defer conn.Close()
	// The first write in exclusive locking mode takes the file's exclusive
	// lock, which fails while another connection has the database open.
	if _, err := conn.ExecContext(ctx, `BEGIN EXCLUSIVE; CREATE TABLE IF NOT EXISTS sync_vacuum_probe(x); DROP TABLE sync_vacuum_probe; COMMIT`); err != nil {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
		if strings.Contains(err.Error(), "SQLITE_BUSY") || strings.Contains(err.Error(), "locked") {
			return before, after, fmt.Errorf("%w: %s", ErrInUse, path)
		}
		return before, after, fmt.Errorf("sqlite: vacuum: %w", err)
	}
	space := func() (Space, error) {
		var sp Space
		err := conn.QueryRowContext(ctx, `SELECT (SELECT page_size FROM pragma_page_size()), (SELECT page_count FROM pragma_page_count()), (SELECT freelist_count FROM pragma_freelist_count())`).
			Scan(&sp.PageSize, &sp.Pages, &sp.FreePages)
		return sp, err
	}
	if before, err = space(); err != nil {
		return before, after, fmt.Errorf("sqlite: vacuum: read page counts: %w", err)
	}
	if _, err := conn.ExecContext(ctx, `VACUUM`); err != nil {
		return before, after, fmt.Errorf("sqlite: vacuum: %w", err)
	}
	if _, err := conn.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return before, after, fmt.Errorf("sqlite: vacuum: checkpoint: %w", err)
	}
	if after, err = space(); err != nil {
		return before, after, fmt.Errorf("sqlite: vacuum: read page counts: %w", err)
	}
	return before, after, nil
}
