package storagetest

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// Retention at the storage level: PruneBatch, the inputs a plan reads and
// the plan's limits, the maintenance lock and partition snapshots. The
// protocol behaviour built on them (resets, bootstrap restarts, pruning
// under load) is in retention_engine_cases.go.

// logCommit appends, in its own transaction, a commit with one items
// change in project p1 and one notes change in project pN (N = seq mod 3)
// created at createdAt, with its applied idempotency record
// (client "w", commit id "k<seq>"); it returns the seq.
func (e *env) logCommit(partition string, createdAt int64) int64 {
	e.t.Helper()
	var seq int64
	e.push(partition, func(tx storage.PushTx) {
		seq = tx.Partition().MaxCommitSeq + 1
		id := strconv.FormatInt(seq, 10)
		c := storage.CommitRecord{Seq: seq, CreatedAtMs: createdAt, ActorID: "actor-" + id, ClientID: "w", ClientCommitID: "k" + id,
			Changes: []storage.ChangeRecord{
				upsert("items", "i"+id, 1, sc("project", "p1", "owner", "7")),
				upsert("notes", "n"+id, 1, sc("project", "p"+strconv.FormatInt(seq%3, 10))),
			}}
		if err := tx.AppendCommit(e.ctx, c); err != nil {
			e.t.Fatalf("AppendCommit(%d): %v", seq, err)
		}
		if err := tx.PutIdempotency(e.ctx, storage.IdempotencyRecord{ClientID: "w", ClientCommitID: "k" + id,
			Status: ssp2.CommitApplied, CommitSeq: seq, Result: []byte(`{"n":2}`)}); err != nil {
			e.t.Fatalf("PutIdempotency(%d): %v", seq, err)
		}
	})
	return seq
}

// rejectAt stores a rejected idempotency record (client "w", commit id
// key) in a transaction that appends nothing, so its log position is the
// partition's max commit seq at that moment.
func (e *env) rejectAt(partition, key string) {
	e.t.Helper()
	e.push(partition, func(tx storage.PushTx) {
		if err := tx.PutIdempotency(e.ctx, storage.IdempotencyRecord{ClientID: "w", ClientCommitID: key,
			Status: ssp2.CommitRejected, Result: []byte("rejected")}); err != nil {
			e.t.Fatalf("PutIdempotency(%s): %v", key, err)
		}
	})
}

func (e *env) prune(partition string, through int64, maxCommits int) storage.PruneResult {
	e.t.Helper()
	req := storage.PruneRequest{LogEpoch: e.readPartition(partition).LogEpoch, ThroughSeq: through, MaxCommits: maxCommits}
	r, err := e.b.Retention.PruneBatch(e.ctx, partition, req)
	if err != nil {
		e.t.Fatalf("PruneBatch(%q, %d, %d): %v", partition, through, maxCommits, err)
	}
	return r
}

func (e *env) hasIdem(partition, key string) bool {
	e.t.Helper()
	r, err := e.b.Log.LookupIdempotency(e.ctx, partition, "w", key)
	if err != nil {
		e.t.Fatalf("LookupIdempotency(%s): %v", key, err)
	}
	return r != nil
}

// wantLogFrom checks that exactly the commits (from, max] of logCommit's
// shape remain: a scan of items from 0 and a scoped scan of notes return
// them, nothing at or below from.
func (e *env) wantLogFrom(partition string, from, maxSeq int64) {
	e.t.Helper()
	got := e.scanChanges(partition, storage.ChangeQuery{Table: "items", Scopes: map[string][]string{"project": {"p1"}}, UpToSeq: maxSeq})
	var seqs []int64
	for _, c := range got.Commits {
		seqs = append(seqs, c.Seq)
	}
	var want []int64
	for s := from + 1; s <= maxSeq; s++ {
		want = append(want, s)
	}
	if fmt.Sprint(seqs) != fmt.Sprint(want) {
		e.t.Fatalf("items commits after pruning through %d: %v, want %v", from, seqs, want)
	}
	notes := e.scanChanges(partition, storage.ChangeQuery{Table: "notes", Scopes: map[string][]string{"project": {"p0", "p1", "p2"}}, UpToSeq: maxSeq})
	if len(notes.Commits) != len(want) || (len(want) > 0 && notes.Commits[0].Seq != want[0]) {
		e.t.Fatalf("notes commits after pruning through %d: %s, want seqs %v", from, fmtCommits(notes.Commits), want)
	}
}

