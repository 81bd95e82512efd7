package storagetest

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// Checkpoint cases: RFC 0007 notes §7 items 1-13 that apply to a storage
// backend, the serve gate and PruneThrough.

// schemaV3 is SchemaV2 at version 3 (no layout change).
var schemaV3 = strings.Replace(SchemaV2, `"version": 2`, `"version": 3`, 1)

const cpNow = 1_700_000_000_000

func decl(p, name string, v int32) storage.CheckpointDeclaration {
	return storage.CheckpointDeclaration{Partition: p, Name: name, SchemaVersion: v}
}

func (e *env) declare(d storage.CheckpointDeclaration) storage.Checkpoint {
	e.t.Helper()
	c, err := e.b.Checkpoints.DeclareCheckpoint(e.ctx, d, cpNow)
	if err != nil {
		e.t.Fatalf("DeclareCheckpoint(%+v): %v", d, err)
	}
	return c
}

func (e *env) claim(d storage.CheckpointDeclaration) storage.Checkpoint {
	e.t.Helper()
	c, err := e.b.Checkpoints.ClaimCheckpoint(e.ctx, d, cpNow+1)
	if err != nil {
		e.t.Fatalf("ClaimCheckpoint(%+v): %v", d, err)
	}
	return c
}

func (e *env) activate(p, name string, epoch, watermark int64, sources ...string) storage.ActivationOutcome {
	e.t.Helper()
	out, err := e.b.Checkpoints.ActivateCheckpoint(e.ctx, p, name, epoch, watermark, sources, cpNow+2)
	if err != nil {
		e.t.Fatalf("ActivateCheckpoint(%s/%s, epoch %d, watermark %d, %v): %v", p, name, epoch, watermark, sources, err)
	}
	return out
}

func (e *env) wantActivate(want storage.ActivationOutcome, p, name string, epoch, watermark int64, sources ...string) {
	e.t.Helper()
	if got := e.activate(p, name, epoch, watermark, sources...); got != want {
		e.t.Fatalf("ActivateCheckpoint(%s/%s, epoch %d, watermark %d, %v) = %s, want %s", p, name, epoch, watermark, sources, got, want)
	}
}

func (e *env) checkpoints() []storage.Checkpoint {
	e.t.Helper()
	cs, err := e.b.Checkpoints.ReadCheckpoints(e.ctx)
	if err != nil {
		e.t.Fatalf("ReadCheckpoints: %v", err)
	}
	return cs
}

// cp returns the stored checkpoint, failing when it is absent.
func (e *env) cp(p, name string) storage.Checkpoint {
	e.t.Helper()
	for _, c := range e.checkpoints() {
		if c.Partition == p && c.Name == name {
			return c
		}
	}
	e.t.Fatalf("checkpoint %s/%s not stored", p, name)
	return storage.Checkpoint{}
}

// wantCp compares everything but UpdatedAtMs.
func (e *env) wantCp(what string, got storage.Checkpoint, state storage.CheckpointState, ver int32, epoch, watermark, observed int64) {
	e.t.Helper()
	if got.State != state || got.SchemaVersion != ver || got.OwnerEpoch != epoch || got.Watermark != watermark || got.ObservedRows != observed {
		e.t.Fatalf("%s: checkpoint %+v, want state %s version %d epoch %d watermark %d observed %d", what, got, state, ver, epoch, watermark, observed)
	}
}

// itemCommit commits one items upsert to partition and returns its seq.
func (e *env) itemCommit(s storage.Backend, partition, id string) (int64, error) {
	tx, err := s.Log.BeginPush(e.ctx, partition)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(e.ctx) }()
	items := e.itemsOf(s)
	vals := append(item(id, "p1", 1), make(ssp2.Row, len(items.Columns)-12)...)
	if err := tx.PutRow(e.ctx, items, storage.RowRecord{RowID: id, Version: 1, Values: vals}); err != nil {
		return 0, err
	}
	seq := tx.Partition().MaxCommitSeq + 1
	if err := tx.AppendCommit(e.ctx, storage.CommitRecord{Seq: seq, CreatedAtMs: seq, ActorID: "a", ClientID: "c", ClientCommitID: id,
		Changes: []storage.ChangeRecord{upsert("items", id, 1, sc("project", "p1", "owner", "1"))}}); err != nil {
		return 0, err
	}
	return seq, tx.Commit(e.ctx)
}

func (e *env) mustItemCommit(partition, id string) int64 {
	e.t.Helper()
	seq, err := e.itemCommit(e.b, partition, id)
	if err != nil {
		e.t.Fatalf("push %s to %q: %v", id, partition, err)
	}
	return seq
}

func (e *env) noteCommit(partition, id string) int64 {
	e.t.Helper()
	var seq int64
	e.push(partition, func(tx storage.PushTx) {
		e.put(tx, e.notes, 1, note(id, "p1", "b"))
		seq = e.appendNext(tx, upsert("notes", id, 1, sc("project", "p1")))
	})
	return seq
}

// wantFenced checks a push of s to partition is rejected by the fence and
// leaves nothing behind.
func (e *env) wantFenced(what string, s storage.Backend, partition, id string) {
	e.t.Helper()
	before := e.readPartition(partition).MaxCommitSeq
	_, err := e.itemCommit(s, partition, id)
	wantErrIs(e, what, err, storage.ErrWriterFenced)
	if got := e.readPartition(partition).MaxCommitSeq; got != before {
		e.t.Fatalf("%s: MaxCommitSeq %d -> %d after a fenced push", what, before, got)
	}
	if r := e.committedRow(partition, e.itemsOf(e.b), id); r != nil {
		e.t.Fatalf("%s: fenced push left row %+v", what, r)
	}
}

func (e *env) gate(s storage.Backend, partition string, running int32) storage.ServeGate {
	e.t.Helper()
	g, err := s.Checkpoints.ReadServeGate(e.ctx, partition, running)
	if err != nil {
		e.t.Fatalf("ReadServeGate(%q, %d): %v", partition, running, err)
	}
	return g
}

func refs(kv ...string) []storage.CheckpointRef {
	var out []storage.CheckpointRef
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, storage.CheckpointRef{Partition: kv[i], Name: kv[i+1]})
	}
	return out
}

// ensureWith runs EnsureSchema on handle s and records the schema s runs
// when it succeeded (or only found checkpoints incomplete).
func (e *env) ensureWith(s storage.Backend, src string, decls ...storage.CheckpointDeclaration) error {
	sch := MustParse(src)
	err := s.Lifecycle.EnsureSchema(e.ctx, sch, decls...)
	if err == nil || errors.Is(err, storage.ErrCheckpointIncomplete) {
		if e.schemas == nil {
			e.schemas = map[storage.Lifecycle]*schema.Schema{}
		}
		e.schemas[s.Lifecycle] = sch
	}
	return err
}

// itemsOf returns the items table of the schema handle s runs.
func (e *env) itemsOf(s storage.Backend) *schema.Table {
	if sch := e.schemas[s.Lifecycle]; sch != nil {
		return sch.Table("items")
	}
	return e.items
}

var checkpointTests = []test{
	{name: "ClaimConcurrent", fn: func(e *env) {
		d := decl("p", "proj", 1)
		if c := e.declare(d); c.State != storage.CheckpointDeclared {
			e.t.Fatalf("declared state %s", c.State)
		}
		var wg sync.WaitGroup
		epochs := make([]int64, 2)
		errs := make([]error, 2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := e.b.Checkpoints.ClaimCheckpoint(e.ctx, d, cpNow)
				epochs[i], errs[i] = c.OwnerEpoch, err
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				e.t.Fatalf("concurrent ClaimCheckpoint: %v", err)
			}
		}
		slices.Sort(epochs)
		if !reflect.DeepEqual(epochs, []int64{1, 2}) {
			e.t.Fatalf("concurrent claims got epochs %v, want {1,2}", epochs)
		}
		e.wantCp("after two claims", e.cp("p", "proj"), storage.CheckpointBackfilling, 1, 2, 0, 0)
		_, err := e.b.Checkpoints.ClaimCheckpoint(e.ctx, decl("p", "absent", 1), cpNow)
		wantErrIs(e, "claim of an absent checkpoint", err, storage.ErrCheckpointNotDeclared)
	}},
	{name: "AdvanceStaleEpoch", fn: func(e *env) {
		d := decl("p", "proj", 1)
		e.declare(d)
		e.claim(d)
		e.claim(d) // epoch 2
		tx := e.begin("p")
		ok, err := tx.AdvanceCheckpoint(e.ctx, "proj", 1, 5, 7)
		if err != nil || ok {
			e.t.Fatalf("stale AdvanceCheckpoint = %v, %v; want false, nil", ok, err)
		}
		if err := tx.Commit(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		e.wantCp("after stale advance", e.cp("p", "proj"), storage.CheckpointBackfilling, 1, 2, 0, 0)
		e.push("p", func(tx storage.PushTx) {
			if ok, err := tx.AdvanceCheckpoint(e.ctx, "proj", 2, 5, 7); err != nil || !ok {
				e.t.Fatalf("winner AdvanceCheckpoint = %v, %v; want true", ok, err)
			}
		})
		e.wantCp("after winner advance", e.cp("p", "proj"), storage.CheckpointBackfilling, 1, 2, 5, 7)
		// a rolled-back advance leaves nothing
		tx = e.begin("p")
		if ok, err := tx.AdvanceCheckpoint(e.ctx, "proj", 2, 9, 9); err != nil || !ok {
			e.t.Fatalf("AdvanceCheckpoint = %v, %v", ok, err)
		}
		if err := tx.Rollback(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		e.wantCp("after rolled-back advance", e.cp("p", "proj"), storage.CheckpointBackfilling, 1, 2, 5, 7)
		// an advance undone by RollbackToSavepoint leaves nothing either
		e.push("p", func(tx storage.PushTx) {
			if err := tx.Savepoint(e.ctx); err != nil {
				e.t.Fatal(err)
			}
			if ok, err := tx.AdvanceCheckpoint(e.ctx, "proj", 2, 11, 11); err != nil || !ok {
				e.t.Fatalf("AdvanceCheckpoint = %v, %v", ok, err)
			}
			if err := tx.RollbackToSavepoint(e.ctx); err != nil {
				e.t.Fatal(err)
			}
		})
		e.wantCp("after advance rolled back to savepoint", e.cp("p", "proj"), storage.CheckpointBackfilling, 1, 2, 5, 7)
	}},
	{name: "Coverage", fn: func(e *env) {
		for _, n := range []string{"byItems", "byNotes", "noSources"} {
			e.declare(decl("p", n, 1))
		}
		s1 := e.mustItemCommit("p", "i1") // items at 1
		s2 := e.noteCommit("p", "n1")     // notes at 2
		e.wantActivate(storage.Stale, "p", "byItems", 0, 0, "items")
		e.wantActivate(storage.Stale, "p", "byItems", 0, 0, "items", "tags")
		e.wantCp("after stale activation", e.cp("p", "byItems"), storage.CheckpointDeclared, 1, 0, 0, 0)
		// the notes write at 2 is no source of byItems
		e.wantActivate(storage.Activated, "p", "byItems", 0, s1, "items")
		e.wantActivate(storage.Stale, "p", "byNotes", 0, s1, "notes")
		e.wantActivate(storage.Activated, "p", "byNotes", 0, s2, "notes")
		e.wantActivate(storage.Activated, "p", "noSources", 0, 0)
		e.wantCp("activated", e.cp("p", "byItems"), storage.CheckpointActivated, 1, 0, s1, 0)
		// other partitions' changes do not count
		e.declare(decl("q", "byItems", 1))
		e.wantActivate(storage.Activated, "q", "byItems", 0, 0, "items")
	}},
	{name: "PrunedWindow", fn: func(e *env) {
		d := decl("p", "proj", 1)
		e.declare(d)
		e.mustItemCommit("p", "i1")
		e.mustItemCommit("p", "i2")
		e.mustItemCommit("p", "i3")
		if err := e.b.Checkpoints.PruneThrough(e.ctx, "p", 2); err != nil {
			e.t.Fatal(err)
		}
		c := e.claim(d)
		// a change above the watermark wins over pruning
		e.wantActivate(storage.Stale, "p", "proj", c.OwnerEpoch, 0, "items")
		if err := e.b.Checkpoints.PruneThrough(e.ctx, "p", 3); err != nil {
			e.t.Fatal(err)
		}
		e.wantActivate(storage.Unverifiable, "p", "proj", c.OwnerEpoch, 0, "items")
		e.wantActivate(storage.Unverifiable, "p", "proj", c.OwnerEpoch, 2, "items")
		e.wantCp("after unverifiable", e.cp("p", "proj"), storage.CheckpointBackfilling, 1, 1, 0, 0)
		e.wantActivate(storage.Activated, "p", "proj", c.OwnerEpoch, 3, "items")
		e.wantCp("activated", e.cp("p", "proj"), storage.CheckpointActivated, 1, 1, 3, 0)
		// re-activating an activated row is stale and changes nothing
		e.wantActivate(storage.Stale, "p", "proj", c.OwnerEpoch, 7)
		e.wantCp("after re-activation", e.cp("p", "proj"), storage.CheckpointActivated, 1, 1, 3, 0)
	}},
	{name: "SupersededOwner", fn: func(e *env) {
		d := decl("p", "proj", 1)
		e.declare(d)
		old := e.claim(d)
		cur := e.claim(d)
		e.wantActivate(storage.Stale, "p", "proj", old.OwnerEpoch, 0)
		// a stale batch writes no projection rows: the runner aborts
		tx := e.begin("p")
		e.put(tx, e.notes, 1, note("proj1", "p1", "x"))
		ok, err := tx.AdvanceCheckpoint(e.ctx, "proj", old.OwnerEpoch, 1, 1)
		if err != nil || ok {
			e.t.Fatalf("superseded AdvanceCheckpoint = %v, %v; want false", ok, err)
		}
		if err := tx.Rollback(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		if r := e.committedRow("p", e.notes, "proj1"); r != nil {
			e.t.Fatalf("stale batch left projection row %+v", r)
		}
		e.wantActivate(storage.Activated, "p", "proj", cur.OwnerEpoch, 0)
	}},
	{name: "FenceMissing", fn: func(e *env) {
		_, err := e.b.Checkpoints.ActivateCheckpoint(e.ctx, "p", "absent", 0, 0, nil, cpNow)
		wantErrIs(e, "activating an absent checkpoint", err, storage.ErrCheckpointFenceMissing)
		d := decl("p", "proj", 1)
		e.declare(d)
		// a claim at version 3 moves the checkpoint above the fence (1)
		c := e.claim(decl("p", "proj", 3))
		_, err = e.b.Checkpoints.ActivateCheckpoint(e.ctx, "p", "proj", c.OwnerEpoch, 0, nil, cpNow)
		wantErrIs(e, "activating above the fence", err, storage.ErrCheckpointFenceMissing)
		e.wantCp("after fence-missing activation", e.cp("p", "proj"), storage.CheckpointBackfilling, 3, 1, 0, 0)
		c = e.claim(d) // back at version 1
		e.wantActivate(storage.Activated, "p", "proj", c.OwnerEpoch, 0)
		_, err = e.b.Checkpoints.ClaimCheckpoint(e.ctx, d, cpNow)
		wantErrIs(e, "claim after activation", err, storage.ErrCheckpointNotDeclared)
		got := e.declare(d)
		e.wantCp("re-declare after activation", got, storage.CheckpointActivated, 1, 2, 0, 0)
		e.wantActivate(storage.Stale, "p", "proj", c.OwnerEpoch, 0)
	}},
	{name: "DeclareRaisesFence", fn: func(e *env) {
		c := e.declare(decl("p", "a", 5))
		if c.Partition != "p" || c.Name != "a" {
			e.t.Fatalf("declared %+v", c)
		}
		e.wantCp("declared", c, storage.CheckpointDeclared, 5, 0, 0, 0)
		// a lower declaration never lowers the fence
		e.declare(decl("p", "b", 2))
		e.wantActivate(storage.Activated, "p", "a", 0, 0)
		// the fence (5) rejects this store's writer (version 1)
		e.wantFenced("push under fence 5", e.b, "p", "r1")
		// re-declaring returns the stored row unchanged
		e.claim(decl("p", "b", 2))
		e.wantCp("re-declared", e.declare(decl("p", "b", 4)), storage.CheckpointBackfilling, 2, 1, 0, 0)
	}},
	{name: "FenceVersions", fn: func(e *env) {
		e.mustItemCommit("p", "r1") // no fence
		e.declare(decl("p", "proj", 1))
		e.mustItemCommit("p", "r2") // fence 1, writer 1
		e.declare(decl("q", "proj", 99))
		e.wantFenced("push under fence 99", e.b, "q", "r1")
		e.mustItemCommit("p", "r3") // other partitions are not fenced
	}},
	{name: "AdvanceInPush", fn: func(e *env) {
		d := decl("p", "proj", 1)
		e.declare(d)
		src := e.mustItemCommit("p", "i1")
		c := e.claim(d)
		var seq int64
		e.push("p", func(tx storage.PushTx) {
			e.put(tx, e.notes, 1, note("proj-i1", "p1", "projected"))
			if ok, err := tx.AdvanceCheckpoint(e.ctx, "proj", c.OwnerEpoch, src, 1); err != nil || !ok {
				e.t.Fatalf("AdvanceCheckpoint = %v, %v", ok, err)
			}
			seq = e.appendNext(tx, upsert("notes", "proj-i1", 1, sc("project", "p1")))
			if err := tx.PutIdempotency(e.ctx, storage.IdempotencyRecord{ClientID: "backfill", ClientCommitID: "proj:1",
				Status: ssp2.CommitApplied, CommitSeq: seq}); err != nil {
				e.t.Fatal(err)
			}
		})
		e.wantCp("after backfill batch", e.cp("p", "proj"), storage.CheckpointBackfilling, 1, 1, src, 1)
		e.wantActivate(storage.Activated, "p", "proj", c.OwnerEpoch, src, "items")
		// replaying the batch's key finds the same commit
		tx := e.begin("p")
		rec, err := tx.LookupIdempotency(e.ctx, "backfill", "proj:1")
		if err != nil || rec == nil || rec.CommitSeq != seq {
			e.t.Fatalf("replayed LookupIdempotency = %+v, %v; want seq %d", rec, err, seq)
		}
		_ = tx.Rollback(e.ctx)
		if r := e.committedRow("p", e.notes, "proj-i1"); r == nil {
			e.t.Fatal("projection row missing")
		}
	}},
	{name: "BumpAtomicity", fn: func(e *env) {
		err := e.ensureWith(e.b, SchemaV2, decl("p", "proj", 2), decl("p", "bad", 0))
		if err == nil || errors.Is(err, storage.ErrSchemaNewer) {
			e.t.Fatalf("bump with an invalid declaration: err = %v", err)
		}
		if g := e.gate(e.b, "p", 1); g.StoredSchemaVersion != 1 {
			e.t.Fatalf("marker after failed bump = %d, want 1", g.StoredSchemaVersion)
		}
		if cs := e.checkpoints(); len(cs) != 0 {
			e.t.Fatalf("checkpoints after failed bump: %+v", cs)
		}
		e.mustItemCommit("p", "r1") // no fence either
		if err := e.ensureWith(e.b, SchemaV2, decl("p", "proj", 2)); err != nil {
			e.t.Fatalf("valid bump: %v", err)
		}
		if g := e.gate(e.b, "p", 2); g.StoredSchemaVersion != 2 || !reflect.DeepEqual(g.Pending, refs("p", "proj")) {
			e.t.Fatalf("gate after bump = %+v", g)
		}
		e.wantCp("installed", e.cp("p", "proj"), storage.CheckpointDeclared, 2, 0, 0, 0)
		// a failed V3 bump keeps only the V2 declaration and the fence at 2
		err = e.ensureWith(e.b, schemaV3, decl("p", "proj3", 3), decl("", "bad", 3))
		if err == nil {
			e.t.Fatal("bump with an empty partition succeeded")
		}
		if cs := e.checkpoints(); len(cs) != 1 || cs[0].Name != "proj" {
			e.t.Fatalf("checkpoints after failed V3 bump: %+v", cs)
		}
		if g := e.gate(e.b, "p", 2); g.StoredSchemaVersion != 2 {
			e.t.Fatalf("marker after failed V3 bump = %d", g.StoredSchemaVersion)
		}
		e.mustItemCommit("p", "r2")                          // writer 2 passes fence 2
		e.wantActivate(storage.Activated, "p", "proj", 0, 0) // fence >= 2
	}},
	{name: "EnsureIncomplete", fn: func(e *env) {
		a, b := decl("p", "a", 2), decl("q", "b", 2)
		if err := e.ensureWith(e.b, SchemaV2, a, b); err != nil {
			e.t.Fatalf("bump with declarations: %v", err)
		}
		e.declare(decl("r", "other", 5)) // another version never counts
		for _, ds := range [][]storage.CheckpointDeclaration{nil, {}, {a}} {
			err := e.ensureWith(e.b, SchemaV2, ds...)
			wantErrIs(e, "EnsureSchema without every declaration", err, storage.ErrCheckpointIncomplete)
			if !strings.Contains(err.Error(), "q/b") {
				e.t.Fatalf("incomplete error does not name q/b: %v", err)
			}
		}
		// the schema is current anyway
		e.mustItemCommit("p", "r1")
		if err := e.ensureWith(e.b, SchemaV2, a, b); err != nil {
			e.t.Fatalf("EnsureSchema with every declaration: %v", err)
		}
		before := e.checkpoints()
		if err := e.ensureWith(e.b, SchemaV2, b, a); err != nil { // matching restart
			e.t.Fatal(err)
		}
		if after := e.checkpoints(); !reflect.DeepEqual(before, after) {
			e.t.Fatalf("matching restart changed checkpoints: %+v -> %+v", before, after)
		}
		e.wantActivate(storage.Activated, "p", "a", 0, 0)
		err := e.ensureWith(e.b, SchemaV2)
		wantErrIs(e, "EnsureSchema with q/b pending", err, storage.ErrCheckpointIncomplete)
		e.wantActivate(storage.Activated, "q", "b", 0, 0)
		if err := e.ensureWith(e.b, SchemaV2); err != nil {
			e.t.Fatalf("EnsureSchema after activation: %v", err)
		}
	}},
	{name: "ServeGate", fn: func(e *env) {
		g := e.gate(e.b, "a", 1)
		if g.StoredSchemaVersion != 1 || g.LogEpoch != "" || len(g.Pending) != 0 {
			e.t.Fatalf("fresh gate = %+v", g)
		}
		for _, d := range []storage.CheckpointDeclaration{decl("b", "x", 1), decl("a", "y", 1), decl("a", "x", 1), decl("c", "z", 2), decl("a", "done", 1)} {
			e.declare(d)
		}
		e.wantActivate(storage.Activated, "a", "done", 0, 0)
		ep := e.touch("a").LogEpoch
		g = e.gate(e.b, "a", 1)
		want := storage.ServeGate{StoredSchemaVersion: 1, LogEpoch: ep, Pending: refs("a", "x", "a", "y", "b", "x")}
		if !reflect.DeepEqual(g, want) {
			e.t.Fatalf("gate = %+v, want %+v", g, want)
		}
		if g := e.gate(e.b, "b", 2); g.LogEpoch != "" || !reflect.DeepEqual(g.Pending, refs("c", "z")) {
			e.t.Fatalf("gate at running 2 = %+v", g)
		}
		tx := e.begin("a")
		g, err := tx.ReadServeGate(e.ctx, 1)
		_ = tx.Rollback(e.ctx)
		if err != nil || !reflect.DeepEqual(g, want) {
			e.t.Fatalf("PushTx.ReadServeGate = %+v, %v; want %+v", g, err, want)
		}
		ep2, err := e.b.Log.RotateLogEpoch(e.ctx, "a", cpNow)
		if err != nil {
			e.t.Fatal(err)
		}
		if g := e.gate(e.b, "a", 1); g.LogEpoch != ep2 {
			e.t.Fatalf("gate epoch after rotation = %q, want %q", g.LogEpoch, ep2)
		}
	}},
	{name: "PruneThrough", fn: func(e *env) {
		if err := e.b.Checkpoints.PruneThrough(e.ctx, "never", 5); err != nil {
			e.t.Fatalf("PruneThrough of a never-created partition: %v", err)
		}
		for _, id := range []string{"i1", "i2", "i3", "i4"} {
			e.mustItemCommit("p", id)
		}
		if err := e.b.Checkpoints.PruneThrough(e.ctx, "p", 2); err != nil {
			e.t.Fatal(err)
		}
		if p := e.readPartition("p"); p.HorizonSeq != 2 || p.MaxCommitSeq != 4 {
			e.t.Fatalf("after prune through 2: %+v", p)
		}
		all := map[string][]string{"project": {"p1"}}
		for _, scopes := range []map[string][]string{nil, all} {
			got := e.scanChanges("p", storage.ChangeQuery{Table: "items", Scopes: scopes, AfterSeq: 0, UpToSeq: 10, LimitChanges: 100})
			var seqs []int64
			for _, c := range got.Commits {
				seqs = append(seqs, c.Seq)
			}
			if !reflect.DeepEqual(seqs, []int64{3, 4}) {
				e.t.Fatalf("ScanChanges(scopes %v) after prune = %v, want [3 4]", scopes, seqs)
			}
		}
		if err := e.b.Checkpoints.PruneThrough(e.ctx, "p", 1); err != nil { // below the horizon: no-op
			e.t.Fatal(err)
		}
		if p := e.readPartition("p"); p.HorizonSeq != 2 {
			e.t.Fatalf("horizon lowered to %d", p.HorizonSeq)
		}
		if err := e.b.Checkpoints.PruneThrough(e.ctx, "p", 100); err != nil { // never above max
			e.t.Fatal(err)
		}
		if p := e.readPartition("p"); p.HorizonSeq != 4 || p.MaxCommitSeq != 4 {
			e.t.Fatalf("after prune through 100: %+v", p)
		}
		if s := e.mustItemCommit("p", "i5"); s != 5 {
			e.t.Fatalf("commit after full prune got seq %d", s)
		}
		got := e.scanChanges("p", storage.ChangeQuery{Table: "items", Scopes: all, AfterSeq: 0, UpToSeq: 10, LimitChanges: 100})
		if len(got.Commits) != 1 || got.Commits[0].Seq != 5 {
			e.t.Fatalf("ScanChanges after full prune = %s", fmtCommits(got.Commits))
		}
	}},
}

// sharedCheckpointTests need two handles on one database: b plays an old
// process still running the previous schema version.
var sharedCheckpointTests = []test{
	{name: "OldWriterFenced", shared: true, fn: func(e *env) {
		b := e.share()
		if err := e.ensureWith(b, SchemaV1); err != nil {
			e.t.Fatalf("second handle EnsureSchema(v1): %v", err)
		}
		if _, err := e.itemCommit(b, "p", "old1"); err != nil {
			e.t.Fatalf("old writer before the bump: %v", err)
		}
		if err := e.ensureWith(e.b, SchemaV2, decl("p", "proj", 2)); err != nil {
			e.t.Fatalf("bump to v2: %v", err)
		}
		e.wantFenced("old writer after the bump", b, "p", "old2")
		if _, err := e.itemCommit(b, "q", "old3"); err != nil { // no fence on q
			e.t.Fatalf("old writer on an unfenced partition: %v", err)
		}
		wm := e.mustItemCommit("p", "new1")
		c := e.claim(decl("p", "proj", 2))
		e.wantFenced("old writer after a claim", b, "p", "old4")
		// the old process sees the newer marker and the pending checkpoint
		g := e.gate(b, "p", 1)
		if g.StoredSchemaVersion != 2 || len(g.Pending) != 0 {
			e.t.Fatalf("old process's gate = %+v", g)
		}
		err := b.Lifecycle.EnsureSchema(e.ctx, MustParse(SchemaV1))
		wantErrIs(e, "old process re-ensuring v1", err, storage.ErrSchemaNewer)
		e.wantActivate(storage.Activated, "p", "proj", c.OwnerEpoch, wm, "items")
		e.wantFenced("old writer after activation", b, "p", "old5")
	}},
	{name: "SecondProcessUndeclared", shared: true, fn: func(e *env) {
		if err := e.ensureWith(e.b, SchemaV2, decl("p", "proj", 2)); err != nil {
			e.t.Fatalf("bump to v2: %v", err)
		}
		c := e.share()
		err := e.ensureWith(c, SchemaV2)
		wantErrIs(e, "second v2 process without the declaration", err, storage.ErrCheckpointIncomplete)
		if g := e.gate(c, "p", 2); g.StoredSchemaVersion != 2 || !reflect.DeepEqual(g.Pending, refs("p", "proj")) {
			e.t.Fatalf("second process's gate = %+v", g)
		}
		if _, err := e.itemCommit(c, "p", "c1"); err != nil { // it runs v2: the fence lets it write
			e.t.Fatalf("v2 writer: %v", err)
		}
		e.wantActivate(storage.Activated, "p", "proj", 0, 1, "items")
		if err := e.ensureWith(c, SchemaV2); err != nil {
			e.t.Fatalf("second process after activation: %v", err)
		}
		if g := e.gate(c, "p", 2); len(g.Pending) != 0 {
			e.t.Fatalf("gate after activation = %+v", g)
		}
	}},
}
