package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// ceilingCase times a log layout's bare loop (layout.go) at the batch size
// group commit reached, for the same duration as a load case. With
// layoutCeiling it is the most any engine could do on this disk and CPU: a
// bare loop that upserts the push workload's rows into one SQLite table
// (same driver, WAL, synchronous=FULL), batch rows per transaction, one
// fsync'd COMMIT per batch, no protocol, no log, no idempotency. With
// layoutSynclane it adds the statements synclane's log runs per commit:
// the bound of any engine on that layout. The push workload's
// single-partition rate is reported as a fraction of both.
func ceilingCase(ctx context.Context, cfg *Config, batch int, layout string) (Result, error) {
	batch = max(batch, 1)
	name := fmt.Sprintf("ceiling: bare SQLite upsert loop, %d rows per transaction", batch)
	if layout != layoutCeiling {
		name = fmt.Sprintf("log bound: synclane's per-commit log statements on bare SQLite, %d commits per transaction", batch)
	}
	r := Result{Workload: "push", Case: name, Store: "sqlite", Mode: "bare",
		Params: map[string]any{"batch": batch, "duration": cfg.Duration.String(), "layout": layout}}
	dir, err := os.MkdirTemp(cfg.DataDir, "synclane-ceiling-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	ph := newPhase(cfg.Warmup, cfg.Duration, cfg.MaxOps)
	var commits int64
	var lat Hist
	err = runLayout(ctx, filepath.Join(dir, "ceiling.db"), layoutNamed(layout), cfg.Writers, batch, ph.next,
		func(n int, began time.Time) {
			if ph.measuring(began) {
				commits += int64(n)
				lat.Record(time.Since(began))
			}
		})
	if err != nil {
		return r, err
	}
	elapsed := time.Since(ph.measureFrom)
	r.add("commits/s", "1/s", float64(commits)/elapsed.Seconds())
	r.add("commits", "", float64(commits))
	r.add("transaction p99", "ms", ms(lat.Quantile(0.99)))
	return r, nil
}