func (e *env) plan(partition string, p storage.RetentionPolicy, nowMs int64) storage.RetentionPlan {
	e.t.Helper()
	pl, err := storage.PlanRetention(e.ctx, e.b.Retention, partition, p, nowMs)
	if err != nil {
		e.t.Fatalf("PlanRetention(%+v): %v", p, err)
	}
	return pl
}

func wantPlan(e *env, what string, got storage.RetentionPlan, target int64, binding string) {
	e.t.Helper()
	if got.Target != target || got.Binding != binding {
		e.t.Fatalf("%s: plan target %d binding %q, want %d %q (inputs %+v)", what, got.Target, got.Binding, target, binding, got.RetentionInputs)
	}
}

// base is the creation time of the first commit in the plan cases.
const base = int64(1_700_000_000_000)

var retentionTests = []test{
	{name: "PruneBatch", fn: func(e *env) {
		if r := e.prune("never", 10, 10); r != (storage.PruneResult{}) {
			e.t.Fatalf("PruneBatch of a never-created partition: %+v", r)
		}
		e.rejectAt("p", "r0") // log position 0
		for range 4 {
			e.logCommit("p", base)
		}
		e.rejectAt("p", "r4") // log position 4
		for range 6 {
			e.logCommit("p", base)
		}
		e.logCommit("other", base)
		if r := e.prune("p", 10, 0); r.HorizonSeq != 0 || r.Commits != 0 {
			e.t.Fatalf("maxCommits 0: %+v, want nothing pruned", r)
		}
		r := e.prune("p", 7, 3)
		want := storage.PruneResult{HorizonSeq: 3, Commits: 3, Changes: 6, IdempotencyRecords: 4} // k1..k3 and r0
		if r != want {
			e.t.Fatalf("first batch: %+v, want %+v", r, want)
		}
		if e.hasIdem("p", "r0") || e.hasIdem("p", "k3") || !e.hasIdem("p", "k4") || !e.hasIdem("p", "r4") {
			e.t.Fatal("after pruning through 3: want r0 and k1..k3 gone, k4 and r4 kept")
		}
		e.wantLogFrom("p", 3, 10)
		r = e.prune("p", 7, 3)
		want = storage.PruneResult{PreviousHorizonSeq: 3, HorizonSeq: 6, Commits: 3, Changes: 6, IdempotencyRecords: 4} // k4..k6 and r4
		if r != want {
			e.t.Fatalf("second batch: %+v, want %+v", r, want)
		}
		if r := e.prune("p", 7, 3); r.HorizonSeq != 7 || r.Commits != 1 {
			e.t.Fatalf("last batch stops at throughSeq 7: %+v", r)
		}
		if r := e.prune("p", 5, 3); r.HorizonSeq != 7 || r.Commits != 0 {
			e.t.Fatalf("a lower throughSeq never lowers the horizon: %+v", r)
		}
		e.wantLogFrom("p", 7, 10)
		for k := 1; k <= 10; k++ {
			if got, want := e.hasIdem("p", "k"+strconv.Itoa(k)), k > 7; got != want {
				e.t.Fatalf("idempotency record k%d present = %v, want %v", k, got, want)
			}
		}
		info := e.readPartition("p")
		if info.HorizonSeq != 7 || info.MaxCommitSeq != 10 {
			e.t.Fatalf("registry after pruning: %+v", info)
		}
		g, err := e.b.Checkpoints.ReadServeGate(e.ctx, "p", e.sch.Version)
		if err != nil || g.HorizonSeq != 7 {
			e.t.Fatalf("ReadServeGate horizon = %d (%v), want 7", g.HorizonSeq, err)
		}
		if r := e.prune("p", 100, 100); r.HorizonSeq != 10 || r.Commits != 3 {
			e.t.Fatalf("throughSeq above max stops at max: %+v", r)
		}
		e.wantLogFrom("p", 10, 10)
		if got := e.readPartition("other"); got.HorizonSeq != 0 || !e.hasIdem("other", "k1") {
			e.t.Fatalf("another partition was touched: %+v", got)
		}
		// A commit appended after pruning everything is served as usual.
		seq := e.logCommit("p", base)
		e.wantLogFrom("p", 10, seq)
	}},
	{name: "CountPrune", fn: func(e *env) {
		count := func(partition string, through int64) storage.PruneResult {
			e.t.Helper()
			r, err := e.b.Retention.CountPrune(e.ctx, partition, through)
			if err != nil {
				e.t.Fatalf("CountPrune(%q, %d): %v", partition, through, err)
			}
			return r
		}
		if r := count("never", 10); r != (storage.PruneResult{}) {
			e.t.Fatalf("CountPrune of a never-created partition: %+v", r)
		}
		e.rejectAt("p", "r0") // log position 0
		for range 4 {
			e.logCommit("p", base)
		}
		e.rejectAt("p", "r4") // log position 4
		for range 6 {
			e.logCommit("p", base)
		}
		e.rejectAt("p", "r10") // log position 10
		e.logCommit("other", base)
		// A count equals the sum of the batches that prune as far, and
		// deletes nothing.
		for _, c := range []struct {
			through int64
			want    storage.PruneResult
		}{
			{0, storage.PruneResult{}},
			{3, storage.PruneResult{HorizonSeq: 3, Commits: 3, Changes: 6, IdempotencyRecords: 4}},
			{7, storage.PruneResult{HorizonSeq: 7, Commits: 7, Changes: 14, IdempotencyRecords: 9}},
			{100, storage.PruneResult{HorizonSeq: 10, Commits: 10, Changes: 20, IdempotencyRecords: 13}},
		} {
			if r := count("p", c.through); r != c.want {
				e.t.Fatalf("CountPrune(p, %d) = %+v, want %+v", c.through, r, c.want)
			}
		}
		if info := e.readPartition("p"); info.HorizonSeq != 0 || !e.hasIdem("p", "k1") || !e.hasIdem("p", "r0") {
			e.t.Fatalf("CountPrune deleted something: %+v", info)
		}
		counted := count("p", 7)
		var pruned storage.PruneResult
		for range 5 {
			pruned.Add(e.prune("p", 7, 2))
		}
		if pruned != counted {
			e.t.Fatalf("batches through 7 deleted %+v, CountPrune said %+v", pruned, counted)
		}
		// From a raised horizon: only what is left, nothing at or below it.
		if r, want := count("p", 5), (storage.PruneResult{PreviousHorizonSeq: 7, HorizonSeq: 7}); r != want {
			e.t.Fatalf("CountPrune below the horizon = %+v, want %+v", r, want)
		}
		if r, want := count("p", 100), (storage.PruneResult{PreviousHorizonSeq: 7, HorizonSeq: 10, Commits: 3, Changes: 6, IdempotencyRecords: 4}); r != want {
			e.t.Fatalf("CountPrune of the rest = %+v, want %+v", r, want)
		}
		if r := count("other", 100); r.Commits != 1 || r.IdempotencyRecords != 1 {
			e.t.Fatalf("CountPrune of another partition = %+v", r)
		}
	}},
	{name: "ListPartitions", fn: func(e *env) {
		got, err := e.b.Retention.ListPartitions(e.ctx)
		if err != nil || len(got) != 0 {
			e.t.Fatalf("ListPartitions of an empty store: %v, %v", got, err)
		}
		e.logCommit("b", base)
		e.logCommit("b", base)
		e.touch("a")
		e.prune("b", 1, 10)
		got, err = e.b.Retention.ListPartitions(e.ctx)
		if err != nil || len(got) != 2 || got[0].Partition != "a" || got[1].Partition != "b" ||
			got[1].MaxCommitSeq != 2 || got[1].HorizonSeq != 1 || !got[0].Exists || got[0].LogEpoch == "" {
			e.t.Fatalf("ListPartitions: %+v, %v", got, err)
		}
	}},
	{name: "FirstCommitAfter", fn: func(e *env) {
		for _, at := range []int64{10, 20, 30, 20, 40} {
			e.logCommit("p", at)
		}
		for _, c := range []struct{ after, upTo, createdAfter, want int64 }{
			{0, 5, 15, 2}, {2, 5, 15, 3}, {0, 5, 40, 0}, {0, 1, 15, 0}, {3, 5, 25, 5}, {0, 5, 0, 1},
		} {
			got, err := e.b.Retention.FirstCommitAfter(e.ctx, "p", c.after, c.upTo, c.createdAfter)
			if err != nil || got != c.want {
				e.t.Fatalf("FirstCommitAfter(%d, %d, %d) = %d, %v; want %d", c.after, c.upTo, c.createdAfter, got, err, c.want)
			}
		}
		if got, err := e.b.Retention.FirstCommitAfter(e.ctx, "never", 0, 5, 0); err != nil || got != 0 {
			e.t.Fatalf("never-created partition: %d, %v", got, err)
		}
	}},
	{name: "PlanBindings", fn: func(e *env) {
		// Commits 1..10 created at base+1..base+10.
		for i := int64(1); i <= 10; i++ {
			e.logCommit("p", base+i)
		}
		now := base + 1000
		loose := storage.RetentionPolicy{ActiveWindowMs: 100_000, AgeForceMs: 100_000, MinRetainedCommits: 0}
		// No client at all: only the newest commits kept bind.
		wantPlan(e, "minRetained", e.plan("p", storage.RetentionPolicy{ActiveWindowMs: 100_000, AgeForceMs: 100_000, MinRetainedCommits: 4}, now), 6, storage.BindingMinRetained)
		wantPlan(e, "everything", e.plan("p", loose, now), 10, storage.BindingMinRetained)
		wantPlan(e, "max at most kept", e.plan("p", storage.RetentionPolicy{ActiveWindowMs: 1, AgeForceMs: 1, MinRetainedCommits: 10}, now), 0, storage.BindingMinRetained)
		if pl := e.plan("never", loose, now); pl.Target != 0 || pl.Prunable() || pl.Partition.Exists {
			e.t.Fatalf("never-created partition: %+v", pl)
		}
		// Clients: an active one at 3 binds; one seen too long ago, one
		// without a cursor and one active above it do not.
		if err := e.b.Clients.PutClient(e.ctx, "p",
			storage.ClientRecord{ClientID: "active", ActorID: "a", Cursor: 3, UpdatedAtMs: now - 10},
			storage.ClientRecord{ClientID: "ahead", ActorID: "a", Cursor: 8, UpdatedAtMs: now - 10},
			storage.ClientRecord{ClientID: "gone", ActorID: "a", Cursor: 1, UpdatedAtMs: now - 200_000},
			storage.ClientRecord{ClientID: "fresh", ActorID: "a", Cursor: -1, UpdatedAtMs: now},
		); err != nil {
			e.t.Fatal(err)
		}
		pl := e.plan("p", loose, now)
		wantPlan(e, "active client", pl, 3, storage.BindingActiveClient)
		if pl.ActiveClients != 2 || pl.MinActiveCursor != 3 {
			e.t.Fatalf("inputs: %+v, want 2 active clients, lowest cursor 3", pl.RetentionInputs)
		}
		// The active window is strict: updated exactly window ago is gone.
		wantPlan(e, "window edge", e.plan("p", storage.RetentionPolicy{ActiveWindowMs: 10, AgeForceMs: 100_000}, now), 10, storage.BindingMinRetained)
		// A window long enough to see "gone" makes it bind.
		wantPlan(e, "longer window", e.plan("p", storage.RetentionPolicy{ActiveWindowMs: 300_000, AgeForceMs: 100_000}, now), 1, storage.BindingActiveClient)
		// Age forces out commits 1..6 (created at or before now-994) past
		// the client at 3, but not past the newest kept.
		wantPlan(e, "age force", e.plan("p", storage.RetentionPolicy{ActiveWindowMs: 100_000, AgeForceMs: 994}, now), 6, storage.BindingAgeForce)
		wantPlan(e, "age force, newest kept", e.plan("p", storage.RetentionPolicy{ActiveWindowMs: 100_000, AgeForceMs: 0, MinRetainedCommits: 5}, now), 5, storage.BindingMinRetained)
		wantPlan(e, "age below the floor", e.plan("p", storage.RetentionPolicy{ActiveWindowMs: 100_000, AgeForceMs: 998}, now), 3, storage.BindingActiveClient)
		// A pending checkpoint holds the horizon at its watermark (0).
		if _, err := e.b.Checkpoints.DeclareCheckpoint(e.ctx, storage.CheckpointDeclaration{Partition: "p", Name: "cp", SchemaVersion: e.sch.Version}, now); err != nil {
			e.t.Fatal(err)
		}
		pl = e.plan("p", loose, now)
		wantPlan(e, "checkpoint", pl, 0, storage.BindingCheckpoint)
		if pl.CheckpointFloor != 0 || pl.Prunable() {
			e.t.Fatalf("checkpoint inputs: %+v", pl)
		}
		wantPlan(e, "age force past a checkpoint", e.plan("p", storage.RetentionPolicy{ActiveWindowMs: 100_000, AgeForceMs: 996}, now), 4, storage.BindingAgeForce)
		// The plan starts from the horizon: floors below it prune nothing.
		e.prune("p", 5, 100)
		pl = e.plan("p", storage.RetentionPolicy{ActiveWindowMs: 100_000, AgeForceMs: 996}, now)
		if pl.Target != 5 || pl.Prunable() {
			e.t.Fatalf("floor below the horizon: %+v, want target 5 (nothing to prune)", pl)
		}
		if _, err := storage.PlanRetention(e.ctx, e.b.Retention, "p", storage.RetentionPolicy{MinRetainedCommits: -1}, now); err == nil {
			e.t.Fatal("a negative limit was accepted")
		}
	}},
	{name: "MaintenanceLockOneHolder", fn: func(e *env) {
		unlock, ok, err := e.b.Retention.TryLockMaintenance(e.ctx)
		if err != nil || !ok {
			e.t.Fatalf("first TryLockMaintenance: ok=%v err=%v", ok, err)
		}
		if _, ok2, err := e.b.Retention.TryLockMaintenance(e.ctx); err != nil || ok2 {
			e.t.Fatalf("second TryLockMaintenance while held: ok=%v err=%v, want not acquired (not re-entrant)", ok2, err)
		}
		unlock()
		unlock() // a second call is harmless
		unlock2, ok, err := e.b.Retention.TryLockMaintenance(e.ctx)
		if err != nil || !ok {
			e.t.Fatalf("TryLockMaintenance after unlock: ok=%v err=%v", ok, err)
		}
		unlock2()
	}},
	{name: "MaintenanceLockAcrossHandles", shared: true, fn: func(e *env) {
		other := e.share()
		if err := other.Lifecycle.EnsureSchema(e.ctx, e.sch); err != nil {
			e.t.Fatal(err)
		}
		unlock, ok, err := e.b.Retention.TryLockMaintenance(e.ctx)
		if err != nil || !ok {
			e.t.Fatalf("handle 1: ok=%v err=%v", ok, err)
		}
		if _, ok, err := other.Retention.TryLockMaintenance(e.ctx); err != nil || ok {
			e.t.Fatalf("handle 2 while handle 1 holds the lock: ok=%v err=%v, want not acquired", ok, err)
		}
		unlock()
		unlock2, ok, err := other.Retention.TryLockMaintenance(e.ctx)
		if err != nil || !ok {
			e.t.Fatalf("handle 2 after handle 1 unlocked: ok=%v err=%v", ok, err)
		}
		if _, ok, err := e.b.Retention.TryLockMaintenance(e.ctx); err != nil || ok {
			e.t.Fatalf("handle 1 while handle 2 holds the lock: ok=%v err=%v", ok, err)
		}
		unlock2()
	}},
	{name: "PruneConcurrentWithPushesAndScans", fn: func(e *env) {
		// Writers append while a pruner keeps moving the horizon up and
		// readers scan: a scan whose window starts at or above the horizon
		// read after it (the rule pulls follow) has no gap; at the end
		// every commit above the horizon is intact.
		const commits = 240
		var pushed atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		stop := make(chan struct{})
		// pruned closes once the pruner has moved the horizon; the writer
		// waits for it halfway, so pruning really overlaps the appends
		// however the goroutines are scheduled (on a loaded machine the
		// writer could otherwise finish before the pruner first runs).
		pruned := make(chan struct{})
		prunerGone := make(chan struct{}) // the pruner failed (its error is in errs)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(stop)
			for k := range commits {
				if k == commits/2 {
					select {
					case <-pruned:
					case <-prunerGone:
						return
					case <-e.ctx.Done():
						errs <- fmt.Errorf("the pruner never moved the horizon: %w", e.ctx.Err())
						return
					}
				}
				if err := e.tryLogCommit("p"); err != nil {
					errs <- err
					return
				}
				pushed.Add(1)
			}
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			signalled := false
			for {
				select {
				case <-stop:
					return
				default:
				}
				through := pushed.Load() - 5
				info, err := e.b.Log.ReadPartition(e.ctx, "p")
				if err != nil {
					errs <- fmt.Errorf("ReadPartition: %w", err)
					close(prunerGone)
					return
				}
				if !info.Exists {
					continue // no epoch to plan at before the first commit
				}
				res, err := e.b.Retention.PruneBatch(e.ctx, "p", storage.PruneRequest{LogEpoch: info.LogEpoch, ThroughSeq: through, MaxCommits: 7})
				if err != nil {
					errs <- fmt.Errorf("PruneBatch: %w", err)
					close(prunerGone)
					return
				}
				if !signalled && res.HorizonSeq > 0 {
					signalled = true
					close(pruned)
				}
			}
		}()
		for r := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if err := e.checkScanNoGap("p", r); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			e.t.Fatal(err)
		}
		info := e.readPartition("p")
		if info.MaxCommitSeq != commits || info.HorizonSeq < 1 || info.HorizonSeq > commits-5 {
			e.t.Fatalf("after the run: %+v", info)
		}
		e.wantLogFrom("p", info.HorizonSeq, commits)
		for k := int64(1); k <= commits; k++ {
			if got, want := e.hasIdem("p", "k"+strconv.FormatInt(k, 10)), k > info.HorizonSeq; got != want {
				e.t.Fatalf("idempotency record k%d present = %v, want %v (horizon %d)", k, got, want, info.HorizonSeq)
			}
		}
	}},
	{name: "PruneBatchVerifiesLogEpoch", fn: func(e *env) {
		// SPEC §4.6: a batch verifies the epoch its plan was made at,
		// before any deletion, under the lock a rotation takes.
		batch := func(epoch string, through int64) (storage.PruneResult, error) {
			return e.b.Retention.PruneBatch(e.ctx, "p", storage.PruneRequest{LogEpoch: epoch, ThroughSeq: through, MaxCommits: 100})
		}
		if r, err := e.b.Retention.PruneBatch(e.ctx, "never", storage.PruneRequest{LogEpoch: "x", ThroughSeq: 5, MaxCommits: 5}); err != nil || r != (storage.PruneResult{}) {
			e.t.Fatalf("a never-created partition: %+v, %v; want nothing pruned and no error", r, err)
		}
		for range 6 {
			e.logCommit("p", base)
		}
		planned := e.readPartition("p")
		r, err := batch(planned.LogEpoch, 2)
		if want := (storage.PruneResult{PreviousHorizonSeq: 0, HorizonSeq: 2, Commits: 2, Changes: 4, IdempotencyRecords: 2}); err != nil || r != want {
			e.t.Fatalf("a batch at the planned epoch: %+v, %v; want %+v", r, err, want)
		}
		// The same batch again (its reply lost): nothing left to do, the
		// horizons say so.
		if r, err := batch(planned.LogEpoch, 2); err != nil || r != (storage.PruneResult{PreviousHorizonSeq: 2, HorizonSeq: 2}) {
			e.t.Fatalf("the batch repeated: %+v, %v; want a no-op at horizon 2", r, err)
		}
		rotated, err := e.b.Log.RotateLogEpoch(e.ctx, "p", base)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, stale := range []string{planned.LogEpoch, ""} {
			r, err := batch(stale, 6)
			if !errors.Is(err, storage.ErrLogEpochChanged) {
				e.t.Fatalf("a batch at epoch %q after a rotation: %+v, %v; want ErrLogEpochChanged", stale, r, err)
			}
			if r.Commits != 0 || r.HorizonSeq != 2 {
				e.t.Fatalf("a refused batch reported deletions: %+v", r)
			}
		}
		if info := e.readPartition("p"); info.HorizonSeq != 2 || info.LogEpoch != rotated {
			e.t.Fatalf("registry after the refused batches: %+v", info)
		}
		e.wantLogFrom("p", 2, 6)
		if !e.hasIdem("p", "k3") {
			e.t.Fatal("a refused batch deleted an idempotency record")
		}
		// Planned again at the new epoch, it prunes.
		if r, err := batch(rotated, 4); err != nil || r.PreviousHorizonSeq != 2 || r.HorizonSeq != 4 || r.Commits != 2 {
			e.t.Fatalf("a batch at the new epoch: %+v, %v", r, err)
		}
		e.wantLogFrom("p", 4, 6)
	}},
	{name: "PruneBatchAfterRestoreRefused", roles: []string{"Snapshots"}, fn: func(e *env) {
		// A plan made before a restore must not prune the restored log: the
		// restore rotated the epoch, so the batch is refused and the
		// restored commits (fewer than the plan's target) stay.
		for range 3 {
			e.logCommit("p", base)
		}
		if err := e.b.Snapshots.CapturePartition(e.ctx, "p"); err != nil {
			e.t.Fatal(err)
		}
		for range 7 {
			e.logCommit("p", base)
		}
		planned := e.readPartition("p") // max 10; say the plan targets 8
		if _, err := e.b.Snapshots.RestorePartition(e.ctx, "p", base); err != nil {
			e.t.Fatal(err)
		}
		r, err := e.b.Retention.PruneBatch(e.ctx, "p", storage.PruneRequest{LogEpoch: planned.LogEpoch, ThroughSeq: 8, MaxCommits: 100})
		if !errors.Is(err, storage.ErrLogEpochChanged) || r.Commits != 0 {
			e.t.Fatalf("a batch planned before the restore: %+v, %v; want ErrLogEpochChanged", r, err)
		}
		e.wantLogFrom("p", 0, 3)
	}},
	{name: "SnapshotRestore", roles: []string{"Snapshots"}, fn: func(e *env) {
		if _, err := e.b.Snapshots.RestorePartition(e.ctx, "p", 5); !errors.Is(err, storage.ErrNoSnapshot) {
			e.t.Fatalf("restore without a capture: %v, want ErrNoSnapshot", err)
		}
		e.push("p", func(tx storage.PushTx) { e.put(tx, e.items, 1, item("a", "p1", 7)) })
		e.logCommit("p", base)
		e.logCommit("p", base)
		e.logCommit("other", base)
		e.prune("p", 1, 10)
		if err := e.b.Clients.PutClient(e.ctx, "p", storage.ClientRecord{ClientID: "c", ActorID: "a", Cursor: 2, UpdatedAtMs: 1}); err != nil {
			e.t.Fatal(err)
		}
		before := e.readPartition("p")
		if err := e.b.Snapshots.CapturePartition(e.ctx, "p"); err != nil {
			e.t.Fatalf("CapturePartition: %v", err)
		}
		// Later writes: a new row, a changed row, more commits, a prune.
		e.push("p", func(tx storage.PushTx) {
			e.put(tx, e.items, 2, itemCode("a", "p1", 7, "changed"))
			e.put(tx, e.items, 1, item("b", "p1", 7))
		})
		e.logCommit("p", base)
		e.logCommit("p", base)
		e.prune("p", 3, 10)
		e.logCommit("other", base)
		ep, err := e.b.Snapshots.RestorePartition(e.ctx, "p", 99)
		if err != nil {
			e.t.Fatalf("RestorePartition: %v", err)
		}
		after := e.readPartition("p")
		if ep == "" || ep == before.LogEpoch || after.LogEpoch != ep || !after.EpochRequired ||
			after.MaxCommitSeq != before.MaxCommitSeq || after.HorizonSeq != before.HorizonSeq {
			e.t.Fatalf("registry after restore: %+v (new epoch %q), captured %+v", after, ep, before)
		}
		e.wantLogFrom("p", 1, 2)
		if !e.hasIdem("p", "k2") || e.hasIdem("p", "k3") {
			e.t.Fatal("idempotency records after restore: want k2 back and k3 (written after the capture) gone")
		}
		rows := e.scanRows("p", storage.RowQuery{Table: e.items, Scopes: map[string][]string{}, Limit: 10})
		if len(rows) != 1 {
			e.t.Fatalf("rows after restore: %d, want 1", len(rows))
		}
		e.wantRow("row after restore", &rows[0], storage.RowRecord{RowID: "a", Version: 1, Values: item("a", "p1", 7)})
		if c, err := e.b.Clients.GetClient(e.ctx, "p", "c"); err != nil || c != nil {
			e.t.Fatalf("client records after restore: %+v, %v; want deleted by the rotation", c, err)
		}
		if o := e.readPartition("other"); o.MaxCommitSeq != 2 {
			e.t.Fatalf("another partition after restore: %+v", o)
		}
		// The restored log takes new commits at max+1.
		if seq := e.logCommit("p", base); seq != before.MaxCommitSeq+1 {
			e.t.Fatalf("first commit after restore: seq %d, want %d", seq, before.MaxCommitSeq+1)
		}
		// A second restore returns to the same capture.
		if _, err := e.b.Snapshots.RestorePartition(e.ctx, "p", 100); err != nil {
			e.t.Fatal(err)
		}
		e.wantLogFrom("p", 1, 2)
	}},
}

