package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// restorePendingName is the marker a restore writes into the data
// directory before it swaps the database files and removes once every
// partition's log epoch is rotated. Between the two the directory holds
// the backup's commits under their old epochs: a client that synced past
// the backup would be served commit seqs it already has under other
// contents. serve refuses a directory with the marker.
const restorePendingName = "restore-pending"

// errRestorePending is serve's refusal of a directory whose restore did
// not finish.
var errRestorePending = errors.New("a restore of this data directory did not finish: its log epochs are not rotated yet")

// markRestorePending writes the marker (fsynced with the directory), so a
// restore stopped anywhere after it leaves a directory serve refuses.
func markRestorePending(dir, stamp string) error {
	path := filepath.Join(dir, restorePendingName)
	text := fmt.Sprintf("restore %s: database files being installed; run `synclane restore --rotate-epochs --data %s` (or the restore again) to finish\n", stamp, dir)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("mark the restore pending: %w", err)
	}
	if _, err = f.WriteString(text); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("mark the restore pending: %w", err)
	}
	return nil
}

// clearRestorePending removes the marker once the epochs are rotated (no
// marker: nothing to do).
func clearRestorePending(dir string) error {
	if err := os.Remove(filepath.Join(dir, restorePendingName)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("clear the restore marker: %w", err)
	}
	return syncDir(dir)
}

// checkRestorePending refuses a data directory holding the marker, naming
// the command that finishes the restore.
func checkRestorePending(dir string) error {
	switch _, err := os.Stat(filepath.Join(dir, restorePendingName)); {
	case err == nil:
		return fmt.Errorf("%w (%s is there): run `synclane restore --rotate-epochs --data %s` with the server stopped, or the restore again", errRestorePending, filepath.Join(dir, restorePendingName), dir)
	case errors.Is(err, fs.ErrNotExist):
		return nil
	default:
		return fmt.Errorf("read the restore marker: %w", err)
	}
}
