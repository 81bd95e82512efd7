package storagetest

import (
	"errors"
	"reflect"

	"github.com/synclane/synclane/storage"
)

// Registered queries inside a push transaction (PushTx.Query): every
// backend with the Queries role runs them over the transaction's
// candidate state; the others refuse with ErrTxQueryUnsupported.

// txQueryIDs runs "SELECT id FROM items ORDER BY id" in tx.
func (e *env) txQueryIDs(tx storage.PushTx) ([]string, storage.QueryResult, error) {
	e.t.Helper()
	res, err := tx.Query(e.ctx, storage.Query{MaxRows: 10, Parts: []storage.QueryPart{
		txt("SELECT id FROM "), e.itemsRel("i"), txt(" ORDER BY id")}})
	if err != nil {
		return nil, res, err
	}
	return idsOf(e, res), res, nil
}

// supportsTxQuery reports whether the backend runs PushTx.Query (the
// Queries role); without it, it checks the refusal.
func (e *env) supportsTxQuery(tx storage.PushTx) bool {
	e.t.Helper()
	if e.b.Queries != nil {
		return true
	}
	if _, _, err := e.txQueryIDs(tx); !errors.Is(err, storage.ErrTxQueryUnsupported) {
		e.t.Fatalf("Query on a backend without the Queries role: err %v, want ErrTxQueryUnsupported", err)
	}
	return false
}

// errAny accepts any outcome of a statement in txQueryTests.
var errAny = errors.New("any outcome")

var txQueryTests = []test{
	{name: "ReadsTheCandidateState", fn: func(e *env) {
		e.seedQueryRows()
		tx := e.begin("p1")
		defer func() { _ = tx.Rollback(e.ctx) }()
		if !e.supportsTxQuery(tx) {
			return
		}
		e.put(tx, e.items, 1, item("c1", "a", 7))
		e.must(tx.DeleteRow(e.ctx, e.items, "a1", tx.Partition().MaxCommitSeq+1))
		seq := e.appendNext(tx)
		ids, res, err := e.txQueryIDs(tx)
		if err != nil {
			e.t.Fatalf("Query: %v", err)
		}
		if want := []string{"a2", "b1", "c1"}; !reflect.DeepEqual(ids, want) {
			e.t.Fatalf("rows = %v, want %v (the staged insert, not the staged delete; not p2's x1)", ids, want)
		}
		if res.MaxCommitSeq != seq {
			e.t.Fatalf("MaxCommitSeq = %d, want the transaction's %d", res.MaxCommitSeq, seq)
		}
		// Rolled back: the committed state has none of it.
		e.must(tx.Rollback(e.ctx))
		if e.committedRow("p1", e.items, "c1") != nil || e.committedRow("p1", e.items, "a1") == nil {
			e.t.Fatal("the rolled-back transaction's writes are visible")
		}
	}},
	{name: "FailuresLeaveTheTransactionUsable", fn: func(e *env) {
		e.seedQueryRows()
		tx := e.begin("p1")
		defer func() { _ = tx.Rollback(e.ctx) }()
		if !e.supportsTxQuery(tx) {
			return
		}
		e.put(tx, e.items, 1, item("c1", "a", 7))
		cases := []struct {
			name  string
			q     storage.Query
			want  error
			nsent bool // refused before anything is sent
		}{
			{"unknown column", storage.Query{MaxRows: 5, Parts: []storage.QueryPart{txt("SELECT nosuchcolumn FROM "), e.itemsRel("i")}}, storage.ErrQueryFailed, false},
			{"a write", storage.Query{MaxRows: 5, Parts: []storage.QueryPart{txt("DELETE FROM "), e.itemsRel("i")}}, storage.ErrQueryFailed, false},
			{"a second statement that writes", storage.Query{MaxRows: 5, Parts: []storage.QueryPart{
				txt(`SELECT 1 AS one) AS s; DELETE FROM "items"; SELECT * FROM (SELECT 1 AS one`)}}, storage.ErrQueryFailed, false},
			// Reachable only with a hand-built Query (the engine refuses
			// ";"): whether or not it fails, it must write nothing.
			{"a second statement that turns writes back on", storage.Query{MaxRows: 5, Parts: []storage.QueryPart{
				txt(`SELECT 1 AS one) AS s; PRAGMA query_only = 0; DELETE FROM "items"; SELECT * FROM (SELECT 1 AS one`)}}, errAny, false},
			{"too many rows", storage.Query{MaxRows: 3, Parts: []storage.QueryPart{txt("SELECT id FROM "), e.itemsRel("i")}}, storage.ErrQueryTooLarge, false},
			{"MaxRows out of range", storage.Query{MaxRows: 0, Parts: []storage.QueryPart{txt("SELECT 1 AS one")}}, nil, true},
		}
		for _, c := range cases {
			res, err := tx.Query(e.ctx, c.q)
			switch {
			case c.nsent && (err == nil || errors.Is(err, storage.ErrQueryFailed)):
				e.t.Fatalf("%s: err %v, want a refusal before execution", c.name, err)
			case !c.nsent && c.want != errAny && !errors.Is(err, c.want):
				e.t.Fatalf("%s: err %v, want %v", c.name, err, c.want)
			case err != nil && res.Rows != nil:
				e.t.Fatalf("%s: rows %v with the error", c.name, res.Rows)
			}
		}
		// The transaction is intact: its staged row is there, nothing was
		// deleted, and it still writes and commits.
		if ids, _, err := e.txQueryIDs(tx); err != nil || !reflect.DeepEqual(ids, []string{"a1", "a2", "b1", "c1"}) {
			e.t.Fatalf("after the failures: rows %v err %v", ids, err)
		}
		e.put(tx, e.items, 1, item("c2", "a", 7))
		e.appendNext(tx)
		e.must(tx.Commit(e.ctx))
		for _, id := range []string{"a1", "c1", "c2"} {
			if e.committedRow("p1", e.items, id) == nil {
				e.t.Fatalf("%s missing after commit", id)
			}
		}
	}},
}