// tryLogCommit is logCommit returning errors instead of failing (for
// goroutines).
func (e *env) tryLogCommit(partition string) error {
	tx, err := e.b.Log.BeginPush(e.ctx, partition)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(e.ctx) }()
	seq := tx.Partition().MaxCommitSeq + 1
	id := strconv.FormatInt(seq, 10)
	c := storage.CommitRecord{Seq: seq, CreatedAtMs: base, ActorID: "actor-" + id, ClientID: "w", ClientCommitID: "k" + id,
		Changes: []storage.ChangeRecord{
			upsert("items", "i"+id, 1, sc("project", "p1", "owner", "7")),
			upsert("notes", "n"+id, 1, sc("project", "p"+strconv.FormatInt(seq%3, 10))),
		}}
	if err := tx.AppendCommit(e.ctx, c); err != nil {
		return err
	}
	if err := tx.PutIdempotency(e.ctx, storage.IdempotencyRecord{ClientID: "w", ClientCommitID: "k" + id,
		Status: ssp2.CommitApplied, CommitSeq: seq, Result: []byte(`{"n":2}`)}); err != nil {
		return err
	}
	return tx.Commit(e.ctx)
}

// checkScanNoGap scans items from a cursor near the horizon and, when the
// horizon read after the scan is still at or below the cursor, requires
// every commit of the window.
func (e *env) checkScanNoGap(partition string, r int) error {
	info, err := e.b.Log.ReadPartition(e.ctx, partition)
	if err != nil {
		return err
	}
	after := info.HorizonSeq + int64(r)
	if after >= info.MaxCommitSeq {
		return nil
	}
	scan, err := e.b.Log.ScanChanges(e.ctx, partition, storage.ChangeQuery{Table: "items", Scopes: map[string][]string{"owner": {"7"}}, AfterSeq: after, UpToSeq: info.MaxCommitSeq})
	if err != nil {
		return fmt.Errorf("ScanChanges: %w", err)
	}
	g, err := e.b.Checkpoints.ReadServeGate(e.ctx, partition, e.sch.Version)
	if err != nil {
		return err
	}
	if g.HorizonSeq > after {
		return nil // pruned meanwhile: a pull answers cursor_expired instead
	}
	if int64(len(scan.Commits)) != info.MaxCommitSeq-after {
		return fmt.Errorf("scan (%d, %d] with horizon %d after it: %d commits: %s", after, info.MaxCommitSeq, g.HorizonSeq, len(scan.Commits), fmtCommits(scan.Commits))
	}
	for i, c := range scan.Commits {
		if c.Seq != after+int64(i)+1 || len(c.Changes) != 1 || c.Changes[0].RowID != "i"+strconv.FormatInt(c.Seq, 10) {
			return fmt.Errorf("scan (%d, %d]: commit %d is %s", after, info.MaxCommitSeq, i, fmtCommits(scan.Commits[i:i+1]))
		}
	}
	return nil
}
