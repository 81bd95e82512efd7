package main

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"time"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
)

// seedRows writes n todos into partition with 500-operation commits from
// four concurrent seeding clients.
func seedRows(ctx context.Context, t *Target, partition string, n int) error {
	const perCommit, seeders = 500, 4
	errs := make([]error, seeders)
	runWorkers(seeders, func(s int) {
		c := t.Client("seeder-"+strconv.Itoa(s), partition, "seed"+strconv.Itoa(s))
		ops := make([]ssp2.Operation, 0, perCommit)
		commit := 0
		for i := s * perCommit; i < n && errs[s] == nil; i += seeders * perCommit {
			ops = ops[:0]
			for j := i; j < min(i+perCommit, n); j++ {
				ops = append(ops, todoUpsert(fmt.Sprintf("todo-%07d", j), listID(j), int64(j)))
			}
			commit++
			_, errs[s] = pushOne(ctx, c, "seed-"+strconv.Itoa(commit), ops...)
		}
	})
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	return nil
}

// bootstrapCase seeds n rows, then measures one fresh client bootstrapping
// them end to end: epoch handshake, paged snapshot pulls, decoding and
// applying every segment into an in-memory replica.
func bootstrapCase(ctx context.Context, cfg *Config, store string, n int) (Result, error) {
	lane := cfg.Lane
	if lane == "" {
		lane = "inline"
	}
	accept, ok := map[string]uint8{"inline": ssp2.AcceptInlineRows, "ref": ssp2.AcceptRefRows,
		"sqlite": ssp2.AcceptRefRows | ssp2.AcceptSQLite}[lane]
	r := Result{Workload: "bootstrap", Case: fmt.Sprintf("%d rows, %d rows/page, %d pages/request, %s", n, cfg.PageRows, cfg.Pages, lane),
		Store: store, Mode: string(cfg.Mode), Params: map[string]any{"rows": n, "pageRows": cfg.PageRows, "pages": cfg.Pages, "lane": lane}}
	if !ok {
		return r, fmt.Errorf("--lane %q: want inline, ref or sqlite", lane)
	}
	t, err := openTarget(ctx, cfg, store, EngineOpts{})
	if err != nil {
		return r, err
	}
	defer t.Close()
	r.Store = t.Store
	if err := seedRows(ctx, t, "boot", n); err != nil {
		return r, err
	}
	sch := schema.MustDemo()
	c := t.Client("reader", "boot", "boot-reader")
	rep := httpsynctest.NewReplica(nil, sch)
	rep.Subscribe("s", "todos", map[string][]string{"list_id": allLists})
	ph := &ssp2.PullHeader{Accept: accept, LimitSnapshotRows: int32(cfg.PageRows), MaxSnapshotPages: int32(cfg.Pages)}

	base := heapAfterGC()
	samp := startHeapSampler(2 * time.Millisecond)
	start := time.Now()
	requests := 0
	var lat Hist
	for done := false; !done; {
		if requests > n/max(cfg.PageRows, 1)+100 || ctx.Err() != nil {
			samp.Stop()
			return r, fmt.Errorf("bootstrap did not converge after %d requests", requests)
		}
		s := rep.Subs[0]
		t0 := time.Now()
		resp, err := c.Do(ctx, ph, allTodos(s.ID, s.Cursor, s.Token))
		if err != nil {
			samp.Stop()
			return r, err
		}
		requests++
		if err := c.ResolveSegments(ctx, resp, map[string][]string{"list_id": allLists}, sch); err != nil {
			samp.Stop()
			return r, err
		}
		st, err := rep.Apply(resp)
		if err != nil {
			samp.Stop()
			return r, err
		}
		lat.Record(time.Since(t0))
		done = !st.Incomplete
	}
	elapsed := time.Since(start)
	peak := samp.Stop()
	got := len(rep.Rows["todos"])
	if got != n {
		return r, fmt.Errorf("bootstrap converged with %d rows, want %d", got, n)
	}
	r.add("rows/s", "1/s", float64(n)/elapsed.Seconds())
	r.add("time", "ms", ms(elapsed))
	r.add("requests", "", float64(requests))
	r.add("request p50", "ms", ms(lat.Quantile(0.5)))
	r.add("bytes/row", "B", float64(c.BytesIn)/float64(n))
	r.add("peak heap growth", "MiB", float64(int64(peak)-int64(base))/(1<<20))
	r.add("replica heap", "MiB", float64(int64(heapAfterGC())-int64(base))/(1<<20))
	runtime.KeepAlive(rep)
	if cfg.Mode == ModeURL {
		r.Notes = append(r.Notes, "heap figures are the harness (client) only")
	} else {
		r.Notes = append(r.Notes, "heap figures cover server and client in one process")
	}
	return r, nil
}

// runBootstrap runs the bootstrap workload for every row count.
func runBootstrap(ctx context.Context, cfg *Config, store string) ([]Result, error) {
	var out []Result
	for _, n := range cfg.Rows {
		r, err := bootstrapCase(ctx, cfg, store, n)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}
