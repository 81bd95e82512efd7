package main

import (
	"errors"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage/datadir"
)

// lockDataDir takes the lock of the SQLite data directory for command
// (e.g. "synclane serve"): nil with --postgres, whose data directory no
// process owns. A held directory is a *datadir.HeldError naming the
// holder; the caller refuses before it touches anything in it.
func lockDataDir(c *serveConfig, command string) (*datadir.Lock, error) {
	if c.postgresURL != "" {
		return nil, nil
	}
	return datadir.Acquire(c.data, command)
}

// servedBy reports the server holding err's directory (err from
// lockDataDir): a command that may run next to a server then goes on
// without the lock and touches nothing the server owns. Any other holder
// (a restore, another offline prune) is no server.
func servedBy(err error) (datadir.Info, bool) {
	var he *datadir.HeldError
	if errors.As(err, &he) && he.Holder.Command == serveCommand {
		return he.Holder, true
	}
	return datadir.Info{}, false
}

// checkAdminSchema compiles the schema c names, as openAdminStore does,
// so a command can refuse a bad one before it takes the lock (creating
// the directory).
func checkAdminSchema(c *serveConfig) error {
	src, err := schemaSource(c.schemaFile)
	if err != nil {
		return err
	}
	sch, err := schema.Parse(src)
	if err != nil {
		return err
	}
	return checkMergers(sch)
}

// serveCommand is the command serve records in the data directory lock.
const serveCommand = "synclane serve"

// fsBlobStore reports whether c's blob store is a directory (the default
// <data>/blobs next to SQLite): opening it sweeps its .tmp directory, the
// running server's in-flight uploads.
func fsBlobStore(b blobConfig, postgresURL string) bool {
	switch b.location().kind {
	case blobOff, blobPostgres, blobS3:
		return false
	case blobDefault:
		return postgresURL == ""
	}
	return true
}
