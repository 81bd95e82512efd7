package storagetest

import (
	"strconv"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

var pushTxTests = []test{
	{name: "BeginCreatesPartition", fn: func(e *env) {
		tx := e.begin("p")
		p := tx.Partition()
		if !p.Exists || p.LogEpoch == "" || p.Partition != "p" || p.MaxCommitSeq != 0 {
			e.t.Fatalf("Partition() in first PushTx = %+v", p)
		}
		if err := tx.Commit(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		if r := e.readPartition("p"); !r.Exists || r.LogEpoch != p.LogEpoch {
			e.t.Fatalf("ReadPartition = %+v, want epoch %q", r, p.LogEpoch)
		}
	}},
	{name: "SeqDense", fn: func(e *env) {
		e.touch("p")
		tx := e.begin("p")
		for want := int64(1); want <= 3; want++ {
			if got := e.appendNext(tx); got != want {
				e.t.Fatalf("seq %d, want %d", got, want)
			}
		}
		if err := tx.Commit(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		tx = e.begin("p")
		defer func() { _ = tx.Rollback(e.ctx) }()
		if got := tx.Partition().MaxCommitSeq; got != 3 {
			e.t.Fatalf("MaxCommitSeq in next tx = %d, want 3", got)
		}
		for _, bad := range []int64{0, 1, 3, 5, -1} {
			err := tx.AppendCommit(e.ctx, storage.CommitRecord{Seq: bad})
			wantErrIs(e, "AppendCommit wrong seq", err, storage.ErrConflictingSeq)
		}
		if got := tx.Partition().MaxCommitSeq; got != 3 {
			e.t.Fatalf("MaxCommitSeq after refused appends = %d", got)
		}
		if got := e.appendNext(tx); got != 4 {
			e.t.Fatalf("append after refused appends: seq %d", got)
		}
	}},
	{name: "GetRowSeesOwnWrites", fn: func(e *env) {
		tx := e.begin("p")
		defer func() { _ = tx.Rollback(e.ctx) }()
		if r := e.getRow(tx, e.items, "r"); r != nil {
			e.t.Fatalf("GetRow of absent row = %+v", r)
		}
		e.put(tx, e.items, 1, item("r", "p1", 1))
		e.wantRow("own insert", e.getRow(tx, e.items, "r"), storage.RowRecord{RowID: "r", Version: 1, Values: item("r", "p1", 1)})
		row2 := item("r", "p1", 1)
		row2[3] = "title"
		e.put(tx, e.items, 2, row2)
		e.wantRow("own replace", e.getRow(tx, e.items, "r"), storage.RowRecord{RowID: "r", Version: 2, Values: row2})
		if r := e.getRow(tx, e.notes, "r"); r != nil {
			e.t.Fatalf("row leaked across tables: %+v", r)
		}
		if err := tx.DeleteRow(e.ctx, e.items, "r", tx.Partition().MaxCommitSeq+1); err != nil {
			e.t.Fatal(err)
		}
		if r := e.getRow(tx, e.items, "r"); r != nil {
			e.t.Fatalf("GetRow after DeleteRow = %+v", r)
		}
		if err := tx.DeleteRow(e.ctx, e.items, "absent", tx.Partition().MaxCommitSeq+1); err != nil {
			e.t.Fatalf("DeleteRow of absent row: %v", err)
		}
	}},
	{name: "PutRowReplaceCommitted", fn: func(e *env) {
		e.push("p", func(tx storage.PushTx) {
			e.put(tx, e.items, 1, item("r", "p1", 1))
			e.put(tx, e.notes, 1, note("n", "p1", "x"))
		})
		row2 := item("r", "p1", 1)
		row2[4] = int64(42)
		e.push("p", func(tx storage.PushTx) {
			e.put(tx, e.items, 2, row2)
			if err := tx.DeleteRow(e.ctx, e.notes, "n", tx.Partition().MaxCommitSeq+1); err != nil {
				e.t.Fatal(err)
			}
		})
		e.wantRow("replaced", e.committedRow("p", e.items, "r"), storage.RowRecord{RowID: "r", Version: 2, Values: row2})
		if r := e.committedRow("p", e.notes, "n"); r != nil {
			e.t.Fatalf("deleted note still there: %+v", r)
		}
	}},
	{name: "Savepoint", fn: func(e *env) {
		e.push("p", func(tx storage.PushTx) {
			e.put(tx, e.items, 1, item("keep", "p1", 1))
			e.appendNext(tx, upsert("items", "keep", 1, sc("project", "p1", "owner", "1")))
		})
		tx := e.begin("p")
		defer func() { _ = tx.Rollback(e.ctx) }()
		// Commit A: kept via ReleaseSavepoint.
		e.must(tx.Savepoint(e.ctx))
		e.put(tx, e.items, 1, item("a", "p1", 1))
		e.appendNext(tx, upsert("items", "a", 1, sc("project", "p1", "owner", "1")))
		e.must(tx.PutIdempotency(e.ctx, storage.IdempotencyRecord{ClientID: "c", ClientCommitID: "A", Status: ssp2.CommitApplied, CommitSeq: 2}))
		e.must(tx.ReleaseSavepoint(e.ctx))
		// Commit B: undone.
		e.must(tx.Savepoint(e.ctx))
		e.put(tx, e.items, 1, item("b", "p1", 1))
		changed := item("keep", "p1", 1)
		changed[3] = "changed"
		e.put(tx, e.items, 2, changed)
		e.must(tx.DeleteRow(e.ctx, e.items, "a", tx.Partition().MaxCommitSeq+1))
		e.appendNext(tx, upsert("items", "b", 1, sc("project", "p1", "owner", "1")))
		e.must(tx.PutIdempotency(e.ctx, storage.IdempotencyRecord{ClientID: "c", ClientCommitID: "B", Status: ssp2.CommitApplied, CommitSeq: 3}))
		e.must(tx.RollbackToSavepoint(e.ctx))
		if got := tx.Partition().MaxCommitSeq; got != 2 {
			e.t.Fatalf("MaxCommitSeq after RollbackToSavepoint = %d, want 2", got)
		}
		if r := e.getRow(tx, e.items, "b"); r != nil {
			e.t.Fatalf("row b survived RollbackToSavepoint: %+v", r)
		}
		e.wantRow("a restored", e.getRow(tx, e.items, "a"), storage.RowRecord{RowID: "a", Version: 1, Values: item("a", "p1", 1)})
		e.wantRow("keep restored", e.getRow(tx, e.items, "keep"), storage.RowRecord{RowID: "keep", Version: 1, Values: item("keep", "p1", 1)})
		if rec, err := tx.LookupIdempotency(e.ctx, "c", "B"); err != nil || rec != nil {
			e.t.Fatalf("idempotency B survived: %+v %v", rec, err)
		}
		// Savepoints do not nest: a new one replaces the old.
		e.must(tx.Savepoint(e.ctx))
		e.put(tx, e.items, 1, item("c1", "p1", 1))
		e.must(tx.Savepoint(e.ctx))
		e.put(tx, e.items, 1, item("c2", "p1", 1))
		e.must(tx.RollbackToSavepoint(e.ctx))
		if e.getRow(tx, e.items, "c1") == nil || e.getRow(tx, e.items, "c2") != nil {
			e.t.Fatal("RollbackToSavepoint did not return to the latest savepoint")
		}
		// The seq freed by the rollback is reused.
		if seq := e.appendNext(tx, upsert("items", "c1", 1, sc("project", "p1", "owner", "1"))); seq != 3 {
			e.t.Fatalf("seq after rollback = %d, want 3", seq)
		}
		e.must(tx.Commit(e.ctx))

		got := e.scanChanges("p", storage.ChangeQuery{Table: "items", Scopes: map[string][]string{"project": {"p1"}}, UpToSeq: 10, LimitChanges: 100})
		e.wantScan("log after savepoints", got, ptr(false),
			cc(1, upsert("items", "keep", 1, sc("project", "p1", "owner", "1"))),
			cc(2, upsert("items", "a", 1, sc("project", "p1", "owner", "1"))),
			cc(3, upsert("items", "c1", 1, sc("project", "p1", "owner", "1"))))
		if rec, _ := e.b.Log.LookupIdempotency(e.ctx, "p", "c", "A"); rec == nil || rec.CommitSeq != 2 {
			e.t.Fatalf("idempotency A = %+v", rec)
		}
		if rec, _ := e.b.Log.LookupIdempotency(e.ctx, "p", "c", "B"); rec != nil {
			e.t.Fatalf("idempotency B = %+v", rec)
		}
	}},
	{name: "ManyCommitsOneTx", fn: func(e *env) {
		// More commits, changes and idempotency records in one
		// transaction than a backend that defers log writes puts in one
		// statement; a key put twice keeps its latest record, and a
		// rollback to a savepoint restores the record it replaced.
		const n = 150
		e.touch("p")
		tx := e.begin("p")
		defer func() { _ = tx.Rollback(e.ctx) }()
		idem := func(k string, seq int64) storage.IdempotencyRecord {
			return storage.IdempotencyRecord{ClientID: "c", ClientCommitID: k, Status: ssp2.CommitApplied, CommitSeq: seq, Result: []byte(k)}
		}
		var want []storage.CommitChanges
		for i := 1; i <= n; i++ {
			id := "r" + strconv.Itoa(i)
			project := "p" + strconv.Itoa(i%3)
			chs := []storage.ChangeRecord{upsert("items", id, 1, sc("project", project, "owner", "1")), upsert("items", id+"b", 1, sc("project", project, "owner", "2"))}
			seq := e.appendNext(tx, chs...)
			if project == "p1" {
				want = append(want, cc(seq, chs...))
			}
			e.must(tx.PutIdempotency(e.ctx, idem("k"+strconv.Itoa(i), seq)))
		}
		e.must(tx.PutIdempotency(e.ctx, idem("k1", 99)))
		e.must(tx.Savepoint(e.ctx))
		e.must(tx.PutIdempotency(e.ctx, idem("k1", 100)))
		e.must(tx.PutIdempotency(e.ctx, idem("k-undone", 101)))
		e.must(tx.RollbackToSavepoint(e.ctx))
		e.must(tx.ReleaseSavepoint(e.ctx))
		r, err := tx.LookupIdempotency(e.ctx, "c", "k1")
		e.wantIdem("tx lookup after rollback", r, err, ptr(idem("k1", 99)))
		e.must(tx.Commit(e.ctx))

		got := e.scanChanges("p", storage.ChangeQuery{Table: "items", Scopes: map[string][]string{"project": {"p1"}}, UpToSeq: n, LimitChanges: 10 * n})
		e.wantScan("log of many commits", got, ptr(false), want...)
		if p := e.readPartition("p"); p.MaxCommitSeq != n {
			e.t.Fatalf("MaxCommitSeq = %d, want %d", p.MaxCommitSeq, n)
		}
		for _, k := range []int{2, 64, 65, 128, n} {
			key := "k" + strconv.Itoa(k)
			r, err := e.b.Log.LookupIdempotency(e.ctx, "p", "c", key)
			e.wantIdem("store lookup "+key, r, err, ptr(idem(key, int64(k))))
		}
		r, err = e.b.Log.LookupIdempotency(e.ctx, "p", "c", "k1")
		e.wantIdem("store lookup of the replaced key", r, err, ptr(idem("k1", 99)))
		r, err = e.b.Log.LookupIdempotency(e.ctx, "p", "c", "k-undone")
		e.wantIdem("store lookup of a rolled-back key", r, err, nil)
	}},
	{name: "Rollback", fn: func(e *env) {
		e.touch("p")
		tx := e.begin("p")
		e.put(tx, e.items, 1, item("r", "p1", 1))
		e.appendNext(tx, upsert("items", "r", 1, sc("project", "p1", "owner", "1")))
		if err := tx.PutIdempotency(e.ctx, storage.IdempotencyRecord{ClientID: "c", ClientCommitID: "k", Status: ssp2.CommitApplied, CommitSeq: 1}); err != nil {
			e.t.Fatal(err)
		}
		if err := tx.Rollback(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		if err := tx.Rollback(e.ctx); err != nil {
			e.t.Fatalf("second Rollback: %v", err)
		}
		if p := e.readPartition("p"); p.MaxCommitSeq != 0 {
			e.t.Fatalf("MaxCommitSeq after Rollback = %d", p.MaxCommitSeq)
		}
		if r := e.committedRow("p", e.items, "r"); r != nil {
			e.t.Fatalf("row after Rollback: %+v", r)
		}
		if rec, err := e.b.Log.LookupIdempotency(e.ctx, "p", "c", "k"); err != nil || rec != nil {
			e.t.Fatalf("idempotency after Rollback: %+v %v", rec, err)
		}
		got := e.scanChanges("p", storage.ChangeQuery{Table: "items", Scopes: map[string][]string{"project": {"p1"}}, UpToSeq: 10, LimitChanges: 10})
		e.wantScan("log after Rollback", got, ptr(false))
		// The lock was released and seq 1 is free again.
		e.push("p", func(tx storage.PushTx) {
			if seq := e.appendNext(tx); seq != 1 {
				e.t.Fatalf("seq after rollback = %d", seq)
			}
		})
	}},
	{name: "RollbackAfterCommit", fn: func(e *env) {
		tx := e.begin("p")
		e.put(tx, e.items, 1, item("r", "p1", 1))
		e.appendNext(tx)
		if err := tx.Commit(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		if err := tx.Rollback(e.ctx); err != nil {
			e.t.Fatalf("Rollback after Commit: %v", err)
		}
		if e.committedRow("p", e.items, "r") == nil || e.readPartition("p").MaxCommitSeq != 1 {
			e.t.Fatal("Rollback after Commit undid the commit")
		}
	}},
	{name: "ErrTxDone", fn: func(e *env) {
		for _, finish := range []string{"commit", "rollback"} {
			tx := e.begin("p")
			var err error
			if finish == "commit" {
				err = tx.Commit(e.ctx)
			} else {
				err = tx.Rollback(e.ctx)
			}
			if err != nil {
				e.t.Fatal(err)
			}
			calls := map[string]func() error{
				"LookupIdempotency":   func() error { _, err := tx.LookupIdempotency(e.ctx, "c", "k"); return err },
				"GetRow":              func() error { _, err := tx.GetRow(e.ctx, e.items, "r"); return err },
				"Savepoint":           func() error { return tx.Savepoint(e.ctx) },
				"RollbackToSavepoint": func() error { return tx.RollbackToSavepoint(e.ctx) },
				"ReleaseSavepoint":    func() error { return tx.ReleaseSavepoint(e.ctx) },
				"PutRow": func() error {
					return tx.PutRow(e.ctx, e.items, storage.RowRecord{RowID: "r", Version: 1, Values: item("r", "p1", 1)})
				},
				"DeleteRow":    func() error { return tx.DeleteRow(e.ctx, e.items, "r", tx.Partition().MaxCommitSeq+1) },
				"AppendCommit": func() error { return tx.AppendCommit(e.ctx, storage.CommitRecord{Seq: 1}) },
				"PutIdempotency": func() error {
					return tx.PutIdempotency(e.ctx, storage.IdempotencyRecord{ClientID: "c", ClientCommitID: "k", Status: 1})
				},
				"Commit": func() error { return tx.Commit(e.ctx) },
			}
			for name, call := range calls {
				wantErrIs(e, name+" after "+finish, call(), storage.ErrTxDone)
			}
		}
		if r := e.committedRow("p", e.items, "r"); r != nil {
			e.t.Fatalf("a write after finish landed: %+v", r)
		}
	}},
}
