package storagetest

import (
	"github.com/synclane/synclane/storage"
)

var constraintTests = []test{
	{name: "UniqueIndex", fn: func(e *env) {
		tx := e.begin("p")
		defer func() { _ = tx.Rollback(e.ctx) }()
		e.must(tx.Savepoint(e.ctx))
		e.put(tx, e.items, 1, itemCode("r1", "p1", 1, "X"))
		e.must(tx.ReleaseSavepoint(e.ctx))

		e.must(tx.Savepoint(e.ctx))
		e.put(tx, e.items, 1, itemCode("other", "p1", 1, "Z"))
		err := tx.PutRow(e.ctx, e.items, storage.RowRecord{RowID: "r2", Version: 1, Values: itemCode("r2", "p1", 1, "X")})
		wantErrIs(e, "insert duplicate code", err, storage.ErrConstraint)
		e.must(tx.RollbackToSavepoint(e.ctx))
		if r := e.getRow(tx, e.items, "r2"); r != nil {
			e.t.Fatalf("violating row stored: %+v", r)
		}
		if r := e.getRow(tx, e.items, "other"); r != nil {
			e.t.Fatalf("write before the violation survived RollbackToSavepoint: %+v", r)
		}
		// The transaction stays usable.
		e.must(tx.Savepoint(e.ctx))
		e.put(tx, e.items, 1, itemCode("r2", "p1", 1, "Y"))
		e.put(tx, e.items, 2, itemCode("r1", "p1", 1, "X")) // same row, same code
		e.put(tx, e.items, 1, itemCode("n1", "p1", 1, nil))
		e.put(tx, e.items, 1, itemCode("n2", "p1", 1, nil)) // NULLs never collide
		e.appendNext(tx)
		e.must(tx.ReleaseSavepoint(e.ctx))
		e.must(tx.Commit(e.ctx))

		e.wantRow("r1", e.committedRow("p", e.items, "r1"), storage.RowRecord{RowID: "r1", Version: 2, Values: itemCode("r1", "p1", 1, "X")})
		e.wantRow("r2", e.committedRow("p", e.items, "r2"), storage.RowRecord{RowID: "r2", Version: 1, Values: itemCode("r2", "p1", 1, "Y")})
		if e.readPartition("p").MaxCommitSeq != 1 {
			e.t.Fatal("commit lost after a constraint violation")
		}

		// Update path: moving r2 onto r1's code violates; freeing it first works.
		e.push("p", func(tx storage.PushTx) {
			e.must(tx.Savepoint(e.ctx))
			err := tx.PutRow(e.ctx, e.items, storage.RowRecord{RowID: "r2", Version: 2, Values: itemCode("r2", "p1", 1, "X")})
			wantErrIs(e, "update onto taken code", err, storage.ErrConstraint)
			e.must(tx.RollbackToSavepoint(e.ctx))
			e.put(tx, e.items, 3, itemCode("r1", "p1", 1, "W"))
			e.put(tx, e.items, 2, itemCode("r2", "p1", 1, "X"))
			e.must(tx.ReleaseSavepoint(e.ctx))
		})
		e.wantRow("r2 moved", e.committedRow("p", e.items, "r2"), storage.RowRecord{RowID: "r2", Version: 2, Values: itemCode("r2", "p1", 1, "X")})

		// Uniqueness is per partition.
		e.push("q", func(tx storage.PushTx) { e.put(tx, e.items, 1, itemCode("q1", "p1", 1, "X")) })
	}},
	{name: "NotNull", fn: func(e *env) {
		tx := e.begin("p")
		defer func() { _ = tx.Rollback(e.ctx) }()
		if err := tx.Savepoint(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		row := item("r", "p1", 1)
		row[1] = nil
		err := tx.PutRow(e.ctx, e.items, storage.RowRecord{RowID: "r", Version: 1, Values: row})
		wantErrIs(e, "NULL in non-nullable column", err, storage.ErrConstraint)
		if err := tx.RollbackToSavepoint(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		e.put(tx, e.items, 1, item("r", "p1", 1))
		if err := tx.Commit(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		if e.committedRow("p", e.items, "r") == nil {
			e.t.Fatal("row written after the violation is missing")
		}
	}},
}
