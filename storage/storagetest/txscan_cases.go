package storagetest

import (
	"github.com/synclane/synclane/storage"
)

// txScanRows runs ScanRows through the transaction (PushTx.ScanRows).
func (e *env) txScanRows(tx storage.PushTx, q storage.RowQuery) []storage.RowRecord {
	e.t.Helper()
	rs, err := tx.ScanRows(e.ctx, q)
	if err != nil {
		e.t.Fatalf("PushTx.ScanRows: %v", err)
	}
	return rs
}

var txScanRowsTests = []test{
	{name: "SeesOwnWritesInOrder", fn: func(e *env) {
		e.rowFixture()
		tx := e.begin("p")
		defer tx.Rollback(e.ctx) //nolint:errcheck
		e.put(tx, e.items, 1, item("c-new", "p1", 1))
		if err := tx.DeleteRow(e.ctx, e.items, "B", tx.Partition().MaxCommitSeq+1); err != nil {
			e.t.Fatalf("DeleteRow: %v", err)
		}
		e.put(tx, e.items, 1, item("zz-p2", "p2", 1))
		got := e.txScanRows(tx, storage.RowQuery{Table: e.items, Scopes: p1, Limit: 100})
		if g, want := ids(got), "10,9,Z,a,b,c-new,é,ü"; g != want {
			e.t.Fatalf("tx ScanRows = %s, want %s", g, want)
		}
		e.wantRow("staged row", &got[5], storage.RowRecord{RowID: "c-new", Version: 1, Values: item("c-new", "p1", 1)})
		after := "Z"
		page := e.txScanRows(tx, storage.RowQuery{Table: e.items, Scopes: p1, AfterRowID: &after, Limit: 2})
		if g, want := ids(page), "a,b"; g != want {
			e.t.Fatalf("tx ScanRows page after Z = %s, want %s", g, want)
		}
		// Committed readers do not see the staged writes.
		if g := ids(e.scanRows("p", storage.RowQuery{Table: e.items, Scopes: p1, Limit: 100})); g != "10,9,B,Z,a,b,é,ü" {
			e.t.Fatalf("store ScanRows during the tx = %s", g)
		}
	}},
	{name: "RolledBackSavepointIsGone", fn: func(e *env) {
		e.rowFixture()
		tx := e.begin("p")
		defer tx.Rollback(e.ctx) //nolint:errcheck
		if err := tx.Savepoint(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		e.put(tx, e.items, 1, item("c-new", "p1", 1))
		if err := tx.RollbackToSavepoint(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		if err := tx.ReleaseSavepoint(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		got := e.txScanRows(tx, storage.RowQuery{Table: e.items, Scopes: map[string][]string{"project": {"p1", "p2"}}, Limit: 100})
		if g, want := ids(got), "10,9,B,Z,a,b,x-p2,é,ü"; g != want {
			e.t.Fatalf("tx ScanRows = %s, want %s", g, want)
		}
		if g := ids(e.txScanRows(tx, storage.RowQuery{Table: e.items, Scopes: map[string][]string{"nope": {"x"}}, Limit: 10})); g != "" {
			e.t.Fatalf("undeclared var matched %s", g)
		}
	}},
}
