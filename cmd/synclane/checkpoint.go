package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
)

const checkpointUsage = `Usage:
  synclane checkpoint list     [store flags]
  synclane checkpoint declare  [store flags] [--version N] --yes PARTITION/NAME
  synclane checkpoint claim    [store flags] [--version N] PARTITION/NAME
  synclane checkpoint activate [store flags] --sources t1,t2 [--epoch N] [--watermark W] PARTITION/NAME

Store flags (as for serve, and their SYNCLANE_* variables): --data DIR | --postgres URL,
--schema FILE, --pg-max-conns, --pg-statement-timeout.
synclane checkpoint CMD -h lists the flags of CMD.
declare closes the partition to every server that did not declare the checkpoint
itself (503 sync.schema_not_ready until activation): it refuses (exit 2) without --yes.
activate exits 1 unless the outcome is "activated", and says why (stale, unverifiable).
`

// checkpointCmd administers backfill checkpoints in the same database the
// servers use.
func checkpointCmd(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, checkpointUsage)
		return 2
	}
	sub := args[0]
	var synopsis string
	switch sub {
	case "list":
		synopsis = "synclane checkpoint list [flags]"
	case "declare", "claim":
		synopsis = "synclane checkpoint " + sub + " [flags] PARTITION/NAME"
	case "activate":
		synopsis = "synclane checkpoint activate [flags] --sources t1,t2 PARTITION/NAME"
	case "-h", "--help", "help":
		fmt.Fprint(stdout, checkpointUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "synclane checkpoint: unknown subcommand %q\n\n%s", sub, checkpointUsage)
		return 2
	}
	var c serveConfig
	fs := flag.NewFlagSet("synclane checkpoint "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	storeFlags(fs, &c)
	// Each subcommand has only the flags it reads.
	version, sources, epoch, watermark, yes := new(int), new(string), new(int64), new(int64), new(bool)
	*epoch, *watermark = -1, -1
	switch sub {
	case "declare", "claim":
		fs.IntVar(version, "version", 0, "schema version of the checkpoint (default: the schema's)")
		if sub == "declare" {
			fs.BoolVar(yes, "yes", false, "declare even though servers that did not declare it refuse the partition's requests (503) until activation")
		}
	case "activate":
		fs.StringVar(sources, "sources", "", "comma-separated source tables whose changes above the watermark make activation stale (required)")
		fs.Int64Var(epoch, "epoch", -1, "owner epoch to activate with (default: the stored one)")
		fs.Int64Var(watermark, "watermark", -1, "watermark to activate at (default: the stored one)")
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s\n\n", synopsis)
		if sub != "list" {
			fmt.Fprint(stderr, "Flags may come before or after PARTITION/NAME.\n")
		}
		fmt.Fprint(stderr, "Every flag can also be set through the environment variable shown under it; flags win.\n\n")
		printFlags(stderr, fs)
	}
	// Flags may come before or after the PARTITION/NAME argument.
	positional, code, ok := parseInterspersed(fs, args[1:])
	if !ok {
		return code
	}
	if err := applyEnv(fs, lookup); err != nil {
		fmt.Fprintln(stderr, "synclane:", err)
		return 2
	}
	fail := func(err error) int { fmt.Fprintln(stderr, "synclane checkpoint:", err); return 1 }
	src, err := schemaSource(c.schemaFile)
	if err != nil {
		return fail(err)
	}
	sch, err := schema.Parse(src)
	if err != nil {
		return fail(err)
	}
	if sub == "declare" && !*yes {
		// Refused before the store is opened: nothing is declared.
		if len(positional) != 1 {
			return fail(errors.New("want exactly one PARTITION/NAME"))
		}
		r, err := parseCheckpointRef(positional[0])
		if err != nil {
			return fail(err)
		}
		v := int32(*version)
		if v == 0 {
			v = sch.Version
		}
		fmt.Fprint(stderr, declareWarning(r, v))
		fmt.Fprintln(stderr, "Nothing was declared: re-run with --yes to declare it.")
		return 2
	}
	st, _, err := openStore(ctx, c, zap.NewNop())
	if err != nil {
		return fail(err)
	}
	defer st.Close()
	// The store must know the schema; a pending checkpoint is no reason to
	// stop an administrative command.
	if err := st.Lifecycle.EnsureSchema(ctx, sch); err != nil && !errors.Is(err, storage.ErrCheckpointIncomplete) {
		return fail(err)
	}
	now := time.Now().UnixMilli()
	ref := func() (storage.CheckpointRef, error) {
		if len(positional) != 1 {
			return storage.CheckpointRef{}, errors.New("want exactly one PARTITION/NAME")
		}
		return parseCheckpointRef(positional[0])
	}
	ver := int32(*version)
	if ver == 0 {
		ver = sch.Version
	}
	switch sub {
	case "list":
		cps, err := st.Checkpoints.ReadCheckpoints(ctx)
		if err != nil {
			return fail(err)
		}
		printCheckpoints(stdout, cps...)
		return 0
	case "declare", "claim":
		r, err := ref()
		if err != nil {
			return fail(err)
		}
		d := storage.CheckpointDeclaration{Partition: r.Partition, Name: r.Name, SchemaVersion: ver}
		var cp storage.Checkpoint
		if sub == "declare" {
			cp, err = st.Checkpoints.DeclareCheckpoint(ctx, d, now)
		} else {
			cp, err = st.Checkpoints.ClaimCheckpoint(ctx, d, now)
		}
		if err != nil {
			return fail(err)
		}
		printCheckpoints(stdout, cp)
		if sub == "declare" {
			fmt.Fprintf(stdout, "Requests to partition %q now get 503 sync.schema_not_ready from servers that did not declare %s/%s, until it is activated.\n", r.Partition, r.Partition, r.Name)
		}
		return 0
	case "activate":
		r, err := ref()
		if err != nil {
			return fail(err)
		}
		if *sources == "" {
			return fail(errors.New("--sources is required (the tables the projection is built from)"))
		}
		cur, err := findCheckpoint(ctx, st.Checkpoints, r)
		if err != nil {
			return fail(err)
		}
		ep, wm := cur.OwnerEpoch, cur.Watermark
		if *epoch >= 0 {
			ep = *epoch
		}
		if *watermark >= 0 {
			wm = *watermark
		}
		out, err := st.Checkpoints.ActivateCheckpoint(ctx, r.Partition, r.Name, ep, wm, strings.Split(*sources, ","), now)
		if err != nil {
			return fail(err)
		}
		fmt.Fprintln(stdout, out)
		if out != storage.Activated {
			part, perr := st.Log.ReadPartition(ctx, r.Partition)
			if perr != nil {
				fmt.Fprintln(stderr, "synclane checkpoint: reading the partition to explain the outcome:", perr)
			}
			explainActivation(stdout, out, cur, ep, wm, strings.Split(*sources, ","), part)
		}
		if after, err := findCheckpoint(ctx, st.Checkpoints, r); err == nil {
			printCheckpoints(stdout, after)
		}
		if out != storage.Activated {
			return 1
		}
		return 0
	}
	return 2 // unreachable: sub was checked above
}

