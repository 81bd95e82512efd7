package storagetest

import (
	"strconv"
	"strings"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
)

// Delete tombstones (SPEC §2.2): PushTx.DeleteRow records (partition,
// table, row, seq), replacing an earlier one, whether or not the row
// existed (the caller decides when a delete leaves one); Tombstone reads
// it as the transaction sees it; ClearTombstone removes it; savepoints and
// rollback undo all three with the row writes; pruning removes the
// tombstones at or below the new horizon in the same pass and counts them
// (PruneBatch, CountPrune, PruneThrough); snapshots carry them and a log
// epoch rotation keeps them.

// tomb reads the row's tombstone in tx.
func (e *env) tomb(tx storage.PushTx, t *schema.Table, id string) int64 {
	e.t.Helper()
	seq, err := tx.Tombstone(e.ctx, t, id)
	if err != nil {
		e.t.Fatalf("Tombstone(%s, %q): %v", t.Name, id, err)
	}
	return seq
}

// wantTomb checks the row's tombstone as tx sees it.
func (e *env) wantTomb(what string, tx storage.PushTx, t *schema.Table, id string, want int64) {
	e.t.Helper()
	if got := e.tomb(tx, t, id); got != want {
		e.t.Fatalf("%s: Tombstone(%s, %q) = %d, want %d", what, t.Name, id, got, want)
	}
}

