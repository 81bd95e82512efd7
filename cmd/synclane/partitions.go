package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"

	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres/homes"
)

// synclane partitions move|rebalance: online moves of partitions between
// the PostgreSQL databases of --postgres-databases (issue 46;
// storage/postgres/homes.Move, docs/cluster.md "Moving a partition").

const partitionsUsage = `Usage:
  synclane partitions move PARTITION --to NAME   move one partition to the database NAME, online
  synclane partitions rebalance [--max N] [--dry-run]
                                                 move partitions until every database holds
                                                 within one of the mean

Both need the flags of the servers' store: --postgres, --postgres-databases (the same
list as every server's) and --schema. Each prints one JSON object per move on stdout.
A move interrupted at any step (the command killed, a database gone) is finished or
undone by running it again.
`

// moveReport is the JSON line of one move.
type moveReport struct {
	Partition  string  `json:"partition"`
	From       string  `json:"from"`
	To         string  `json:"to"`
	Generation int64   `json:"generation"`
	MaxSeq     int64   `json:"maxSeq"`
	Rows       int64   `json:"rows"`
	Recovered  string  `json:"recovered,omitempty"`
	PauseMs    float64 `json:"pauseMs"`
	DurationMs float64 `json:"durationMs"`
	DryRun     bool    `json:"dryRun,omitempty"`
}

func reportOf(r homes.MoveResult) moveReport {
	return moveReport{Partition: r.Partition, From: r.From, To: r.To, Generation: r.Generation, MaxSeq: r.MaxSeq, Rows: r.Rows,
		Recovered: r.Recovered, PauseMs: float64(r.Pause.Microseconds()) / 1000, DurationMs: float64(r.Duration.Microseconds()) / 1000}
}

// holdAfterEnv names the test seam of synclane partitions move: set to a
// step n (1-6), the command prints "held after step n" on stdout after
// that step and waits there until it is killed (process tests kill -9 it
// at each step, then run the move again).
const holdAfterEnv = "SYNCLANE_TEST_MOVE_HOLD_AFTER"

// movePartition moves p to the home named to (the admin API's route and
// the command); holdAfter, when not 0, is the step the move waits after
// (holdAfterEnv), announcing it on out.
func movePartition(ctx context.Context, h *homes.Homes, p, to string, holdAfter int, out io.Writer) (moveReport, error) {
	if to == "" {
		return moveReport{}, errors.New("want the target database's name (--to NAME, ?to=NAME)")
	}
	var opts homes.MoveOptions
	if holdAfter > 0 {
		opts.AfterStep = func(ctx context.Context, n int) {
			if n == holdAfter {
				fmt.Fprintf(out, "held after step %d\n", n)
				<-ctx.Done()
			}
		}
	}
	res, err := h.Move(ctx, p, to, opts)
	if err != nil {
		return moveReport{}, err
	}
	return reportOf(res), nil
}

// rebalance plans and (unless dryRun) runs the moves evening the homes
// out, one after the other; it stops at the first failure.
func rebalance(ctx context.Context, h *homes.Homes, limit int, dryRun bool, log *zap.Logger) ([]moveReport, error) {
	plan, err := h.RebalancePlan(ctx, limit)
	if err != nil {
		return nil, err
	}
	out := make([]moveReport, 0, len(plan))
	for _, m := range plan {
		if dryRun {
			out = append(out, moveReport{Partition: m.Partition, From: m.From, To: m.To, DryRun: true})
			continue
		}
		res, err := h.Move(ctx, m.Partition, m.To, homes.MoveOptions{})
		if err != nil {
			return out, fmt.Errorf("move %s to %q: %w", storage.QuoteID(m.Partition), m.To, err)
		}
		log.Info("rebalance: moved", zap.String("partition", m.Partition), zap.String("from", res.From), zap.String("to", res.To))
		out = append(out, reportOf(res))
	}
	return out, nil
}

// partitionsCmd runs synclane partitions SUBCOMMAND.
func partitionsCmd(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, partitionsUsage)
		return 2
	}
	sub := args[0]
	switch sub {
	case "move", "rebalance":
	case "-h", "--help", "help":
		fmt.Fprint(stdout, partitionsUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "synclane partitions: unknown subcommand %q\n\n%s", sub, partitionsUsage)
		return 2
	}
	var c serveConfig
	fs := flag.NewFlagSet("synclane partitions "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	storeFlags(fs, &c)
	to, limit, dry := new(string), new(int), new(bool)
	if sub == "move" {
		fs.StringVar(to, "to", "", "name of the database (home) to move the partition to: main or a name of --postgres-databases")
	} else {
		fs.IntVar(limit, "max", 0, "move at most this many partitions (0: as many as it takes)")
		fs.BoolVar(dry, "dry-run", false, "print the moves without making them")
	}
	fs.Usage = func() {
		fmt.Fprint(stderr, partitionsUsage, "\n")
		printFlags(stderr, fs)
	}
	positional, code, ok := parseInterspersed(fs, args[1:])
	if !ok {
		return code
	}
	if err := applyEnv(fs, lookup); err != nil {
		fmt.Fprintln(stderr, "synclane:", err)
		return 2
	}
	fail := func(err error) int { fmt.Fprintln(stderr, "synclane partitions "+sub+":", err); return 1 }
	if sub == "move" && len(positional) != 1 {
		return fail(errors.New("want exactly one PARTITION"))
	}
	if sub == "rebalance" && len(positional) != 0 {
		return fail(errors.New("takes no argument"))
	}
	if c.postgresURL == "" || len(c.homes.list) == 0 {
		return fail(errors.New("needs --postgres and --postgres-databases: partitions move between PostgreSQL databases"))
	}
	src, err := schemaSource(c.schemaFile)
	if err != nil {
		return fail(err)
	}
	sch, err := schema.Parse(src)
	if err != nil {
		return fail(err)
	}
	log := zap.NewNop()
	st, _, err := openStore(ctx, c, log)
	if err != nil {
		return fail(err)
	}
	defer st.Close()
	// The stores must know the schema's tables (every row table moves); a
	// pending checkpoint is no reason to stop an administrative command.
	if err := st.Lifecycle.EnsureSchema(ctx, sch); err != nil && !errors.Is(err, storage.ErrCheckpointIncomplete) {
		return fail(err)
	}
	enc := json.NewEncoder(stdout)
	if sub == "move" {
		hold := 0
		if v, ok := lookup(holdAfterEnv); ok {
			if hold, err = strconv.Atoi(v); err != nil {
				return fail(fmt.Errorf("%s=%q: %w", holdAfterEnv, v, err))
			}
		}
		rep, err := movePartition(ctx, st.homes, positional[0], *to, hold, stdout)
		if err != nil {
			return fail(err)
		}
		_ = enc.Encode(rep)
		return 0
	}
	reps, err := rebalance(ctx, st.homes, *limit, *dry, log)
	for _, r := range reps {
		_ = enc.Encode(r)
	}
	if err != nil {
		return fail(err)
	}
	return 0
}
