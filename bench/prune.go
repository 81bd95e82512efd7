package main

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/synclane/synclane/engine/retention"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// seedBatch is how many commits one seeding transaction appends.
const seedBatch = 10_000

// runPrune measures pushes while the partition's log is pruned: it seeds
// --prune-commits commits (one todo upsert each, with its idempotency
// record, written straight to storage), measures W writers pushing to the
// same partition for --duration, then prunes all but the newest 1,000
// commits (engine.Prune, batches of --prune-batch) in windows of
// --prune-window while the writers keep pushing, each window followed by
// one of pushes alone, and compares push latency during pruning with the
// pushes alone of the same run.
func runPrune(ctx context.Context, cfg *Config, store string) ([]Result, error) {
	if cfg.Mode == ModeURL {
		return nil, nil // pruning is driven in-process
	}
	r := Result{Workload: "prune", Case: fmt.Sprintf("%d commits seeded, all but the newest 1,000 pruned while %d writers push to the same partition", cfg.PruneCommits, cfg.Writers),
		Store: store, Mode: string(cfg.Mode),
		Params: map[string]any{"commits": cfg.PruneCommits, "writers": cfg.Writers, "batch": cfg.PruneBatch, "duration": cfg.Duration.String(), "window": cfg.PruneWindow.String()}}
	t, err := openTarget(ctx, cfg, store, EngineOpts{PruneBatch: cfg.PruneBatch})
	if err != nil {
		return nil, err
	}
	defer t.Close()
	r.Store = t.Store
	part := t.Prefix + "push"
	start := time.Now()
	if err := seedLog(ctx, t.Engine.Backend().Log, part, cfg.PruneCommits); err != nil {
		return nil, fmt.Errorf("seed: %w", err)
	}
	r.add("seed", "s", time.Since(start).Seconds())
	clients := make([]*Client, cfg.Writers)
	for i := range clients {
		clients[i] = t.Client("writer-"+strconv.Itoa(i), "push", "w"+strconv.Itoa(i))
		if err := clients[i].Handshake(ctx); err != nil {
			return nil, fmt.Errorf("handshake: %w", err)
		}
	}
	// Pushes alone, then windows of pushes during pruning alternating
	// with windows of pushes alone until the log is pruned: both
	// histograms see the same drift of the machine's load.
	base, err := pushPhase(ctx, cfg, clients, "base", newPhase(cfg.Warmup, cfg.Duration, cfg.MaxOps), nil)
	if err != nil {
		return nil, err
	}
	// The target is fixed when pruning starts (all but the newest 1,000
	// commits then); each window's policy keeps everything pushed since.
	info, err := t.Engine.Backend().Log.ReadPartition(ctx, part)
	if err != nil {
		return nil, err
	}
	target := info.MaxCommitSeq - storage.DefaultMinRetainedCommits
	var during phaseResult
	var total retention.PruneReport
	for round := 0; ; round++ {
		var pruning atomic.Bool
		pruning.Store(true)
		var rep retention.PruneReport
		var perr error
		pruned := make(chan struct{})
		info, err := t.Engine.Backend().Log.ReadPartition(ctx, part)
		if err != nil {
			return nil, err
		}
		policy := storage.RetentionPolicy{ActiveWindowMs: 0, AgeForceMs: storage.DefaultAgeForce.Milliseconds(), MinRetainedCommits: info.MaxCommitSeq - target}
		pctx, cancel := context.WithTimeout(ctx, cfg.PruneWindow)
		go func() {
			defer close(pruned)
			rep, perr = t.Engine.Retention().Prune(pctx, part, policy, false)
			pruning.Store(false)
		}()
		d, err := pushPhase(ctx, cfg, clients, "p"+strconv.Itoa(round)+"-", newPhase(0, cfg.Timeout, 0), &pruning)
		<-pruned
		cancel()
		if err != nil {
			return nil, err
		}
		during.add(d)
		total.Commits += rep.Commits
		total.Batches += rep.Batches
		total.BatchTime += rep.BatchTime
		total.Took += rep.Took
		if perr == nil {
			break // the log is pruned
		}
		if pctx.Err() == nil || ctx.Err() != nil {
			return nil, fmt.Errorf("prune: %w", perr)
		}
		b, err := pushPhase(ctx, cfg, clients, "b"+strconv.Itoa(round)+"-", newPhase(0, cfg.PruneWindow, cfg.MaxOps), nil)
		if err != nil {
			return nil, err
		}
		base.add(b)
	}
	r.add("pruned commits", "", float64(total.Commits))
	r.add("prune time", "s", total.Took.Seconds())
	r.add("pruned commits/s", "1/s", float64(total.Commits)/total.Took.Seconds())
	r.add("batches", "", float64(total.Batches))
	if total.Batches > 0 {
		r.add("batch transaction", "ms", ms(total.BatchTime/time.Duration(total.Batches)))
	}
	for _, p := range []struct {
		name string
		t    tally
		d    time.Duration
	}{{"without pruning", base.t, base.d}, {"during pruning", during.t, during.d}} {
		r.add("pushes/s "+p.name, "1/s", float64(p.t.ok)/p.d.Seconds())
		r.add("p50 "+p.name, "ms", ms(p.t.lat.Quantile(0.50)))
		r.add("p99 "+p.name, "ms", ms(p.t.lat.Quantile(0.99)))
		r.add("max "+p.name, "ms", ms(p.t.lat.Max()))
	}
	if b := base.t.lat.Quantile(0.99); b > 0 {
		r.add("p99 during / without", "×", float64(during.t.lat.Quantile(0.99))/float64(b))
	}
	r.add("errors", "", float64(base.t.errs+during.t.errs))
	if base.err != nil || during.err != nil {
		r.Notes = append(r.Notes, fmt.Sprintf("first error: %v %v", base.err, during.err))
	}
	return []Result{r}, nil
}

