package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"
)

// seenEvent is a commit observed by a puller.
type seenEvent struct {
	seq int64
	at  time.Time
}

// acceptLog records when each commit's push was answered.
type acceptLog struct {
	mu sync.Mutex
	at map[int64]time.Time
}

func (a *acceptLog) put(seq int64, t time.Time) {
	a.mu.Lock()
	a.at[seq] = t
	a.mu.Unlock()
}

// pullCase runs C clients pulling incrementally from one partition every
// PullInterval while PullWriters writers push Rate commits/s in total.
func pullCase(ctx context.Context, cfg *Config, store string) (Result, error) {
	r := Result{Workload: "pull", Case: fmt.Sprintf("%d clients every %s, %d writers at %d commits/s, 1 partition", cfg.Clients, cfg.PullInterval, cfg.PullWriters, cfg.Rate),
		Store: store, Mode: string(cfg.Mode), Params: map[string]any{"clients": cfg.Clients, "pullInterval": cfg.PullInterval.String(),
			"writers": cfg.PullWriters, "rate": cfg.Rate, "duration": cfg.Duration.String()}}
	t, err := openTarget(ctx, cfg, store, EngineOpts{})
	if err != nil {
		return r, err
	}
	defer t.Close()
	r.Store = t.Store
	writers := make([]*Client, cfg.PullWriters)
	for i := range writers {
		writers[i] = t.Client("writer-"+strconv.Itoa(i), "pull", "w"+strconv.Itoa(i))
		if err := writers[i].Handshake(ctx); err != nil {
			return r, err
		}
	}
	pullers := make([]*Client, cfg.Clients)
	cursors := make([]int64, cfg.Clients)
	errs := make([]error, cfg.Clients)
	runWorkers(min(cfg.Clients, 16), func(g int) {
		for i := g; i < cfg.Clients; i += 16 {
			pullers[i] = t.Client("reader-"+strconv.Itoa(i), "pull", "r"+strconv.Itoa(i))
			cursors[i], errs[i] = bootstrapCursor(ctx, pullers[i])
		}
	})
	for _, e := range errs {
		if e != nil {
			return r, fmt.Errorf("setup: %w", e)
		}
	}
	acc := &acceptLog{at: map[int64]time.Time{}}
	ph := newPhase(cfg.Warmup, cfg.Duration, cfg.MaxOps)
	stop := make(chan struct{})
	wt := make([]tally, cfg.PullWriters)
	var wwg sync.WaitGroup
	for i := range writers {
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			// Each writer paces itself to Rate/PullWriters commits/s.
			gap := time.Duration(float64(time.Second) * float64(cfg.PullWriters) / float64(cfg.Rate))
			next := time.Now()
			list := listID(i)
			for n := int64(0); ctx.Err() == nil; n++ {
				select {
				case <-stop:
					return
				case <-time.After(time.Until(next)):
				}
				next = next.Add(gap)
				if now := time.Now(); next.Before(now) {
					next = now // no catch-up bursts
				}
				t0 := time.Now()
				seq, err := pushOne(ctx, writers[i], "c"+strconv.FormatInt(n, 10), todoUpsert("w"+strconv.Itoa(i)+"-"+strconv.Itoa(int(n%rowsPerWriter)), list, n))
				if err != nil {
					wt[i].fail(err)
					continue
				}
				done := time.Now()
				acc.put(seq, done)
				if ph.measuring(t0) {
					wt[i].lat.Record(done.Sub(t0))
					wt[i].ok++
				}
			}
		}()
	}
	pt := make([]tally, cfg.Clients)
	seen := make([][]seenEvent, cfg.Clients)
	runWorkers(cfg.Clients, func(i int) {
		c, tl := pullers[i], &pt[i]
		// Spread the clients' phases over one interval.
		wait := time.Duration(rand.Int64N(int64(cfg.PullInterval) + 1))
		var seqs []int64
		for ctx.Err() == nil {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
			wait = cfg.PullInterval
			if !ph.next() {
				return
			}
			t0 := time.Now()
			cur, got, err := pullCommits(ctx, c, cursors[i], seqs[:0])
			if err != nil {
				tl.fail(err)
				continue
			}
			now := time.Now()
			cursors[i], seqs = cur, got
			if ph.measuring(t0) {
				tl.lat.Record(now.Sub(t0))
				tl.ok++
				for _, s := range got {
					seen[i] = append(seen[i], seenEvent{seq: s, at: now})
				}
			}
		}
	})
	close(stop)
	wwg.Wait()
	// Pulls are counted when they start inside the window, so the rate is
	// over the window, not over the clients' trailing sleeps after it.
	elapsed := min(time.Since(ph.measureFrom), ph.end.Sub(ph.measureFrom))
	pulls, perr := mergeTallies(pt)
	pushes, werr := mergeTallies(wt)
	var prop Hist
	early := 0
	acc.mu.Lock()
	for i := range seen {
		for _, ev := range seen[i] {
			at, ok := acc.at[ev.seq]
			if !ok || !ph.measuring(at) {
				continue // pushed before the window, or its answer never arrived
			}
			d := ev.at.Sub(at)
			if d < 0 {
				early++
				d = 0
			}
			prop.Record(d)
		}
	}
	acc.mu.Unlock()
	r.add("pulls/s", "1/s", float64(pulls.ok)/elapsed.Seconds())
	r.add("pull p50", "ms", ms(pulls.lat.Quantile(0.5)))
	r.add("pull p99", "ms", ms(pulls.lat.Quantile(0.99)))
	r.add("propagation p50", "ms", ms(prop.Quantile(0.5)))
	r.add("propagation p99", "ms", ms(prop.Quantile(0.99)))
	r.add("commits/s", "1/s", float64(pushes.ok)/elapsed.Seconds())
	r.add("push p99", "ms", ms(pushes.lat.Quantile(0.99)))
	r.add("deliveries", "", float64(prop.Count()))
	r.add("errors", "", float64(pulls.errs+pushes.errs))
	if early > 0 {
		r.Notes = append(r.Notes, "some commits were visible to a pull before their push answer arrived; counted as 0 ms")
	}
	for _, e := range []error{perr, werr} {
		if e != nil {
			r.Notes = append(r.Notes, "first error: "+e.Error())
		}
	}
	return r, nil
}

// runPull runs the pull workload.
func runPull(ctx context.Context, cfg *Config, store string) ([]Result, error) {
	r, err := pullCase(ctx, cfg, store)
	if err != nil {
		return nil, err
	}
	return []Result{r}, nil
}
