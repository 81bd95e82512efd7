// Command synclane is the standalone synclane server.
//
//	synclane serve [flags]
//
// With no flags it serves the built-in demo schema (table todos) on
// 127.0.0.1:8787 with data in ./synclane-data (embedded SQLite) and
// development authentication (x-actor / x-partition headers, loopback
// addresses only; --jwt-secret or --jwks-url for real authentication). Every flag
// can also be set through a SYNCLANE_* environment variable (flag name in
// upper case, dashes as underscores), flags winning.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// After the first signal starts the drain, a second one ends the
		// process at once (the default action).
		<-ctx.Done()
		stop()
	}()
	os.Exit(run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}

const usage = `synclane: a Go sync server for the Syncular sync protocol (SSP2)

Usage:
  synclane serve [flags]     run the server (synclane serve -h for flags)
  synclane checkpoint CMD    list, declare, claim or activate backfill checkpoints
  synclane prune [flags]     run one maintenance pass (pruning) against the database
  synclane vacuum [--data D] reclaim the SQLite files' free pages (server stopped)
  synclane respread --files K
                             re-spread a SQLite data directory's partitions over K database
                             files (server stopped)
  synclane backup --to DIR   write an online, complete backup directory (SQLite: a snapshot
                             of every database file, blobs, lease key, manifest with sha256)
  synclane restore ...       verify and install a SQLite backup (--from DIR) or, after a PostgreSQL
                             restore, rotate every partition's log epoch (--rotate-epochs)
  synclane partitions move P --to NAME
                             move a partition to another PostgreSQL database, online
                             (--postgres-databases; also: partitions rebalance)
  synclane admin COMMAND     read partitions, clients, commits, rows, events from a
                             server's admin listener (synclane admin -h)
  synclane token --jwt-secret S --actor ID
                             mint a development JWT that serve --jwt-secret S accepts
                             (--partition, --scopes, --ttl or --expires; synclane token -h)
  synclane version           print the version, VCS revision and time, modified flag and Go
                             version the binary was built with (also synclane --version)
`

// version, when set at build time with -ldflags "-X main.version=...",
// replaces the module version that `synclane version` prints.
var version = "dev"

// run executes the command line args; lookup reads the environment (as
// os.LookupEnv: a variable set but empty is not an unset one).
func run(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], lookup, stdout, stderr)
	case "checkpoint":
		return checkpointCmd(ctx, args[1:], lookup, stdout, stderr)
	case "prune":
		return pruneCmd(ctx, args[1:], lookup, stdout, stderr)
	case "vacuum":
		return vacuumCmd(ctx, args[1:], lookup, stdout, stderr)
	case "respread":
		return respreadCmd(ctx, args[1:], lookup, stdout, stderr)
	case "backup":
		return backupCmd(ctx, args[1:], lookup, stdout, stderr)
	case "restore":
		return restoreCmd(ctx, args[1:], lookup, stdout, stderr)
	case "partitions":
		return partitionsCmd(ctx, args[1:], lookup, stdout, stderr) // partitions.go
	case "admin":
		return adminCmd(ctx, args[1:], lookup, stdout, stderr)
	case "token":
		return tokenCmd(ctx, args[1:], lookup, stdout, stderr)
	case "version", "--version", "-version":
		printVersion(stdout) // version.go
		return 0
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "synclane: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}
