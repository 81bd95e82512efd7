package retention_test

import (
	"strconv"

	"github.com/synclane/synclane/engine/retention"
)

// Pruning and epoch rotation (SPEC §4.6): a run plans at one log epoch and
// every batch verifies it, so a restore (or rotation) between two batches
// stops the old plan before it deletes anything of the restored log; the
// run then plans again from the new log.
func init() {
	retentionEngineTests = append(retentionEngineTests, epochEngineTests...)
}

var epochEngineTests = []test{
	{name: "RestoreBetweenBatchesStopsThePlan", fn: func(e *env) {
		x := e.engine(batchesOf(4))
		defer x.close()
		w := x.client("writer")
		for i := range 3 {
			w.push("c"+strconv.Itoa(i), w.note("n"+strconv.Itoa(i), "v"))
		}
		if err := x.eng.Retention().Capture(x.ctx, "p"); err != nil {
			x.t.Fatal(err)
		}
		for i := 3; i < 30; i++ {
			w.push("c"+strconv.Itoa(i), w.note("n"+strconv.Itoa(i), "v"))
		}
		// Keeping the newest 5 of 30 targets 25. After the first batch
		// (through 4) the partition is restored to its 3 commits; a batch
		// of the old plan would prune all 3 (below the newest 5 kept).
		var batches []retention.BatchProgress
		var restored string
		run, err := x.eng.Retention().PruneWith(x.ctx, "p", keepNewest(5), retention.PassOptions{OnBatch: func(b retention.BatchProgress) {
			batches = append(batches, b)
			if len(batches) == 1 {
				ep, err := x.eng.Retention().Restore(x.ctx, "p")
				if err != nil {
					x.t.Errorf("Restore between batches: %v", err)
				}
				restored = ep
			}
		}})
		if err != nil {
			x.t.Fatalf("PruneWith across a restore: %v", err)
		}
		if len(batches) != 1 || batches[0].HorizonSeq != 4 {
			x.t.Fatalf("batches: %+v; want only the one before the restore", batches)
		}
		if run.Plan.Partition.LogEpoch != restored || run.Plan.Target != 0 || run.HorizonAfter != 0 || run.Commits != 4 {
			x.t.Fatalf("run: %+v; want it planned again at the restored epoch %q (nothing to prune), 4 commits deleted before", run, restored)
		}
		if info := e.readPartition("p"); info.LogEpoch != restored || info.HorizonSeq != 0 || info.MaxCommitSeq != 3 {
			x.t.Fatalf("registry after the run: %+v", info)
		}
		// The restored log is whole: a client of the new epoch reads it from 0.
		r := x.client("reader")
		wantIncremental(x, "the restored log from cursor 0", r.pull(wideLimits, notesSub(0)), 0, 3)
	}},
}
