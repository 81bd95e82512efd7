package retention_test

import (
	"context"
	"errors"
	"strconv"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/retention"
	"github.com/synclane/synclane/storage"
)

// Honest maintenance output: a dry run counts what the run deletes,
// progress is reported per committed batch, a stopped run reports the
// batches it committed, and a pass lists what it kept and why.
func init() {
	retentionEngineTests = append(retentionEngineTests, progressEngineTests...)
}

func batchesOf(n int) func(*engine.Config) {
	return func(c *engine.Config) { c.Retention.BatchCommits = n }
}

func policyOf(p storage.RetentionPolicy) func(*engine.Config) {
	return func(c *engine.Config) { c.Retention.Policy = p }
}

var progressEngineTests = []test{
	{name: "DryRunCountsEqualTheRun", fn: func(e *env) {
		x := e.engine(batchesOf(4))
		defer x.close()
		w := x.client("writer")
		for i := range 20 {
			w.push("c"+strconv.Itoa(i), w.note("n"+strconv.Itoa(i), "v"), w.note("m"+strconv.Itoa(i), "v"))
		}
		var dryBatches []retention.BatchProgress
		dry, err := x.eng.Retention().PruneWith(x.ctx, "p", keepNewest(5), retention.PassOptions{DryRun: true,
			OnBatch: func(b retention.BatchProgress) { dryBatches = append(dryBatches, b) }})
		if err != nil {
			x.t.Fatal(err)
		}
		if dry.Commits != 15 || dry.Changes != 30 || dry.IdempotencyRecords != 15 || dry.HorizonAfter != 0 || dry.Plan.Target != 15 {
			x.t.Fatalf("dry run: %+v, want 15 commits, 30 changes, 15 idempotency records, horizon left at 0", dry)
		}
		if len(dryBatches) != 1 || !dryBatches[0].DryRun || dryBatches[0].Commits != 15 {
			x.t.Fatalf("dry-run progress: %+v", dryBatches)
		}
		if got := e.readPartition("p"); got.HorizonSeq != 0 {
			x.t.Fatalf("a dry run moved the horizon to %d", got.HorizonSeq)
		}
		if st := x.eng.Metrics().Retention; st.Commits != 0 {
			x.t.Fatalf("a dry run counted %d pruned commits in the metrics", st.Commits)
		}
		var batches []retention.BatchProgress
		run, err := x.eng.Retention().PruneWith(x.ctx, "p", keepNewest(5), retention.PassOptions{
			OnBatch: func(b retention.BatchProgress) { batches = append(batches, b) }})
		if err != nil {
			x.t.Fatal(err)
		}
		if run.Commits != dry.Commits || run.Changes != dry.Changes || run.IdempotencyRecords != dry.IdempotencyRecords || run.HorizonAfter != dry.Plan.Target {
			x.t.Fatalf("run %+v differs from its dry run %+v", run, dry)
		}
		var sum storage.PruneResult
		for i, b := range batches {
			if b.Batch != i+1 || b.Partition != "p" || b.Target != 15 || b.HorizonSeq != min(int64(4*(i+1)), 15) {
				x.t.Fatalf("batch %d progress: %+v", i, b)
			}
			sum.Add(storage.PruneResult{HorizonSeq: b.HorizonSeq, Commits: b.Commits, Changes: b.Changes, IdempotencyRecords: b.IdempotencyRecords})
		}
		if len(batches) != 4 || sum.Commits != run.Commits || sum.Changes != run.Changes || sum.IdempotencyRecords != run.IdempotencyRecords {
			x.t.Fatalf("%d progress reports summing to %+v, want 4 summing to the run %+v", len(batches), sum, run)
		}
	}},
	{name: "StoppedRunReportsCommittedBatches", fn: func(e *env) {
		x := e.engine(batchesOf(3), policyOf(keepNewest(5)))
		defer x.close()
		w := x.client("writer")
		for i := range 20 {
			w.push("c"+strconv.Itoa(i), w.note("n"+strconv.Itoa(i), "v"))
		}
		ctx, cancel := context.WithCancel(x.ctx)
		defer cancel()
		// Stop (as SIGINT does) once the second batch has committed: the
		// run ends there and reports both batches.
		rep, err := x.eng.Retention().MaintenancePassWith(ctx, retention.PassOptions{OnBatch: func(b retention.BatchProgress) {
			if b.Batch == 2 {
				cancel()
			}
		}})
		if !errors.Is(err, context.Canceled) {
			x.t.Fatalf("stopped pass: err %v, want context.Canceled", err)
		}
		if len(rep.Pruned) != 1 || rep.Pruned[0].Commits != 6 || rep.Pruned[0].HorizonAfter != 6 || rep.Pruned[0].Batches != 2 || rep.Commits() != 6 {
			x.t.Fatalf("stopped pass report: %+v, want the 2 committed batches (6 commits)", rep)
		}
		if got := e.readPartition("p"); got.HorizonSeq != 6 {
			x.t.Fatalf("horizon after the stop: %d, want 6 (what the report says)", got.HorizonSeq)
		}
		if st := x.eng.Metrics().Retention; st.Commits != 6 {
			x.t.Fatalf("metrics after the stop: %d commits, want 6", st.Commits)
		}
	}},
	{name: "PassListsKeptPartitions", fn: func(e *env) {
		x := e.engine(policyOf(keepNewest(50)))
		defer x.close()
		w := x.client("writer")
		for i := range 3 {
			w.push("c"+strconv.Itoa(i), w.note("n"+strconv.Itoa(i), "v"))
		}
		for _, dry := range []bool{true, false} {
			rep, err := x.eng.Retention().MaintenancePassWith(x.ctx, retention.PassOptions{DryRun: dry})
			if err != nil {
				x.t.Fatal(err)
			}
			if len(rep.Pruned) != 0 || len(rep.Kept) != 1 || rep.Kept[0].Partition != "p" || rep.Kept[0].Plan.Binding != storage.BindingMinRetained ||
				rep.Kept[0].Plan.Partition.MaxCommitSeq != 3 {
				x.t.Fatalf("pass (dry run %v) with 3 of 50 retained commits: %+v, want p kept by %s", dry, rep, storage.BindingMinRetained)
			}
		}
	}},
}
