package main

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// partClient is one writer's client of one partition.
type partClient struct {
	c      *Client
	cursor int64
	n      int64
}

// partitionsCase runs W writers over P partitions, each writer cycling over
// its share of the partitions; every PullEvery-th operation is an
// incremental pull instead of a push.
func partitionsCase(ctx context.Context, cfg *Config, store string, p int) (Result, error) {
	w := cfg.Writers
	r := Result{Workload: "partitions", Case: fmt.Sprintf("%d partitions × %d writers, 1 pull per %d ops", p, w, cfg.PullEvery),
		Store: store, Mode: string(cfg.Mode), Params: map[string]any{"partitions": p, "writers": w, "pullEvery": cfg.PullEvery, "duration": cfg.Duration.String()}}
	t, err := openTarget(ctx, cfg, store, EngineOpts{})
	if err != nil {
		return r, err
	}
	defer t.Close()
	r.Store = t.Store
	// Writer i serves partitions i, i+W, i+2W, … (or partition i mod P
	// when there are fewer partitions than writers).
	sets := make([][]*partClient, w)
	setupStart := time.Now()
	setupErrs := make([]error, w)
	runWorkers(w, func(i int) {
		var ps []int
		if p >= w {
			for x := i; x < p; x += w {
				ps = append(ps, x)
			}
		} else {
			ps = []int{i % p}
		}
		for _, x := range ps {
			pc := &partClient{c: t.Client("writer-"+strconv.Itoa(i), "part-"+strconv.Itoa(x), "w"+strconv.Itoa(i)), cursor: -1}
			cur, err := bootstrapCursor(ctx, pc.c)
			if err != nil {
				setupErrs[i] = err
				return
			}
			pc.cursor = cur
			sets[i] = append(sets[i], pc)
		}
	})
	for _, err := range setupErrs {
		if err != nil {
			return r, fmt.Errorf("setup: %w", err)
		}
	}
	setup := time.Since(setupStart)
	const kindPush, kindPull = 1, 2
	ph := newPhase(cfg.Warmup, cfg.Duration, cfg.MaxOps).Require(kindPush | kindPull)
	cpu := newCPUMeter(0, t.Mode)
	cpuStartAt := cpu.sampleAt(ctx, ph.measureFrom)
	pushes, pulls := make([]tally, w), make([]tally, w)
	runWorkers(w, func(i int) {
		set := sets[i]
		for n := 0; ph.next() && ctx.Err() == nil; n++ {
			pc := set[n%len(set)]
			t0 := time.Now()
			if n%cfg.PullEvery == cfg.PullEvery-1 {
				var cur int64
				err := retryOp(ctx, &pulls[i], func() (err error) {
					cur, _, err = pullCommits(ctx, pc.c, pc.cursor, nil)
					return err
				})
				if err != nil {
					pulls[i].fail(err)
					continue
				}
				pc.cursor = cur
				if ph.measuringKind(t0, kindPull) {
					pulls[i].lat.Record(time.Since(t0))
					pulls[i].ok++
				}
				continue
			}
			pc.n++
			id := "w" + strconv.Itoa(i) + "-" + strconv.Itoa(int(pc.n%rowsPerWriter))
			if err := retryOp(ctx, &pushes[i], func() error {
				_, err := pushOne(ctx, pc.c, "c"+strconv.FormatInt(pc.n, 10), todoUpsert(id, listID(i), pc.n))
				return err
			}); err != nil {
				pushes[i].fail(err)
				continue
			}
			if ph.measuringKind(t0, kindPush) {
				pushes[i].lat.Record(time.Since(t0))
				pushes[i].ok++
			}
		}
	})
	cpuStart := cpuStartAt()
	cpuEnd := cpu.sample()
	elapsed := time.Since(ph.measureFrom)
	pu, err1 := mergeTallies(pushes)
	pl, err2 := mergeTallies(pulls)
	r.add("commits/s", "1/s", float64(pu.ok)/elapsed.Seconds())
	r.add("pulls/s", "1/s", float64(pl.ok)/elapsed.Seconds())
	if ops := pu.ok + pl.ok; ops > 0 && cpuStart.ok && cpuEnd.ok {
		// Process CPU (engine and load generator) per operation: less
		// sensitive to other work on the machine than the rates.
		r.add("CPU/op", "ms", ms(cpuEnd.cpu-cpuStart.cpu)/float64(ops))
	}
	r.add("push p50", "ms", ms(pu.lat.Quantile(0.5)))
	r.add("push p99", "ms", ms(pu.lat.Quantile(0.99)))
	r.add("pull p50", "ms", ms(pl.lat.Quantile(0.5)))
	r.add("pull p99", "ms", ms(pl.lat.Quantile(0.99)))
	r.add("errors", "", float64(pu.errs+pl.errs))
	r.add("setup (wake all)", "s", setup.Seconds())
	if s := actorStats(t); s != nil {
		r.add("live actors", "", float64(s.LiveActors))
		if s.Batches > 0 {
			r.add("avg batch", "commits", float64(s.BatchedJobs)/float64(s.Batches))
		}
	}
	for _, e := range []error{err1, err2} {
		if e != nil {
			r.Notes = append(r.Notes, "first error: "+e.Error())
		}
	}
	errs, retried := map[string]int64{}, map[string]int64{}
	var nretried int64
	for _, t := range []tally{pu, pl} {
		for k, n := range t.kinds {
			errs[k] += n
		}
		for k, n := range t.retries {
			retried[k] += n
			nretried += n
		}
	}
	r.add("retried (retry-later answers)", "", float64(nretried))
	for _, note := range []string{kindsNote("errors by kind", errs), kindsNote("retried by kind", retried)} {
		if note != "" {
			r.Notes = append(r.Notes, note)
		}
	}
	return r, nil
}

// bootstrapCursor acquires the epoch and bootstraps the client's view of
// all todos, returning the cursor to pull incrementally from.
func bootstrapCursor(ctx context.Context, c *Client) (int64, error) {
	var state []byte
	for range 1000 {
		resp, err := c.Do(ctx, &pullAll, allTodos("s", -1, state))
		if err != nil {
			return 0, err
		}
		end := subEnd(resp)
		if end == nil {
			return 0, fmt.Errorf("bootstrap: no SUB_END")
		}
		if end.BootstrapState == nil {
			return end.NextCursor, nil
		}
		state = end.BootstrapState
	}
	return 0, fmt.Errorf("bootstrap did not finish")
}

// runPartitions compares aggregate throughput across partition counts.
func runPartitions(ctx context.Context, cfg *Config, store string) ([]Result, error) {
	var out []Result
	for _, p := range cfg.Partitions {
		r, err := partitionsCase(ctx, cfg, store, p)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}