// committedTombs reads the tombstones of items ids in a fresh PushTx it
// rolls back, as "id=seq" joined by spaces (0 for none).
func (e *env) committedTombs(partition string, t *schema.Table, ids ...string) string {
	e.t.Helper()
	tx := e.begin(partition)
	defer func() { _ = tx.Rollback(e.ctx) }()
	var out []string
	for _, id := range ids {
		out = append(out, id+"="+itoa(e.tomb(tx, t, id)))
	}
	return strings.Join(out, " ")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// deleteAt deletes the row in tx with a tombstone at seq.
func (e *env) deleteAt(tx storage.PushTx, t *schema.Table, id string, seq int64) {
	e.t.Helper()
	if err := tx.DeleteRow(e.ctx, t, id, seq); err != nil {
		e.t.Fatalf("DeleteRow(%s, %q, %d): %v", t.Name, id, seq, err)
	}
}

func (e *env) clearTomb(tx storage.PushTx, t *schema.Table, id string) {
	e.t.Helper()
	if err := tx.ClearTombstone(e.ctx, t, id); err != nil {
		e.t.Fatalf("ClearTombstone(%s, %q): %v", t.Name, id, err)
	}
}

var tombstoneTests = []test{
	{name: "RecordReplaceClear", fn: func(e *env) {
		e.push("p", func(tx storage.PushTx) {
			e.put(tx, e.items, 1, item("a", "p1", 1))
			e.put(tx, e.items, 1, item("b", "p1", 1))
			e.appendNext(tx)
		})
		e.push("p", func(tx storage.PushTx) {
			e.wantTomb("before any delete", tx, e.items, "a", 0)
			e.deleteAt(tx, e.items, "a", 2)
			if r := e.getRow(tx, e.items, "a"); r != nil {
				e.t.Fatalf("row after DeleteRow: %+v", r)
			}
			e.wantTomb("after DeleteRow", tx, e.items, "a", 2)
			// The caller decides: an absent row's delete records one too.
			e.deleteAt(tx, e.items, "never", 2)
			e.wantTomb("delete of an absent row", tx, e.items, "never", 2)
			e.wantTomb("another table, same id", tx, e.notes, "a", 0)
			e.appendNext(tx)
		})
		if got, want := e.committedTombs("p", e.items, "a", "b", "never"), "a=2 b=0 never=2"; got != want {
			e.t.Fatalf("after commit: %s, want %s", got, want)
		}
		if got := e.committedTombs("other", e.items, "a"); got != "a=0" {
			e.t.Fatalf("another partition sees %s", got)
		}
		e.push("p", func(tx storage.PushTx) {
			e.deleteAt(tx, e.items, "a", 3) // replaces
			e.deleteAt(tx, e.items, "b", 3)
			e.clearTomb(tx, e.items, "never")
			e.wantTomb("cleared in the transaction", tx, e.items, "never", 0)
			e.clearTomb(tx, e.items, "none") // no tombstone: a no-op
			e.appendNext(tx)
		})
		if got, want := e.committedTombs("p", e.items, "a", "b", "never", "none"), "a=3 b=3 never=0 none=0"; got != want {
			e.t.Fatalf("after replace and clear: %s, want %s", got, want)
		}
		// A row put over a tombstone keeps it: the caller clears it.
		e.push("p", func(tx storage.PushTx) { e.put(tx, e.items, 1, item("a", "p1", 1)) })
		if got, want := e.committedTombs("p", e.items, "a"), "a=3"; got != want {
			e.t.Fatalf("after PutRow: %s, want %s", got, want)
		}
		tx := e.begin("p")
		defer func() { _ = tx.Rollback(e.ctx) }()
		if err := tx.DeleteRow(e.ctx, e.items, "a", 0); err == nil {
			e.t.Fatal("DeleteRow with tombstone seq 0 succeeded")
		}
	}},
	{name: "SavepointAndRollback", fn: func(e *env) {
		e.push("p", func(tx storage.PushTx) {
			e.put(tx, e.items, 1, item("a", "p1", 1))
			e.put(tx, e.items, 1, item("b", "p1", 1))
			e.deleteAt(tx, e.items, "c", 1)
			e.deleteAt(tx, e.items, "d", 1)
			e.appendNext(tx)
		})
		tx := e.begin("p")
		e.must(tx.Savepoint(e.ctx))
		e.deleteAt(tx, e.items, "a", 2)
		e.deleteAt(tx, e.items, "c", 2)
		e.clearTomb(tx, e.items, "d")
		e.wantTomb("a deleted after the savepoint", tx, e.items, "a", 2)
		e.must(tx.RollbackToSavepoint(e.ctx))
		e.wantTomb("a after the rollback", tx, e.items, "a", 0)
		e.wantTomb("c after the rollback", tx, e.items, "c", 1)
		e.wantTomb("d after the rollback", tx, e.items, "d", 1)
		e.wantRow("a after the rollback", e.getRow(tx, e.items, "a"), storage.RowRecord{RowID: "a", Version: 1, Values: item("a", "p1", 1)})
		// A released savepoint keeps its writes; a later one is undone alone.
		e.deleteAt(tx, e.items, "b", 2)
		e.must(tx.ReleaseSavepoint(e.ctx))
		e.must(tx.Savepoint(e.ctx))
		e.clearTomb(tx, e.items, "b")
		e.wantTomb("b cleared after the second savepoint", tx, e.items, "b", 0)
		e.must(tx.RollbackToSavepoint(e.ctx))
		e.wantTomb("b after the second rollback", tx, e.items, "b", 2)
		e.must(tx.ReleaseSavepoint(e.ctx))
		e.must(tx.Commit(e.ctx))
		if got, want := e.committedTombs("p", e.items, "a", "b", "c", "d"), "a=0 b=2 c=1 d=1"; got != want {
			e.t.Fatalf("after commit: %s, want %s", got, want)
		}
		// A rolled-back transaction leaves nothing.
		tx = e.begin("p")
		e.deleteAt(tx, e.items, "a", 3)
		e.clearTomb(tx, e.items, "c")
		e.must(tx.Rollback(e.ctx))
		if got, want := e.committedTombs("p", e.items, "a", "b", "c", "d"), "a=0 b=2 c=1 d=1"; got != want {
			e.t.Fatalf("after Rollback: %s, want %s", got, want)
		}
		if r := e.committedRow("p", e.items, "a"); r == nil {
			e.t.Fatal("row a deleted by a rolled-back transaction")
		}
	}},
	{name: "Prefetched", fn: func(e *env) {
		e.push("p", func(tx storage.PushTx) {
			e.put(tx, e.items, 1, item("live", "p1", 1))
			e.deleteAt(tx, e.items, "dead", 4)
			e.deleteAt(tx, e.items, "dead2", 5)
			e.deleteAt(tx, e.notes, "dead", 6)
			e.appendNext(tx)
		})
		tx := e.begin("p")
		defer func() { _ = tx.Rollback(e.ctx) }()
		keys := []storage.RowKey{{Table: e.items, RowID: "live"}, {Table: e.items, RowID: "dead"}, {Table: e.items, RowID: "dead2"},
			{Table: e.items, RowID: "fresh"}, {Table: e.notes, RowID: "dead"}, {Table: e.items, RowID: "bad\x00id"}}
		e.prefetch(tx, nil, keys)
		// The answers are the database's, asked once or twice.
		for range 2 {
			e.wantTomb("prefetched tombstone", tx, e.items, "dead", 4)
			e.wantTomb("prefetched absent row without one", tx, e.items, "fresh", 0)
			e.wantTomb("prefetched other table", tx, e.notes, "dead", 6)
			e.wantTomb("prefetched unstorable id", tx, e.items, "bad\x00id", 0)
		}
		// Written after the prefetch: the write is what a read answers.
		e.must(tx.Savepoint(e.ctx))
		e.clearTomb(tx, e.items, "dead")
		e.wantTomb("cleared after the prefetch", tx, e.items, "dead", 0)
		e.deleteAt(tx, e.items, "fresh", 7)
		e.wantTomb("deleted after the prefetch", tx, e.items, "fresh", 7)
		e.clearTomb(tx, e.items, "dead2")
		e.must(tx.RollbackToSavepoint(e.ctx))
		e.wantTomb("cleared, rolled back", tx, e.items, "dead", 4)
		e.wantTomb("recorded, rolled back", tx, e.items, "fresh", 0)
		e.wantTomb("cleared unread, rolled back", tx, e.items, "dead2", 5)
		// A prefetch after writes, then a rollback past them: the answers
		// follow the rollback, not the prefetch.
		e.must(tx.Savepoint(e.ctx))
		e.clearTomb(tx, e.items, "dead")
		e.deleteAt(tx, e.items, "fresh", 8)
		e.prefetch(tx, nil, keys)
		e.wantTomb("prefetched after a clear", tx, e.items, "dead", 0)
		e.must(tx.RollbackToSavepoint(e.ctx))
		e.wantTomb("prefetched after a clear, rolled back", tx, e.items, "dead", 4)
		e.wantTomb("prefetched after a delete, rolled back", tx, e.items, "fresh", 0)
		// Clearing a row the prefetch found without one, then a delete and
		// a clear again: the tombstone really goes.
		e.clearTomb(tx, e.items, "fresh")
		e.deleteAt(tx, e.items, "fresh", 9)
		e.clearTomb(tx, e.items, "fresh")
		e.wantTomb("delete then clear", tx, e.items, "fresh", 0)
		e.must(tx.ReleaseSavepoint(e.ctx))
		e.must(tx.Commit(e.ctx))
		if got, want := e.committedTombs("p", e.items, "live", "dead", "dead2", "fresh"), "live=0 dead=4 dead2=5 fresh=0"; got != want {
			e.t.Fatalf("after commit: %s, want %s", got, want)
		}
	}},
	{name: "UnstorableRowIDs", fn: func(e *env) {
		long := strings.Repeat("x", storage.MaxIdentifierBytes+1)
		keyLong := strings.Repeat("y", storage.MaxIdentifierBytes)
		e.push("p", func(tx storage.PushTx) {
			for _, id := range []string{"bad\x00id", "\xff", long} {
				e.deleteAt(tx, e.items, id, 1)
				e.wantTomb("unstorable row id "+storage.QuoteID(id), tx, e.items, id, 0)
				e.clearTomb(tx, e.items, id)
			}
			e.deleteAt(tx, e.items, keyLong, 1)
			e.wantTomb("longest storable row id", tx, e.items, keyLong, 1)
			e.appendNext(tx)
		})
		if err := storage.CheckTombstone("p", "items", long); err == nil {
			e.t.Fatal("CheckTombstone accepted a row id over MaxIdentifierBytes")
		}
	}},
	{name: "RotateLogEpochKeeps", fn: func(e *env) {
		e.push("p", func(tx storage.PushTx) {
			e.deleteAt(tx, e.items, "a", 1)
			e.appendNext(tx)
		})
		if _, err := e.b.Log.RotateLogEpoch(e.ctx, "p", 5); err != nil {
			e.t.Fatal(err)
		}
		if got := e.committedTombs("p", e.items, "a"); got != "a=1" {
			e.t.Fatalf("after RotateLogEpoch: %s, want a=1", got)
		}
	}},
}

// tombstoneFixture commits, in partition p, seqs 1..6 where commit k
// deletes items row "d<k>" with a tombstone at k (commit 6 also deletes
// notes "n6"), and in partition other one commit deleting items "d1".
func (e *env) tombstoneFixture() {
	e.t.Helper()
	for k := int64(1); k <= 6; k++ {
		e.push("p", func(tx storage.PushTx) {
			e.deleteAt(tx, e.items, "d"+itoa(k), k)
			if k == 6 {
				e.deleteAt(tx, e.notes, "n6", k)
			}
			e.appendNext(tx, del("items", "d"+itoa(k), sc("project", "p1", "owner", "1")))
		})
	}
	e.push("other", func(tx storage.PushTx) {
		e.deleteAt(tx, e.items, "d1", 1)
		e.appendNext(tx)
	})
}

var tombstoneRetentionTests = []test{
	{name: "PruneBatchAndCount", fn: func(e *env) {
		e.tombstoneFixture()
		count := func(through int64) storage.PruneResult {
			e.t.Helper()
			r, err := e.b.Retention.CountPrune(e.ctx, "p", through)
			if err != nil {
				e.t.Fatal(err)
			}
			return r
		}
		if r := count(3); r.Tombstones != 3 {
			e.t.Fatalf("CountPrune through 3: %+v, want 3 tombstones", r)
		}
		if r := count(100); r.Tombstones != 7 {
			e.t.Fatalf("CountPrune through 100: %+v, want 7 tombstones", r)
		}
		counted := count(4)
		var pruned storage.PruneResult
		for range 3 {
			pruned.Add(e.prune("p", 4, 2))
		}
		if pruned != counted || pruned.Tombstones != 4 || pruned.HorizonSeq != 4 {
			e.t.Fatalf("batches through 4 deleted %+v, CountPrune said %+v; want 4 tombstones at horizon 4", pruned, counted)
		}
		if got, want := e.committedTombs("p", e.items, "d1", "d4", "d5", "d6"), "d1=0 d4=0 d5=5 d6=6"; got != want {
			e.t.Fatalf("after pruning through 4: %s, want %s", got, want)
		}
		if got := e.committedTombs("other", e.items, "d1"); got != "d1=1" {
			e.t.Fatalf("another partition after pruning: %s", got)
		}
		if r := count(4); r.Tombstones != 0 || r.HorizonSeq != 4 {
			e.t.Fatalf("CountPrune at the horizon: %+v", r)
		}
		// A tombstone written later with an old seq (a restored capture)
		// goes with the next batch that raises the horizon.
		e.push("p", func(tx storage.PushTx) {
			e.deleteAt(tx, e.items, "old", 2)
			e.appendNext(tx)
		})
		if r := count(5); r.Tombstones != 2 {
			e.t.Fatalf("CountPrune through 5 with an old tombstone: %+v, want 2", r)
		}
		if r := e.prune("p", 5, 10); r.Tombstones != 2 || r.HorizonSeq != 5 {
			e.t.Fatalf("PruneBatch through 5: %+v, want 2 tombstones", r)
		}
		if r := e.prune("p", 100, 10); r.Tombstones != 2 || r.HorizonSeq != 7 {
			e.t.Fatalf("PruneBatch through 100: %+v, want the last 2 tombstones", r)
		}
		if got, want := e.committedTombs("p", e.items, "d6", "old"), "d6=0 old=0"; got != want {
			e.t.Fatalf("after pruning everything: %s, want %s", got, want)
		}
		tx := e.begin("p")
		e.wantTomb("notes after pruning everything", tx, e.notes, "n6", 0)
		e.must(tx.Rollback(e.ctx))
	}},
	{name: "Snapshot", roles: []string{"Snapshots"}, fn: func(e *env) {
		e.tombstoneFixture()
		if err := e.b.Snapshots.CapturePartition(e.ctx, "p"); err != nil {
			e.t.Fatal(err)
		}
		e.push("p", func(tx storage.PushTx) {
			e.clearTomb(tx, e.items, "d1")
			e.deleteAt(tx, e.items, "d2", 7)
			e.deleteAt(tx, e.items, "late", 7)
			e.appendNext(tx)
		})
		if _, err := e.b.Snapshots.RestorePartition(e.ctx, "p", 9); err != nil {
			e.t.Fatal(err)
		}
		if got, want := e.committedTombs("p", e.items, "d1", "d2", "d6", "late"), "d1=1 d2=2 d6=6 late=0"; got != want {
			e.t.Fatalf("after restore: %s, want %s", got, want)
		}
		if got := e.committedTombs("other", e.items, "d1"); got != "d1=1" {
			e.t.Fatalf("another partition after restore: %s", got)
		}
	}},
	{name: "PruneThrough", roles: []string{"Checkpoints"}, fn: func(e *env) {
		e.tombstoneFixture()
		if err := e.b.Checkpoints.PruneThrough(e.ctx, "p", 3); err != nil {
			e.t.Fatal(err)
		}
		if got, want := e.committedTombs("p", e.items, "d3", "d4"), "d3=0 d4=4"; got != want {
			e.t.Fatalf("after PruneThrough 3: %s, want %s", got, want)
		}
	}},
}
