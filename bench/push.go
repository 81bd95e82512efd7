package main

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// rowsPerWriter is how many distinct todos each writer cycles through: the
// first pass inserts, later passes update.
const rowsPerWriter = 256

// pushCase runs the push workload once: W writers, one partition, one
// single-upsert commit per request, closed loop.
func pushCase(ctx context.Context, cfg *Config, store, name string, eo EngineOpts) (Result, error) {
	r := Result{Workload: "push", Case: name, Store: store, Mode: string(cfg.Mode),
		Params: map[string]any{"writers": cfg.Writers, "duration": cfg.Duration.String(), "groupCommit": !eo.DisableGroupCommit}}
	t, err := openTarget(ctx, cfg, store, eo)
	if err != nil {
		return r, err
	}
	defer t.Close()
	r.Store = t.Store
	clients := make([]*Client, cfg.Writers)
	for i := range clients {
		clients[i] = t.Client("writer-"+strconv.Itoa(i), "push", "w"+strconv.Itoa(i))
		if err := clients[i].Handshake(ctx); err != nil {
			return r, fmt.Errorf("handshake: %w", err)
		}
	}
	before := actorStats(t)
	ph := newPhase(cfg.Warmup, cfg.Duration, cfg.MaxOps)
	tallies := make([]tally, cfg.Writers)
	runWorkers(cfg.Writers, func(w int) {
		c, tl := clients[w], &tallies[w]
		list := listID(w)
		for n := int64(0); ph.next() && ctx.Err() == nil; n++ {
			id := "w" + strconv.Itoa(w) + "-" + strconv.Itoa(int(n%rowsPerWriter))
			op := todoUpsert(id, list, n)
			t0 := time.Now()
			_, err := pushOne(ctx, c, "c"+strconv.FormatInt(n, 10), op)
			if err != nil {
				tl.fail(err)
				continue
			}
			if ph.measuring(t0) {
				tl.lat.Record(time.Since(t0))
				tl.ok++
			}
		}
	})
	elapsed := time.Since(ph.measureFrom)
	tot, ferr := mergeTallies(tallies)
	r.add("commits/s", "1/s", float64(tot.ok)/elapsed.Seconds())
	r.add("p50", "ms", ms(tot.lat.Quantile(0.50)))
	r.add("p95", "ms", ms(tot.lat.Quantile(0.95)))
	r.add("p99", "ms", ms(tot.lat.Quantile(0.99)))
	r.add("max", "ms", ms(tot.lat.Max()))
	r.add("commits", "", float64(tot.ok))
	r.add("errors", "", float64(tot.errs))
	if after := actorStats(t); after != nil && before != nil && after.Batches > before.Batches {
		r.add("avg batch", "commits", float64(after.BatchedJobs-before.BatchedJobs)/float64(after.Batches-before.Batches))
	}
	if ferr != nil {
		r.Notes = append(r.Notes, "first error: "+ferr.Error())
	}
	if note := kindsNote("errors by kind", tot.kinds); note != "" {
		r.Notes = append(r.Notes, note)
	}
	return r, nil
}

// runPush runs the push workload on every store, with the no-group-commit
// baseline next to each engine case unless disabled or remote.
func runPush(ctx context.Context, cfg *Config, store string) ([]Result, error) {
	var out []Result
	label := fmt.Sprintf("%d writers, 1 partition", cfg.Writers)
	suffix := ", group commit"
	if cfg.Mode == ModeURL {
		suffix = ", remote server"
	}
	r, err := pushCase(ctx, cfg, store, label+suffix, EngineOpts{})
	if err != nil {
		return out, err
	}
	out = append(out, r)
	if store == "sqlite" && cfg.Mode == ModeInproc {
		// The ceiling in the same run, with the batch size group commit reached.
		batch := 32
		for _, m := range r.Metrics {
			if m.Name == "avg batch" && m.Value >= 1 {
				batch = int(m.Value + 0.5)
			}
		}
		for _, layout := range []string{layoutCeiling, layoutSynclane} {
			c, err := ceilingCase(ctx, cfg, batch, layout)
			if err != nil {
				return out, fmt.Errorf("ceiling (%s): %w", layout, err)
			}
			out = append(out, c)
		}
	}
	if cfg.Baseline && cfg.Mode != ModeURL {
		b, err := pushCase(ctx, cfg, store, label+", baseline (group commit disabled)", EngineOpts{DisableGroupCommit: true})
		if err != nil {
			return out, err
		}
		out = append(out, b)
	}
	return out, nil
}