func findCheckpoint(ctx context.Context, st storage.Checkpoints, r storage.CheckpointRef) (storage.Checkpoint, error) {
	cps, err := st.ReadCheckpoints(ctx)
	if err != nil {
		return storage.Checkpoint{}, err
	}
	for _, cp := range cps {
		if cp.Partition == r.Partition && cp.Name == r.Name {
			return cp, nil
		}
	}
	return storage.Checkpoint{}, fmt.Errorf("%s/%s: %w", r.Partition, r.Name, storage.ErrCheckpointNotDeclared)
}

func printCheckpoints(w io.Writer, cps ...storage.Checkpoint) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tNAME\tVERSION\tSTATE\tWATERMARK\tOWNER_EPOCH\tOBSERVED_ROWS")
	for _, c := range cps {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%d\n", c.Partition, c.Name, c.SchemaVersion, c.State, c.Watermark, c.OwnerEpoch, c.ObservedRows)
	}
	tw.Flush()
}

// parseInterspersed parses args with fs, flags before or after the
// positional arguments, and returns the positional ones in order. When
// parsing ends the command (-h, or a bad flag, which fs reported), ok is
// false and code is the exit code: 0 for -h, 2 otherwise.
func parseInterspersed(fs *flag.FlagSet, args []string) (positional []string, code int, ok bool) {
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, 0, false
			}
			return nil, 2, false
		}
		if fs.NArg() == 0 {
			return positional, 0, true
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
