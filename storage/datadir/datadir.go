// Package datadir guards a synclane data directory with an OS file lock,
// so that one server (or one offline maintenance command) at a time works
// on it.
//
// The lock is an exclusive flock(2) on <dir>/synclane.lock. It is
// advisory: it binds only the processes that take it. The synclane
// commands that would break a running server take it (serve on SQLite,
// restore, an offline prune); the ones that may run next to a server
// (prune, backup) then touch nothing the server owns but the database,
// whose writers SQLite serializes. The operating system releases the lock
// when the holding process ends, however it ends (exit, crash, kill -9): a
// lock file left behind is never a stale lock, and nothing has to clean
// it up. flock is per open file description: a second Acquire in the same
// process is refused too. Network file systems may not honour flock.
package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// FileName is the name of the lock file inside a data directory.
const FileName = "synclane.lock"

// Info describes the process holding a data directory's lock, as that
// process wrote it into the lock file after it took the lock.
type Info struct {
	PID       int       `json:"pid"`
	Command   string    `json:"command"`
	StartedAt time.Time `json:"started_at"`
}

// String names the holder: "`synclane serve` (pid 1234, since …)".
func (i Info) String() string {
	if i.PID == 0 {
		return "another process (it has not written its pid yet)"
	}
	cmd := i.Command
	if cmd == "" {
		cmd = "unknown command"
	}
	return fmt.Sprintf("`%s` (pid %d, since %s)", cmd, i.PID, i.StartedAt.UTC().Format(time.RFC3339))
}

// HeldError is returned by Acquire when another holder has the directory; it
// names that holder.
type HeldError struct {
	Dir    string
	Holder Info
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("data directory %s is in use by %s", e.Dir, e.Holder)
}

// Lock is a held data directory lock. It stays held until Release or
// until the process ends.
type Lock struct {
	f    *os.File
	path string
}

// Acquire takes the exclusive lock of dir (creating dir and its lock file,
// 0600, if needed) without waiting, and records this process (pid,
// command, start time) in the lock file. When another process — or
// another Lock in this process — holds it, Acquire returns a *HeldError
// naming the holder and changes nothing in the directory.
func Acquire(dir, command string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("datadir: create %s: %w", dir, err)
	}
	path := filepath.Join(dir, FileName)
	// No O_TRUNC: the file may be the live holder's record.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("datadir: open %s: %w", path, err)
	}
	ok, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("datadir: lock %s: %w", path, err)
	}
	if !ok {
		info := readInfo(f)
		f.Close()
		return nil, &HeldError{Dir: dir, Holder: info}
	}
	b, err := json.Marshal(Info{PID: os.Getpid(), Command: command, StartedAt: time.Now().UTC().Truncate(time.Second)})
	if err == nil {
		err = f.Truncate(0)
	}
	if err == nil {
		_, err = f.WriteAt(append(b, '\n'), 0)
	}
	if err == nil {
		err = f.Chmod(0o600) // a file from an older run may have other bits
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("datadir: record the holder in %s: %w", path, err)
	}
	return &Lock{f: f, path: path}, nil
}

// Path is the lock file's path.
func (l *Lock) Path() string { return l.path }

// Release gives the lock up; the record in the lock file is cleared
// first. Releasing twice is harmless.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	_ = f.Truncate(0) // no record of a holder that is gone
	return f.Close()  // closing the only descriptor releases the flock
}

// Holder reports whether a live process holds dir's lock and, if so, who.
// It probes by taking and at once releasing the lock, so it creates
// nothing: a directory without a lock file is not held. An Acquire by
// another process during the probe may see the directory as held.
func Holder(dir string) (Info, bool, error) {
	path := filepath.Join(dir, FileName)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return Info{}, false, nil
	}
	if err != nil {
		return Info{}, false, fmt.Errorf("datadir: open %s: %w", path, err)
	}
	defer f.Close()
	ok, err := tryLock(f)
	if err != nil {
		return Info{}, false, fmt.Errorf("datadir: lock %s: %w", path, err)
	}
	if ok {
		return Info{}, false, nil // the deferred Close releases it
	}
	return readInfo(f), true, nil
}

// readInfo reads the holder's record; a holder that has not written it yet
// (or an unreadable one) gives a zero Info.
func readInfo(f *os.File) Info {
	b := make([]byte, 4096)
	n, _ := f.ReadAt(b, 0)
	var info Info
	if json.Unmarshal(b[:n], &info) != nil {
		return Info{}
	}
	return info
}
