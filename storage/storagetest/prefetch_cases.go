package storagetest

import (
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// prefetch calls tx's Prefetch (a no-op on a backend that does not read
// ahead), so the cases below check the same answers on every backend.
func (e *env) prefetch(tx storage.PushTx, idem []storage.IdempotencyKey, rows []storage.RowKey) {
	e.t.Helper()
	e.must(tx.Prefetch(e.ctx, idem, rows))
}

var prefetchTests = []test{
	{name: "SameAnswers", fn: func(e *env) {
		// Committed state: rows a and b, an applied record for k1.
		e.touch("p")
		applied := storage.IdempotencyRecord{ClientID: "c", ClientCommitID: "k1", Status: ssp2.CommitApplied, CommitSeq: 1, Result: []byte("r1")}
		e.push("p", func(tx storage.PushTx) {
			e.put(tx, e.items, 1, item("a", "p1", 1))
			e.put(tx, e.items, 1, item("b", "p1", 2))
			e.appendNext(tx, upsert("items", "a", 1, sc("project", "p1", "owner", "1")))
			e.must(tx.PutIdempotency(e.ctx, applied))
		})

		tx := e.begin("p")
		defer func() { _ = tx.Rollback(e.ctx) }()
		e.prefetch(tx,
			[]storage.IdempotencyKey{{ClientID: "c", ClientCommitID: "k1"}, {ClientID: "c", ClientCommitID: "k2"}, {ClientID: "c", ClientCommitID: "bad\x00key"}},
			[]storage.RowKey{{Table: e.items, RowID: "a"}, {Table: e.items, RowID: "b"}, {Table: e.items, RowID: "c"}, {Table: e.items, RowID: "a"}, {Table: e.items, RowID: "bad\x00id"}})

		r, err := tx.LookupIdempotency(e.ctx, "c", "k1")
		e.wantIdem("prefetched record", r, err, &applied)
		// A record put in the transaction answers, not the prefetched absence.
		mine := storage.IdempotencyRecord{ClientID: "c", ClientCommitID: "k2", Status: ssp2.CommitRejected, Result: []byte("no")}
		e.must(tx.PutIdempotency(e.ctx, mine))
		r, err = tx.LookupIdempotency(e.ctx, "c", "k2")
		e.wantIdem("record put after the prefetch", r, err, &mine)
		r, err = tx.LookupIdempotency(e.ctx, "c", "bad\x00key")
		e.wantIdem("unstorable key", r, err, nil)

		e.wantRow("prefetched row", e.getRow(tx, e.items, "a"), storage.RowRecord{RowID: "a", Version: 1, Values: item("a", "p1", 1)})
		if got := e.getRow(tx, e.items, "c"); got != nil {
			e.t.Fatalf("prefetched absent row: got %+v", got)
		}
		// Written after the prefetch, without a read in between: the write
		// is what a read answers, for a row that existed and one that did not.
		e.put(tx, e.items, 2, item("b", "p2", 3))
		e.wantRow("row rewritten after the prefetch", e.getRow(tx, e.items, "b"), storage.RowRecord{RowID: "b", Version: 2, Values: item("b", "p2", 3)})
		e.must(tx.Savepoint(e.ctx))
		e.put(tx, e.items, 1, item("c", "p1", 4))
		e.wantRow("row created after the prefetch", e.getRow(tx, e.items, "c"), storage.RowRecord{RowID: "c", Version: 1, Values: item("c", "p1", 4)})
		e.must(tx.DeleteRow(e.ctx, e.items, "a", tx.Partition().MaxCommitSeq+1))
		if got := e.getRow(tx, e.items, "a"); got != nil {
			e.t.Fatalf("row deleted after the prefetch: got %+v", got)
		}
		// Rolled back to the savepoint: the state before it again.
		e.must(tx.RollbackToSavepoint(e.ctx))
		if got := e.getRow(tx, e.items, "c"); got != nil {
			e.t.Fatalf("created row after the rollback: got %+v", got)
		}
		e.wantRow("deleted row after the rollback", e.getRow(tx, e.items, "a"), storage.RowRecord{RowID: "a", Version: 1, Values: item("a", "p1", 1)})
		e.wantRow("row rewritten before the savepoint", e.getRow(tx, e.items, "b"), storage.RowRecord{RowID: "b", Version: 2, Values: item("b", "p2", 3)})
		if got := e.getRow(tx, e.items, "bad\x00id"); got != nil {
			e.t.Fatalf("unstorable row id: got %+v", got)
		}
	}},
}