type phaseResult struct {
	t   tally
	d   time.Duration
	err error
}

// add accumulates another window.
func (p *phaseResult) add(o phaseResult) {
	p.t.lat.Merge(&o.t.lat)
	p.t.ok += o.t.ok
	p.t.errs += o.t.errs
	p.d += o.d
	if p.err == nil {
		p.err = o.err
	}
}

// pushPhase runs the writers, one single-upsert commit per request, until
// ph ends or, when while is set, until it turns false; it measures pushes
// started after the warm-up.
func pushPhase(ctx context.Context, cfg *Config, clients []*Client, tag string, ph *Phase, while *atomic.Bool) (phaseResult, error) {
	tallies := make([]tally, len(clients))
	runWorkers(len(clients), func(w int) {
		c, tl := clients[w], &tallies[w]
		list := listID(w)
		for n := int64(0); ph.next() && ctx.Err() == nil && (while == nil || while.Load()); n++ {
			id := "w" + strconv.Itoa(w) + "-" + strconv.Itoa(int(n%rowsPerWriter))
			t0 := time.Now()
			if _, err := pushOne(ctx, c, tag+strconv.FormatInt(n, 10), todoUpsert(id, list, n)); err != nil {
				tl.fail(err)
				continue
			}
			if ph.measuring(t0) {
				tl.lat.Record(time.Since(t0))
				tl.ok++
			}
		}
	})
	tot, err := mergeTallies(tallies)
	return phaseResult{t: tot, d: time.Since(ph.measureFrom), err: err}, ctx.Err()
}

// seedLog appends n commits to partition straight through storage, in
// transactions of seedBatch: one todo upsert each (rows of 256 ids per
// list, like the push workload's), with its applied idempotency record.
func seedLog(ctx context.Context, st storage.Log, partition string, n int) error {
	now := time.Now().UnixMilli()
	for done := 0; done < n; {
		tx, err := st.BeginPush(ctx, partition)
		if err != nil {
			return err
		}
		for i := 0; i < seedBatch && done < n; i, done = i+1, done+1 {
			seq := tx.Partition().MaxCommitSeq + 1
			list := listID(done)
			id := "seed-" + strconv.Itoa(done%(numLists*rowsPerWriter))
			row, err := todoCodec.Append(nil, todoValues(id, list, int64(done))) // a COMMIT change carries the full row
			if err != nil {
				_ = tx.Rollback(ctx)
				return err
			}
			ccid := "s" + strconv.Itoa(done)
			c := storage.CommitRecord{Seq: seq, CreatedAtMs: now, ActorID: "seeder", ClientID: "seeder", ClientCommitID: ccid,
				Changes: []storage.ChangeRecord{{Table: "todos", RowID: id, Op: ssp2.OpUpsert, RowVersion: seq,
					Scopes: map[string]string{"list_id": list}, Row: row}}}
			if err := tx.AppendCommit(ctx, c); err != nil {
				_ = tx.Rollback(ctx)
				return err
			}
			if err := tx.PutIdempotency(ctx, storage.IdempotencyRecord{ClientID: "seeder", ClientCommitID: ccid,
				Status: ssp2.CommitApplied, CommitSeq: seq, Result: []byte(`{"n":1}`)}); err != nil {
				_ = tx.Rollback(ctx)
				return err
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
	}
	return nil
}
