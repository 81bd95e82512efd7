package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"
)

// wakePartitions wakes each named partition once: an epoch handshake and
// one incremental pull with a subscription (so the partition has a client
// record), from a client that is dropped afterwards.
func wakePartitions(ctx context.Context, t *Target, names []string) error {
	const g = 16
	errs := make([]error, g)
	runWorkers(g, func(w int) {
		for i := w; i < len(names) && errs[w] == nil; i += g {
			c := t.Client("idler", names[i], "idle-client")
			_, errs[w] = bootstrapCursor(ctx, c)
		}
	})
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// waitPassivated waits until the engine has no live partition actor.
func waitPassivated(ctx context.Context, t *Target, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for t.Engine.ActorStats().LiveActors > 0 {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%d partition actors still live after %s", t.Engine.ActorStats().LiveActors, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Poisoned actors finish stopping (worker Stop, deregistration) on
	// their own goroutines; let them.
	time.Sleep(200 * time.Millisecond)
	return nil
}

// idleCase wakes P partitions once and measures the heap and goroutines
// they hold while idle and after passivation, against a baseline taken
// after a warm-up wave of P other partitions was woken and passivated.
// The warm-up wave is as large as the measured one so that the one-time
// high-water growth it causes (the Go runtime's free list of goroutine
// descriptors, which is never returned, and map capacities in protoactor's
// process registry, which never shrink) is in the baseline: the figures
// are what each additional partition costs. That one-time growth is
// reported separately ("first wave").
func idleCase(ctx context.Context, cfg *Config, store string) (Result, error) {
	p := cfg.IdlePartitions
	r := Result{Workload: "idle", Case: fmt.Sprintf("%d partitions woken once, idle timeout %s", p, cfg.IdleTimeout),
		Store: store, Mode: string(cfg.Mode), Params: map[string]any{"partitions": p, "idleTimeout": cfg.IdleTimeout.String()}}
	t, err := openTarget(ctx, cfg, store, EngineOpts{IdleTimeout: cfg.IdleTimeout})
	if err != nil {
		return r, err
	}
	defer t.Close()
	limit := 4*cfg.IdleTimeout + 10*time.Second
	hw0 := heapAfterGC()
	warm := make([]string, p)
	for i := range warm {
		warm[i] = "warm-" + strconv.Itoa(i)
	}
	if err := wakePartitions(ctx, t, warm); err != nil {
		return r, fmt.Errorf("warm-up: %w", err)
	}
	if err := waitPassivated(ctx, t, limit); err != nil {
		return r, err
	}
	h0, g0 := heapAfterGC(), runtime.NumGoroutine()
	firstWave := float64(int64(h0)-int64(hw0)) / float64(p)
	names := make([]string, p)
	for i := range names {
		names[i] = "idle-" + strconv.Itoa(i)
	}
	start := time.Now()
	if err := wakePartitions(ctx, t, names); err != nil {
		return r, fmt.Errorf("wake: %w", err)
	}
	wake := time.Since(start)
	h1, g1 := heapAfterGC(), runtime.NumGoroutine()
	live := t.Engine.ActorStats().LiveActors
	if live != p {
		return r, fmt.Errorf("%d of %d partitions live after waking them in %s; raise --idle-timeout", live, p, wake.Round(time.Millisecond))
	}
	if err := waitPassivated(ctx, t, limit); err != nil {
		return r, err
	}
	h2, g2 := heapAfterGC(), runtime.NumGoroutine()
	per := func(d int64) float64 { return float64(d) / float64(p) }
	r.add("heap/live partition", "B", per(int64(h1)-int64(h0)))
	r.add("heap/passivated partition", "B", per(int64(h2)-int64(h0)))
	r.add("heap/passivated partition, first wave", "B", firstWave)
	r.add("goroutines/live partition", "", per(int64(g1-g0)))
	r.add("goroutines/passivated partition", "", per(int64(g2-g0)))
	r.add("goroutines idle (total)", "", float64(g1))
	r.add("goroutines passivated (total)", "", float64(g2))
	r.add("wake time", "ms", ms(wake))
	return r, nil
}

// runIdle runs the idle workload; it needs the engine in this process.
func runIdle(ctx context.Context, cfg *Config, store string) ([]Result, error) {
	if cfg.Mode != ModeInproc {
		if cfg.Quiet {
			return nil, nil
		}
		fmt.Fprintf(os.Stderr, "bench: idle measures the engine's own memory and runs with --inproc only; skipped in mode %s\n", cfg.Mode)
		return nil, nil
	}
	r, err := idleCase(ctx, cfg, store)
	if err != nil {
		return nil, err
	}
	return []Result{r}, nil
}
