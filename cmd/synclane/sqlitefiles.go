package main

import (
	"fmt"
	"strconv"

	"github.com/synclane/synclane/storage/sqlite"
)

// sqliteFilesFlag is --sqlite-files: a number of database files that
// remembers whether it was given (an existing directory with another
// number is then refused instead of kept).
type sqliteFilesFlag struct {
	n   int
	set bool
}

func (f *sqliteFilesFlag) String() string {
	if f == nil {
		return ""
	}
	return strconv.Itoa(f.n)
}

func (f *sqliteFilesFlag) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > sqlite.MaxDirFiles {
		return fmt.Errorf("want a number of files from 1 to %d", sqlite.MaxDirFiles)
	}
	f.n, f.set = n, true
	return nil
}
