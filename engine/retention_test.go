package engine_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/retention"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/segstore"
)

func keepNewest(n int64) storage.RetentionPolicy {
	return storage.RetentionPolicy{ActiveWindowMs: 0, AgeForceMs: (3650 * 24 * time.Hour).Milliseconds(), MinRetainedCommits: n}
}

func TestPruneDryRunAndValidation(t *testing.T) {
	st := memory.New()
	f := newFixture(t, st)
	a := f.client("alice", "ca")
	for i := range 6 {
		a.push(fmt.Sprint("c", i), upsert("tasks", fmt.Sprint("t", i), f.row(fmt.Sprint("t", i), "P", "x"), nil))
	}
	ctx := context.Background()
	r, err := f.eng.Retention().Prune(ctx, "p1", keepNewest(2), true)
	// A dry run counts what the run would delete and moves nothing.
	if err != nil || r.Plan.Target != 4 || r.Commits != 4 || r.Changes != 4 || r.IdempotencyRecords != 4 || r.HorizonAfter != 0 {
		t.Fatalf("dry run: %+v, %v", r, err)
	}
	if info, _ := st.ReadPartition(ctx, "p1"); info.HorizonSeq != 0 {
		t.Fatalf("a dry run moved the horizon to %d", info.HorizonSeq)
	}
	if _, err := f.eng.Retention().Prune(ctx, "p1", storage.RetentionPolicy{MinRetainedCommits: -1}, false); err == nil {
		t.Fatal("a negative limit was accepted")
	}
	if _, err := f.eng.Retention().Prune(ctx, "", keepNewest(2), false); err == nil {
		t.Fatal("an empty partition name was accepted")
	}
	if p := f.eng.Retention().Policy(); p != storage.DefaultRetentionPolicy() {
		t.Fatalf("the default policy is %+v, want the floors", p)
	}
}

// The maintenance loop prunes on its own, on the engine's clock, and
// stops with Close.
func TestMaintenanceLoop(t *testing.T) {
	st := memory.New()
	clock := time.UnixMilli(1_700_000_000_000)
	f := newFixture(t, st, func(c *engine.Config) {
		c.Now = func() time.Time { return clock }
		c.Retention = retention.Options{Policy: keepNewest(2), Interval: 5 * time.Millisecond, BatchCommits: 1}
	})
	a := f.client("alice", "ca")
	for i := range 10 {
		a.push(fmt.Sprint("c", i), upsert("tasks", fmt.Sprint("t", i), f.row(fmt.Sprint("t", i), "P", "x"), nil))
	}
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := st.ReadPartition(ctx, "p1")
		if err != nil {
			t.Fatal(err)
		}
		if info.HorizonSeq == 8 {
			break
		}
		if info.HorizonSeq > 8 || time.Now().After(deadline) {
			t.Fatalf("the maintenance loop left the horizon at %d, want 8", info.HorizonSeq)
		}
		time.Sleep(5 * time.Millisecond) // waiting for the loop's own ticker
	}
	f.eng.Close() // returns only once the loop's goroutine has ended
	s := f.eng.Metrics().Retention
	if s.Passes < 1 || s.LastPassMs != clock.UnixMilli() || s.Commits != 8 || s.Horizons["p1"] != 8 {
		t.Fatalf("retention stats: %+v", s)
	}
}

// countingSegments counts the sweeps of a segment store.
type countingSegments struct {
	segstore.Store
	sweeps atomic.Int32
}

func (c *countingSegments) Sweep(ctx context.Context, nowMs, forgetBeforeMs int64) (int, error) {
	c.sweeps.Add(1)
	return c.Store.Sweep(ctx, nowMs, forgetBeforeMs)
}

// A maintenance pass sweeps expired segments (a dry run does not).
func TestMaintenancePassSweepsSegments(t *testing.T) {
	segs := &countingSegments{Store: segstore.NewMemory()}
	f := newFixture(t, memory.New(), func(c *engine.Config) { c.Segments.Store = segs })
	ctx := context.Background()
	if _, err := f.eng.Retention().MaintenancePass(ctx, true); err != nil || segs.sweeps.Load() != 0 {
		t.Fatalf("dry run: %v, %d sweeps", err, segs.sweeps.Load())
	}
	if _, err := f.eng.Retention().MaintenancePass(ctx, false); err != nil || segs.sweeps.Load() != 1 {
		t.Fatalf("pass: %v, %d sweeps, want 1", err, segs.sweeps.Load())
	}
}
