// Command bench is synclane's benchmark harness and SSP2 load generator.
//
//	go run ./bench <workload> [flags]
//
// Workloads: push, partitions, pull, bootstrap, idle, pushpull, realtime, prune, storm, reconnect, bigpush, all;
// hostile (issue 31: one client floods a real `synclane serve` with sockets and
// keep-alive connections; not part of all); soak (issue 33: writers,
// readers, realtime subscribers, reconnect churn and the maintenance loop
// at once against a real `synclane serve`; not part of all);
// floor (issue 45: the cost of each system call a round needs on this
// machine; not part of all); and cluster (real `synclane serve` processes, etcd and PostgreSQL; not
// part of all). The harness
// drives the engine in-process (--inproc, the default), over HTTP on a
// loopback listener it starts itself (--http), or any SSP2 server speaking
// wire v3 with development auth headers and the demo todos schema (--url).
// Each in-process or loopback case gets a fresh store (SQLite in a
// temporary directory, a fresh PostgreSQL schema dropped afterwards, or
// memory) and engine. See bench/RESULTS.md for recorded figures.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "realtime-holder" {
		os.Exit(realtimeHolder(os.Args[2:])) // the child process of the realtime idle case
	}
	if len(os.Args) > 1 && os.Args[1] == "hostile-attacker" {
		os.Exit(hostileAttacker(os.Args[2:])) // the attacker process of the hostile workload
	}
	if len(os.Args) > 1 && os.Args[1] == "server-child" {
		os.Exit(serverChild(os.Args[2:])) // the server process of bootstrap --server-proc
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// workloads maps a workload name to its runner, in "all" order. A
// standalone workload runs only when named (not in "all"), once per run:
// it picks its own processes and store, whatever --store and the modes.
var workloads = []struct {
	name       string
	run        func(ctx context.Context, cfg *Config, store string) ([]Result, error)
	standalone bool
}{
	{"push", runPush, false},
	{"partitions", runPartitions, false},
	{"pull", runPull, false},
	{"bootstrap", runBootstrap, false},
	{"idle", runIdle, false},
	{"pushpull", runPushpull, false},
	{"realtime", runRealtime, false},
	{"prune", runPrune, false},
	{"storm", runStorm, false},
	{"reconnect", runReconnect, false},
	{"bigpush", runBigPush, false},
	{"cluster", runCluster, true},
	{"hostile", runHostile, true},
	{"soak", runSoak, true},
	{"floor", runFloor, true},
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args, stderr)
	if err != nil {
		if err != errUsage {
			fmt.Fprintln(stderr, "bench:", err)
		}
		return 2
	}
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	rep, err := execute(ctx, cfg, stderr)
	if rep != nil {
		if cfg.JSON {
			_ = writeJSON(stdout, rep)
		} else {
			fmt.Fprintf(stdout, "machine: %d CPUs, %s, %s %s/%s, mem %s\ncommand: %s\n", rep.Machine.CPUs, rep.Machine.CPUModel,
				rep.Machine.GoVersion, rep.Machine.GOOS, rep.Machine.GOARCH, rep.Machine.MemTotal, rep.Command)
			writeText(stdout, rep)
		}
	}
	if cfg.MemProfile != "" {
		if f, ferr := os.Create(cfg.MemProfile); ferr == nil {
			_ = pprof.WriteHeapProfile(f)
			_ = f.Close()
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	return 0
}

// execute runs the configured workloads cfg.Runs times in every mode and on
// every store, and summarizes.
func execute(ctx context.Context, cfg *Config, progress io.Writer) (*Report, error) {
	rep := &Report{Machine: machine(), Command: "go run ./bench " + strings.Join(cfg.Args, " ")}
	var firstErr error
	for run := 1; run <= cfg.Runs; run++ {
		for _, mode := range cfg.Modes {
			for _, w := range workloads {
				if cfg.Workload != w.name && (cfg.Workload != "all" || w.standalone) {
					continue
				}
				stores := cfg.Stores
				switch {
				case w.standalone && mode != cfg.Modes[0]:
					continue
				case w.standalone:
					stores = []string{"postgres"}
				case mode == ModeURL:
					stores = []string{"remote"}
				}
				for _, store := range stores {
					if ctx.Err() != nil {
						return finish(rep), ctx.Err()
					}
					mcfg := *cfg
					mcfg.Mode = mode
					if !cfg.Quiet {
						fmt.Fprintf(progress, "run %d/%d: %s mode=%s store=%s\n", run, cfg.Runs, w.name, mode, store)
					}
					rs, err := w.run(ctx, &mcfg, store)
					rep.Results = append(rep.Results, rs...)
					if err != nil {
						err = fmt.Errorf("%s (mode=%s store=%s): %w", w.name, mode, store, err)
						fmt.Fprintln(progress, "bench:", err)
						if firstErr == nil {
							firstErr = err
						}
					}
				}
			}
		}
	}
	return finish(rep), firstErr
}

func finish(rep *Report) *Report {
	rep.Summaries = summarize(rep.Results)
	rep.Checks = checkTargets(rep.Summaries)
	return rep
}
