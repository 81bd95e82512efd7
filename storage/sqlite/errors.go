package sqlite

import (
	"database/sql"
	"errors"
	"fmt"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/synclane/synclane/storage"
)

// classify wraps err with storage.ErrConstraint when the driver reports a
// result code of the SQLITE_CONSTRAINT family.
func classify(err error, what string) error {
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_CONSTRAINT {
		return fmt.Errorf("sqlite: %s: %w: %w", what, storage.ErrConstraint, err)
	}
	return fmt.Errorf("sqlite: %s: %w", what, err)
}

// classifyAppend maps the fence trigger's abort (by its extended result
// code) to storage.ErrWriterFenced. Only sync_commits carries a trigger,
// so the code identifies it.
func classifyAppend(err error, seq int64) error {
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_TRIGGER {
		return fmt.Errorf("sqlite: append commit %d: %w: %w", seq, storage.ErrWriterFenced, err)
	}
	return fmt.Errorf("sqlite: append commit %d: %w", seq, err)
}

func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }
