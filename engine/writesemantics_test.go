package engine_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// Wire version 3's write rules end to end (SPEC §2.2, §6.2, §6.3; Appendix
// B.20 and B.21), on every backend. The tasks table is id (key),
// project_id (scope), title, code (nullable).

// inPushTx runs read in a push transaction of partition p1 that is rolled
// back afterwards (a read of what the store holds, as a push sees it).
func (f *fixture) inPushTx(read func(ctx context.Context, tx storage.PushTx) error) {
	f.t.Helper()
	ctx := context.Background()
	tx, err := f.store.Log.BeginPush(ctx, "p1")
	if err != nil {
		f.t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read only
	if err := read(ctx, tx); err != nil {
		f.t.Fatal(err)
	}
}

// taskRow reads task id as stored, or nil.
func (f *fixture) taskRow(id string) (rec *storage.RowRecord) {
	f.t.Helper()
	f.inPushTx(func(ctx context.Context, tx storage.PushTx) (err error) {
		rec, err = tx.GetRow(ctx, f.schema.Table("tasks"), id)
		return err
	})
	return rec
}

// tombstone reads task id's tombstone seq (0: none).
func (f *fixture) tombstone(id string) (seq int64) {
	f.t.Helper()
	f.inPushTx(func(ctx context.Context, tx storage.PushTx) (err error) {
		seq, err = tx.Tombstone(ctx, f.schema.Table("tasks"), id)
		return err
	})
	return seq
}

func wantRejected(t *testing.T, pr *ssp2.PushResult, code syncerr.Code) ssp2.OpResult {
	t.Helper()
	if pr.Status != ssp2.CommitRejected || len(pr.Results) != 1 || pr.Results[0].Code != string(code) {
		t.Fatalf("push %s = %+v, want rejected with %s", pr.ClientCommitID, pr, code)
	}
	return pr.Results[0]
}

// TestColumnGranularWrites: SPEC Appendix B.21 (a)-(c), (e), (f) and §6.2
// step 3.
func TestColumnGranularWrites(t *testing.T) {
	for _, be := range crdtStores() {
		t.Run(be.name, func(t *testing.T) {
			f := newFixture(t, be.open(t))
			a, b := f.client("alice", "ca"), f.client("bob", "cb")
			title := func(id, s string) []byte { return f.patch(ssp2.Row{id, nil, s, nil}, 2) }
			code := func(id, s string) []byte { return f.patch(ssp2.Row{id, nil, nil, s}, 3) }

			wantApplied(t, a.push("a0", upsert("tasks", "t1", f.row("t1", "P", "first"), ver(0))))
			// (a) disjoint unversioned patches both land.
			wantApplied(t, a.push("a1", upsert("tasks", "t1", title("t1", "by alice"), nil)))
			wantApplied(t, b.push("b1", upsert("tasks", "t1", code("t1", "B1"), nil)))
			if r := f.taskRow("t1"); r.Version != 3 || r.Values[2] != "by alice" || r.Values[3] != "B1" {
				t.Fatalf("after disjoint unversioned patches: %+v", r)
			}
			// (b) disjoint patches at the same baseVersion both land: a
			// column a patch does not present keeps its version.
			wantApplied(t, a.push("a2", upsert("tasks", "t1", title("t1", "title@3"), ver(3))))
			wantApplied(t, b.push("b2", upsert("tasks", "t1", code("t1", "B2"), ver(3))))
			if r := f.taskRow("t1"); r.Version != 5 || r.Values[2] != "title@3" || r.Values[3] != "B2" {
				t.Fatalf("after disjoint versioned patches: %+v", r)
			}
			// (c) the same column from one base: the second conflicts,
			// exactly that column marked, the stored row unchanged.
			wantApplied(t, a.push("a3", upsert("tasks", "t1", title("t1", "alice wins"), ver(5))))
			pr := b.push("b3", upsert("tasks", "t1", title("t1", "bob loses"), ver(5)))
			r := wantRejected(t, pr, syncerr.VersionConflict)
			want := ssp2.NewColumnSet(4)
			want.Add(2)
			if r.Status != ssp2.OpConflict || r.ServerVersion != 6 || !bytes.Equal(r.ConflictColumns, want) {
				t.Fatalf("conflict record %+v, want serverVersion 6 and conflictColumns %08b", r, want)
			}
			if row, err := f.codec.Decode(r.ServerRow); err != nil || row[2] != "alice wins" || row[3] != "B2" {
				t.Fatalf("serverRow = %v, %v", row, err)
			}
			// The replay of the conflicting commit is byte-identical.
			first, _ := ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindResponse, Frames: []ssp2.Frame{&ssp2.RespHeader{LogEpoch: "e"}, pr}})
			again := b.push("b3", upsert("tasks", "t1", title("t1", "whatever"), nil))
			second, _ := ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindResponse, Frames: []ssp2.Frame{&ssp2.RespHeader{LogEpoch: "e"}, again}})
			if !bytes.Equal(first, second) {
				t.Fatalf("replayed conflict differs:\n%x\n%x", first, second)
			}
			// Keep-local: the same patch at serverVersion applies.
			wantApplied(t, b.push("b4", upsert("tasks", "t1", title("t1", "bob rebased"), ver(6))))
			// (f) a present scope column may not change; presenting the
			// stored value is a no-op.
			wantRejected(t, a.push("a5", upsert("tasks", "t1", f.patch(ssp2.Row{"t1", "Q", nil, nil}, 1), nil)), syncerr.InvalidRequest)
			wantApplied(t, a.push("a6", upsert("tasks", "t1", f.patch(ssp2.Row{"t1", "P", "same scope", nil}, 1, 2), nil)))
			// §6.2 step 3: a baseVersion the server never issued.
			if r := wantRejected(t, a.push("a7", upsert("tasks", "t1", title("t1", "x"), ver(99))), syncerr.InvalidRequest); r.Status != ssp2.OpError {
				t.Fatalf("base ahead: %+v", r)
			}
			if r := f.taskRow("t1"); r.Version != 8 || r.Values[1] != "P" || r.Values[2] != "same scope" {
				t.Fatalf("final row %+v", r)
			}
			// (e) a partial payload naming an absent row with no tombstone.
			wantRejected(t, a.push("a8", upsert("tasks", "t404", title("t404", "x"), nil)), syncerr.RowMissing)
			wantRejected(t, a.push("a9", upsert("tasks", "t404", f.row("t404", "P", "x"), ver(3))), syncerr.RowMissing)
			if f.taskRow("t404") != nil {
				t.Fatal("a refused write to an absent row stored it")
			}
		})
	}
}

// TestDeletePrecedence: SPEC Appendix B.20 and the absent-row table of §6.2:
// an applied delete leaves a tombstone; a later unversioned upsert (a stale
// patch or a full row) is sync.row_deleted; baseVersion 0 recreates the row
// at version 1 and clears the tombstone; once pruning passes the delete the
// tombstone is gone and an unversioned full row inserts again. A delete of
// an absent row is applied and leaves no tombstone.
func TestDeletePrecedence(t *testing.T) {
	for _, be := range crdtStores() {
		t.Run(be.name, func(t *testing.T) {
			f := newFixture(t, be.open(t))
			a, b := f.client("alice", "ca"), f.client("bob", "cb")
			wantApplied(t, a.push("create", upsert("tasks", "t1", f.row("t1", "P", "x"), nil)))
			wantApplied(t, a.push("delete", del("t1")))
			if seq := f.tombstone("t1"); seq != 2 {
				t.Fatalf("tombstone after the delete at seq 2: %d", seq)
			}
			// (a) the stale patch and a stale full row lose to the delete.
			wantRejected(t, b.push("stale-patch", upsert("tasks", "t1", f.patch(ssp2.Row{"t1", nil, "late", nil}, 2), nil)), syncerr.RowDeleted)
			r := wantRejected(t, b.push("stale-full", upsert("tasks", "t1", f.row("t1", "P", "late"), nil)), syncerr.RowDeleted)
			if r.Retryable || r.Status != ssp2.OpError {
				t.Fatalf("row_deleted record %+v", r)
			}
			if f.taskRow("t1") != nil {
				t.Fatal("a write after the delete resurrected the row")
			}
			// A delete of an absent row is applied and writes no tombstone.
			wantApplied(t, b.push("delete-absent", del("never")))
			if seq := f.tombstone("never"); seq != 0 {
				t.Fatalf("a delete of an absent row left a tombstone at %d", seq)
			}
			// (b) baseVersion 0 recreates at version 1 and clears it.
			wantApplied(t, b.push("recreate", upsert("tasks", "t1", f.row("t1", "P", "again"), ver(0))))
			if r := f.taskRow("t1"); r == nil || r.Version != 1 || r.Values[2] != "again" {
				t.Fatalf("recreated row %+v", r)
			}
			if seq := f.tombstone("t1"); seq != 0 {
				t.Fatalf("tombstone left at %d after the recreate", seq)
			}
			// (c) delete again, then prune past it: the tombstone goes with
			// the log, and an unversioned full row inserts again.
			wantApplied(t, a.push("delete-2", del("t1")))
			del2 := f.tombstone("t1")
			if del2 == 0 {
				t.Fatal("no tombstone after the second delete")
			}
			wantApplied(t, a.push("other", upsert("tasks", "t2", f.row("t2", "P", "y"), nil)))
			rep, err := f.eng.Retention().Prune(context.Background(), "p1", keepNewest(1), false)
			if err != nil || rep.HorizonAfter < del2 {
				t.Fatalf("prune: %+v %v, want the horizon at or past %d", rep, err, del2)
			}
			if rep.Tombstones < 1 {
				t.Fatalf("prune removed %d tombstones, want the delete's", rep.Tombstones)
			}
			if seq := f.tombstone("t1"); seq != 0 {
				t.Fatalf("tombstone %d survived pruning to %d", seq, rep.HorizonAfter)
			}
			wantApplied(t, b.push("after-horizon", upsert("tasks", "t1", f.row("t1", "P", "back"), nil)))
			if r := f.taskRow("t1"); r == nil || r.Version != 1 || r.Values[2] != "back" {
				t.Fatalf("row inserted after the horizon passed the delete: %+v", r)
			}
		})
	}
}
