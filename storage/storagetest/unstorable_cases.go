package storagetest

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strconv"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// noise returns n bytes of deterministic, poorly compressible ASCII text
// (so a database cannot squeeze an over-long index key under its limit).
func noise(seed uint64, n int) string {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

// honestCommit runs one well-formed commit inside tx between Savepoint and
// ReleaseSavepoint, the way the engine applies a client commit in a group:
// row id, client commit id "cc-"+id, one upsert change, the idempotency
// record. It returns the commit's seq.
func (e *env) honestCommit(tx storage.PushTx, id string) int64 {
	e.t.Helper()
	must := func(err error) {
		e.t.Helper()
		if err != nil {
			e.t.Fatalf("honest commit %q: %v", id, err)
		}
	}
	must(tx.Savepoint(e.ctx))
	e.put(tx, e.items, 1, item(id, "p1", 1))
	seq := tx.Partition().MaxCommitSeq + 1
	must(tx.AppendCommit(e.ctx, storage.CommitRecord{Seq: seq, CreatedAtMs: 1_700_000_000_000 + seq, ActorID: "actor-" + strconv.FormatInt(seq, 10),
		ClientID: "client", ClientCommitID: "cc-" + id, Changes: []storage.ChangeRecord{upsert("items", id, 1, sc("project", "p1", "owner", "1"))}}))
	must(tx.PutIdempotency(e.ctx, storage.IdempotencyRecord{ClientID: "client", ClientCommitID: "cc-" + id, Status: ssp2.CommitApplied, CommitSeq: seq}))
	must(tx.ReleaseSavepoint(e.ctx))
	return seq
}

// badCommit is one commit attempt whose data no backend may store.
type badCommit struct {
	name string
	// try makes the attempt inside the commit's savepoint; seq is the next
	// free commit seq.
	try func(e *env, tx storage.PushTx, seq int64) error
}

func badRow(row ssp2.Row) func(e *env, tx storage.PushTx, seq int64) error {
	return func(e *env, tx storage.PushTx, seq int64) error {
		return tx.PutRow(e.ctx, e.items, storage.RowRecord{RowID: row[0].(string), Version: 1, Values: row})
	}
}

func badAppend(mut func(c *storage.CommitRecord)) func(e *env, tx storage.PushTx, seq int64) error {
	return func(e *env, tx storage.PushTx, seq int64) error {
		c := storage.CommitRecord{Seq: seq, CreatedAtMs: seq, ActorID: "actor", ClientID: "client", ClientCommitID: "cc-bad",
			Changes: []storage.ChangeRecord{upsert("items", "b", 1, sc("project", "p1", "owner", "1"))}}
		mut(&c)
		return tx.AppendCommit(e.ctx, c)
	}
}

func badIdem(clientID, clientCommitID string) func(e *env, tx storage.PushTx, seq int64) error {
	return func(e *env, tx storage.PushTx, seq int64) error {
		if err := tx.AppendCommit(e.ctx, storage.CommitRecord{Seq: seq, CreatedAtMs: seq, ActorID: "actor", ClientID: "client", ClientCommitID: "cc-b"}); err != nil {
			return errors.New("honest AppendCommit before the bad PutIdempotency failed: " + err.Error())
		}
		return tx.PutIdempotency(e.ctx, storage.IdempotencyRecord{ClientID: clientID, ClientCommitID: clientCommitID, Status: ssp2.CommitApplied, CommitSeq: seq})
	}
}

func withTitle(r ssp2.Row, v any) ssp2.Row { r[3] = v; return r }
func withJSON(r ssp2.Row, v any) ssp2.Row  { r[7] = v; return r }

func badCommits() []badCommit {
	big := noise(1, 8192)
	return []badCommit{
		{"PutRow NUL row id", badRow(item("b\x00id", "p1", 1))},
		{"PutRow 8 KB row id", badRow(item(big, "p1", 1))},
		{"PutRow invalid UTF-8 row id", badRow(item("b\xffid", "p1", 1))},
		{"PutRow NUL in a string value", badRow(withTitle(item("b", "p1", 1), "x\x00y"))},
		{"PutRow NUL in a json value", badRow(withJSON(item("b", "p1", 1), json.RawMessage("\"x\x00\"")))},
		{"PutRow NUL in a scope value", badRow(item("b", "p\x001", 1))},
		{"PutRow 8 KB scope value", badRow(item("b", big, 1))},
		{"PutRow 8 KB unique index value", badRow(itemCode("b", "p1", 1, big))},
		{"PutRow 8 KB index value", badRow(withTitle(item("b", "p1", 1), big))},
		{"AppendCommit NUL row id", badAppend(func(c *storage.CommitRecord) { c.Changes[0].RowID = "b\x00" })},
		{"AppendCommit 8 KB row id", badAppend(func(c *storage.CommitRecord) { c.Changes[0].RowID = big })},
		{"AppendCommit NUL scope value", badAppend(func(c *storage.CommitRecord) { c.Changes[0].Scopes["project"] = "p\x001" })},
		{"AppendCommit 8 KB scope value", badAppend(func(c *storage.CommitRecord) { c.Changes[0].Scopes["project"] = big })},
		{"AppendCommit NUL scope var", badAppend(func(c *storage.CommitRecord) { c.Changes[0].Scopes["pro\x00ject"] = "p1" })},
		{"AppendCommit NUL table name", badAppend(func(c *storage.CommitRecord) { c.Changes[0].Table = "it\x00ems" })},
		{"AppendCommit NUL client commit id", badAppend(func(c *storage.CommitRecord) { c.ClientCommitID = "cc\x00" })},
		{"AppendCommit 8 KB client commit id", badAppend(func(c *storage.CommitRecord) { c.ClientCommitID = big })},
		{"AppendCommit invalid UTF-8 client commit id", badAppend(func(c *storage.CommitRecord) { c.ClientCommitID = "cc\xc3" })},
		{"AppendCommit NUL client id", badAppend(func(c *storage.CommitRecord) { c.ClientID = "c\x00" })},
		{"AppendCommit NUL actor id", badAppend(func(c *storage.CommitRecord) { c.ActorID = "a\x00" })},
		{"AppendCommit bad second change", badAppend(func(c *storage.CommitRecord) {
			c.Changes = append(c.Changes, upsert("items", "b2", 1, sc("project", "p\x00", "owner", "1")))
		})},
		{"PutIdempotency NUL client commit id", badIdem("client", "cc\x00")},
		{"PutIdempotency 8 KB client commit id", badIdem("client", big)},
		{"PutIdempotency NUL client id", badIdem("c\x00", "cc-b")},
		{"PutIdempotency key over MaxIndexKeyBytes", badIdem(noise(2, storage.MaxIdentifierBytes), noise(3, storage.MaxIdentifierBytes))},
	}
}

var unstorableTests = []test{
	{name: "BadCommitIsolated", fn: func(e *env) {
		e.touch("p")
		tx := e.begin("p")
		defer func() { _ = tx.Rollback(e.ctx) }()
		seqA := e.honestCommit(tx, "a")
		for _, b := range badCommits() {
			e.must(tx.Savepoint(e.ctx))
			// An honest write first: RollbackToSavepoint must undo it.
			e.put(tx, e.items, 1, item("b-partial", "p1", 1))
			err := b.try(e, tx, tx.Partition().MaxCommitSeq+1)
			if err == nil {
				// The engine keeps a commit storage accepted.
				e.t.Errorf("%s: accepted, want an error wrapping storage.ErrUnstorable", b.name)
				e.must(tx.ReleaseSavepoint(e.ctx))
				continue
			}
			if !errors.Is(err, storage.ErrUnstorable) {
				e.t.Errorf("%s: err = %v, want errors.Is storage.ErrUnstorable", b.name, err)
			}
			e.must(tx.RollbackToSavepoint(e.ctx))
			if got := tx.Partition().MaxCommitSeq; got != seqA {
				e.t.Fatalf("%s: MaxCommitSeq after RollbackToSavepoint = %d, want %d", b.name, got, seqA)
			}
		}
		seqC := e.honestCommit(tx, "c")
		if err := tx.Commit(e.ctx); err != nil {
			e.t.Fatalf("Commit after rejected bad commits failed the honest ones: %v", err)
		}
		if seqA != 1 || seqC != 2 {
			e.t.Fatalf("honest commits got seqs %d and %d, want 1 and 2", seqA, seqC)
		}
		e.wantScan("log", e.scanChanges("p", q("items", 0, 10, 100, p1)), f,
			cc(1, upsert("items", "a", 1, sc("project", "p1", "owner", "1"))),
			cc(2, upsert("items", "c", 1, sc("project", "p1", "owner", "1"))))
		if p := e.readPartition("p"); p.MaxCommitSeq != 2 {
			e.t.Fatalf("MaxCommitSeq = %d, want 2", p.MaxCommitSeq)
		}
		for _, id := range []string{"a", "c"} {
			e.wantRow("honest row "+id, e.committedRow("p", e.items, id), storage.RowRecord{RowID: id, Version: 1, Values: item(id, "p1", 1)})
		}
		if got := ids(e.scanRows("p", storage.RowQuery{Table: e.items, Scopes: p1, Limit: 100})); got != "a,c" {
			e.t.Fatalf("rows after commit = %s, want a,c", got)
		}
		for id, seq := range map[string]int64{"cc-a": 1, "cc-c": 2} {
			r, err := e.b.Log.LookupIdempotency(e.ctx, "p", "client", id)
			e.wantIdem("idempotency "+id, r, err, &storage.IdempotencyRecord{ClientID: "client", ClientCommitID: id, Status: ssp2.CommitApplied, CommitSeq: seq})
		}
		for _, id := range []string{"cc-b", "cc-bad"} {
			r, err := e.b.Log.LookupIdempotency(e.ctx, "p", "client", id)
			e.wantIdem("idempotency "+id, r, err, nil)
		}
	}},
	{name: "Limits", fn: func(e *env) {
		// Values at the limits are stored by every backend (PostgreSQL
		// included: the limits fit its index row size), one byte more is
		// ErrUnstorable everywhere.
		const maxID, maxKey = storage.MaxIdentifierBytes, storage.MaxIndexKeyBytes
		rowID := noise(10, maxID)
		client, commitID := noise(11, maxID-1), noise(12, maxID) // "p" + both = MaxIndexKeyBytes
		scope := noise(13, maxID)
		// Index keys: items_code is (partition, code), items_title is
		// (partition, project, title).
		code := noise(14, maxKey-len("p"))
		title := noise(15, maxKey-len("p")-len("p1"))
		row := withTitle(itemCode(rowID, "p1", 1, code), title)
		ch := upsert("items", rowID, 1, sc("project", scope, "owner", "1"))

		tx := e.begin("p")
		defer func() { _ = tx.Rollback(e.ctx) }()
		over := func(what string, err error) {
			e.t.Helper()
			wantErrIs(e, what, err, storage.ErrUnstorable)
			if err := tx.RollbackToSavepoint(e.ctx); err != nil {
				e.t.Fatal(err)
			}
		}
		if err := tx.Savepoint(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		over("row id over MaxIdentifierBytes", tx.PutRow(e.ctx, e.items, storage.RowRecord{RowID: rowID + "x", Version: 1, Values: item(rowID+"x", "p1", 1)}))
		over("scope column value over MaxIdentifierBytes", tx.PutRow(e.ctx, e.items, storage.RowRecord{RowID: "r", Version: 1, Values: item("r", scope+"x", 1)}))
		over("unique index key over MaxIndexKeyBytes", tx.PutRow(e.ctx, e.items, storage.RowRecord{RowID: "r", Version: 1, Values: itemCode("r", "p1", 1, code+"x")}))
		over("index key over MaxIndexKeyBytes", tx.PutRow(e.ctx, e.items, storage.RowRecord{RowID: "r", Version: 1, Values: withTitle(item("r", "p1", 1), title+"x")}))
		over("change row id over MaxIdentifierBytes", tx.AppendCommit(e.ctx, storage.CommitRecord{Seq: 1, ClientID: client, ClientCommitID: commitID,
			Changes: []storage.ChangeRecord{upsert("items", rowID+"x", 1, nil)}}))
		over("scope value over MaxIdentifierBytes", tx.AppendCommit(e.ctx, storage.CommitRecord{Seq: 1, ClientID: client, ClientCommitID: commitID,
			Changes: []storage.ChangeRecord{upsert("items", rowID, 1, sc("project", scope+"x"))}}))
		over("idempotency key over MaxIndexKeyBytes", tx.PutIdempotency(e.ctx, storage.IdempotencyRecord{ClientID: client + "x", ClientCommitID: commitID, Status: ssp2.CommitApplied, CommitSeq: 1}))

		e.put(tx, e.items, 1, row)
		if err := tx.AppendCommit(e.ctx, storage.CommitRecord{Seq: 1, CreatedAtMs: 1_700_000_000_001, ActorID: "actor-1",
			ClientID: client, ClientCommitID: commitID, Changes: []storage.ChangeRecord{ch}}); err != nil {
			e.t.Fatalf("AppendCommit at the limits: %v", err)
		}
		idem := storage.IdempotencyRecord{ClientID: client, ClientCommitID: commitID, Status: ssp2.CommitApplied, CommitSeq: 1, Result: []byte("ok")}
		if err := tx.PutIdempotency(e.ctx, idem); err != nil {
			e.t.Fatalf("PutIdempotency at the limits: %v", err)
		}
		if err := tx.ReleaseSavepoint(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		if err := tx.Commit(e.ctx); err != nil {
			e.t.Fatalf("Commit at the limits: %v", err)
		}
		e.wantRow("row at the limits", e.committedRow("p", e.items, rowID), storage.RowRecord{RowID: rowID, Version: 1, Values: row})
		e.wantScan("change at the limits", e.scanChanges("p", q("items", 0, 1, 10, map[string][]string{"project": {scope}})), f, cc(1, ch))
		r, err := e.b.Log.LookupIdempotency(e.ctx, "p", client, commitID)
		e.wantIdem("idempotency at the limits", r, err, &idem)
	}},
	{name: "UnstorablePartition", fn: func(e *env) {
		for _, name := range []string{"p\x00", "p\xff", noise(7, storage.MaxIdentifierBytes+1)} {
			_, err := e.b.Log.TouchPartition(e.ctx, name, 1)
			wantErrIs(e, "TouchPartition", err, storage.ErrUnstorable)
			tx, err := e.b.Log.BeginPush(e.ctx, name)
			if err == nil {
				_ = tx.Rollback(e.ctx)
			}
			wantErrIs(e, "BeginPush", err, storage.ErrUnstorable)
			_, err = e.b.Log.RotateLogEpoch(e.ctx, name, 1)
			wantErrIs(e, "RotateLogEpoch", err, storage.ErrUnstorable)
			if p := e.readPartition(name); p.Exists {
				e.t.Fatalf("ReadPartition(%.20q) = %+v, want Exists false", name, p)
			}
		}
		// A partition name at the limit is stored.
		name := noise(8, storage.MaxIdentifierBytes)
		if p := e.touch(name); !p.Exists {
			e.t.Fatalf("TouchPartition at the limit: %+v", p)
		}
		e.push(name, func(tx storage.PushTx) { e.put(tx, e.items, 1, item("r", "p1", 1)) })
		if r := e.committedRow(name, e.items, "r"); r == nil {
			e.t.Fatal("row in a partition named at the limit is missing")
		}
	}},
	{name: "UnstorableKeysRead", fn: func(e *env) {
		// A key no backend stores is simply absent: reads return nothing
		// (no error), and a PushTx stays usable.
		e.rowFixture()
		tx := e.begin("p")
		defer func() { _ = tx.Rollback(e.ctx) }()
		for _, id := range []string{"a\x00", "a\xff", noise(4, 8192)} {
			if r, err := tx.GetRow(e.ctx, e.items, id); err != nil || r != nil {
				e.t.Fatalf("GetRow(%.20q) = %+v, %v; want nil, nil", id, r, err)
			}
			if err := tx.DeleteRow(e.ctx, e.items, id, tx.Partition().MaxCommitSeq+1); err != nil {
				e.t.Fatalf("DeleteRow(%.20q): %v", id, err)
			}
			if r, err := tx.LookupIdempotency(e.ctx, id, "k"); err != nil || r != nil {
				e.t.Fatalf("PushTx.LookupIdempotency(%.20q) = %+v, %v; want nil, nil", id, r, err)
			}
			if r, err := e.b.Log.LookupIdempotency(e.ctx, "p", "c", id); err != nil || r != nil {
				e.t.Fatalf("LookupIdempotency(%.20q) = %+v, %v; want nil, nil", id, r, err)
			}
			if r, err := e.b.Clients.GetClient(e.ctx, "p", id); err != nil || r != nil {
				e.t.Fatalf("GetClient(%.20q) = %+v, %v; want nil, nil", id, r, err)
			}
		}
		e.put(tx, e.items, 1, item("new", "p1", 1))
		e.appendNext(tx, upsert("items", "new", 1, sc("project", "p1", "owner", "1")))
		if err := tx.Commit(e.ctx); err != nil {
			e.t.Fatalf("Commit after reads of unstorable keys: %v", err)
		}
		// Scope values no backend stores match nothing.
		bad := map[string][]string{"project": {"p1\x00", "\xff", "p1"}}
		if got := ids(e.scanRows("p", storage.RowQuery{Table: e.items, Scopes: bad, Limit: 100})); got != "10,9,B,Z,a,b,new,é,ü" {
			e.t.Fatalf("ScanRows with unstorable scope values = %s", got)
		}
		if got := ids(e.scanRows("p", storage.RowQuery{Table: e.items, Scopes: map[string][]string{"project": {"p1\x00"}}, Limit: 100})); got != "" {
			e.t.Fatalf("ScanRows with only an unstorable scope value = %s", got)
		}
		e.wantScan("ScanChanges with unstorable scope values", e.scanChanges("p", q("items", 0, 10, 10, bad)), f,
			cc(1, upsert("items", "new", 1, sc("project", "p1", "owner", "1"))))
		e.wantScan("ScanChanges with only unstorable scope values", e.scanChanges("p", q("items", 0, 10, 10, map[string][]string{"project": {"p1\x00"}})), f)
	}},
}
