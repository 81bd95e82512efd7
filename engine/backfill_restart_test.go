package engine_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// TestBackfillResumeAfterPruneRedoesTheProjection: a backfill that resumes
// from a stored watermark whose later source history was pruned must not
// replay only what is left: it redoes a full pass, so a source change in
// the pruned range is projected before the checkpoint activates.
func TestBackfillResumeAfterPruneRedoesTheProjection(t *testing.T) {
	f := newBackfillFixture(t, filepath.Join(t.TempDir(), "db.sqlite"))
	f.seedAndCrashBeforeActivation(12)
	f.store.before = nil
	// Source seqs 1-12, projection batches 13-14, watermark 12.
	f.push("rename-a", f.todo("a-todo", "renamed")) // 15
	f.push("new-y", f.todo("y-todo", "y"))          // 16
	f.push("new-z", f.todo("z-todo", "z"))          // 17
	rep, err := f.eng.Retention().Prune(context.Background(), "p1", storage.RetentionPolicy{ActiveWindowMs: 1, AgeForceMs: 0, MinRetainedCommits: 2}, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.HorizonAfter < 15 {
		t.Fatalf("the prune left the horizon at %d; the test needs it past the rename (15)", rep.HorizonAfter)
	}
	out, err := f.eng.Backfill().Run(context.Background(), f.spec())
	if err != nil {
		t.Fatal(err)
	}
	idx := f.index()
	if out.Outcome != storage.Activated || idx["a-todo"] != "RENAMED" || idx["z-todo"] != "Z" || len(idx) != 14 {
		t.Fatalf("outcome %s, projection a-todo %q z-todo %q (%d rows); want activated, RENAMED, Z, 14 rows", out.Outcome, idx["a-todo"], idx["z-todo"], len(idx))
	}
}

// TestBackfillRerunDropsProjectionsOfDeletedSources: a full pass that
// restarts after an interrupted one must not keep the projection of a
// source row deleted in between.
func TestBackfillRerunDropsProjectionsOfDeletedSources(t *testing.T) {
	f := newBackfillFixture(t, filepath.Join(t.TempDir(), "db.sqlite"))
	for i := range 25 {
		id := string(rune('a'+i)) + "-todo"
		f.push("c"+id, f.todo(id, "x"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	begins := 0
	f.store.beforeBegin = func() {
		if begins++; begins == 2 { // the process dies after the first batch committed
			cancel()
		}
	}
	if _, err := f.eng.Backfill().Run(ctx, f.spec()); err == nil {
		t.Fatal("the first run was not interrupted")
	}
	f.store.beforeBegin = nil
	if idx := f.index(); idx["b-todo"] == "" {
		t.Fatalf("the first batch did not project b-todo: %v", idx)
	}
	f.push("del-b", ssp2.Operation{Table: "todos", RowID: "b-todo", Op: ssp2.OpDelete})
	rep, err := f.eng.Backfill().Run(context.Background(), f.spec())
	if err != nil {
		t.Fatal(err)
	}
	idx := f.index()
	if v, ok := idx["b-todo"]; rep.Outcome != storage.Activated || ok || len(idx) != 24 {
		t.Fatalf("outcome %s, projection of the deleted b-todo %q (present %v), %d rows; want activated without it, 24 rows", rep.Outcome, v, ok, len(idx))
	}
}
