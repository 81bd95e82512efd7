package storagetest

import (
	"context"
	"time"

	"github.com/synclane/synclane/storage"
)

var partitionTests = []test{
	{name: "ReadUntouched", fn: func(e *env) {
		p := e.readPartition("nobody")
		if p != (storage.PartitionInfo{Partition: "nobody"}) {
			e.t.Fatalf("ReadPartition(untouched) = %+v, want only Partition set", p)
		}
		if again := e.readPartition("nobody"); again.Exists {
			e.t.Fatalf("ReadPartition created the partition: %+v", again)
		}
	}},
	{name: "TouchCreatesOnce", fn: func(e *env) {
		p1 := e.touch("p")
		if !p1.Exists || p1.LogEpoch == "" || p1.Partition != "p" || p1.EpochRequired || p1.MaxCommitSeq != 0 || p1.HorizonSeq != 0 {
			e.t.Fatalf("first TouchPartition = %+v", p1)
		}
		if p2 := e.touch("p"); p2 != p1 {
			e.t.Fatalf("second TouchPartition = %+v, want %+v", p2, p1)
		}
		if r := e.readPartition("p"); r != p1 {
			e.t.Fatalf("ReadPartition = %+v, want %+v", r, p1)
		}
		e.commitChanges("p")
		if r := e.touch("p"); r.MaxCommitSeq != 1 || r.LogEpoch != p1.LogEpoch {
			e.t.Fatalf("TouchPartition after one commit = %+v", r)
		}
	}},
	{name: "DistinctEpochs", fn: func(e *env) {
		seen := map[string]string{}
		for _, p := range []string{"a", "b", "c", "d"} {
			ep := e.touch(p).LogEpoch
			if other, dup := seen[ep]; dup {
				e.t.Fatalf("partitions %q and %q share epoch %q", other, p, ep)
			}
			seen[ep] = p
		}
	}},
	{name: "Isolation", fn: func(e *env) {
		e.push("p", func(tx storage.PushTx) {
			e.put(tx, e.items, 1, item("r", "p1", 1))
			e.appendNext(tx, upsert("items", "r", 1, sc("project", "p1", "owner", "1")))
			if err := tx.PutIdempotency(e.ctx, storage.IdempotencyRecord{ClientID: "c", ClientCommitID: "k", Status: 1, CommitSeq: 1}); err != nil {
				e.t.Fatal(err)
			}
		})
		if err := e.b.Clients.PutClient(e.ctx, "p", storage.ClientRecord{ClientID: "c", ActorID: "a"}); err != nil {
			e.t.Fatal(err)
		}
		e.touch("q")
		if q := e.readPartition("q"); q.MaxCommitSeq != 0 {
			e.t.Fatalf("q.MaxCommitSeq = %d, want 0", q.MaxCommitSeq)
		}
		if r := e.committedRow("q", e.items, "r"); r != nil {
			e.t.Fatalf("q sees p's row: %+v", r)
		}
		all := map[string][]string{"project": {"p1"}}
		if got := e.scanChanges("q", storage.ChangeQuery{Table: "items", Scopes: all, UpToSeq: 10, LimitChanges: 10}); len(got.Commits) != 0 {
			e.t.Fatalf("q sees p's commits: %+v", got)
		}
		if got := e.scanRows("q", storage.RowQuery{Table: e.items, Scopes: all, Limit: 10}); len(got) != 0 {
			e.t.Fatalf("q sees p's rows: %+v", got)
		}
		if rec, err := e.b.Log.LookupIdempotency(e.ctx, "q", "c", "k"); err != nil || rec != nil {
			e.t.Fatalf("q sees p's idempotency: %+v %v", rec, err)
		}
		if rec, err := e.b.Clients.GetClient(e.ctx, "q", "c"); err != nil || rec != nil {
			e.t.Fatalf("q sees p's client: %+v %v", rec, err)
		}
		// q has its own seq space and its own row under the same id.
		e.push("q", func(tx storage.PushTx) {
			e.put(tx, e.items, 7, item("r", "p9", 9))
			if seq := e.appendNext(tx); seq != 1 {
				e.t.Fatalf("q first seq = %d", seq)
			}
		})
		e.wantRow("p row untouched", e.committedRow("p", e.items, "r"), storage.RowRecord{RowID: "r", Version: 1, Values: item("r", "p1", 1)})
		e.wantRow("q row", e.committedRow("q", e.items, "r"), storage.RowRecord{RowID: "r", Version: 7, Values: item("r", "p9", 9)})
		// RotateLogEpoch of q leaves p alone.
		if _, err := e.b.Log.RotateLogEpoch(e.ctx, "q", 5); err != nil {
			e.t.Fatal(err)
		}
		if rec, err := e.b.Clients.GetClient(e.ctx, "p", "c"); err != nil || rec == nil {
			e.t.Fatalf("rotating q deleted p's client: %+v %v", rec, err)
		}
		if p := e.readPartition("p"); p.EpochRequired {
			e.t.Fatalf("rotating q marked p: %+v", p)
		}
	}},
	{name: "RotateLogEpoch", fn: func(e *env) {
		before := e.touch("p")
		e.push("p", func(tx storage.PushTx) {
			e.put(tx, e.items, 1, item("r", "p1", 1))
			e.appendNext(tx, upsert("items", "r", 1, sc("project", "p1", "owner", "1")))
		})
		for _, c := range []string{"c1", "c2"} {
			if err := e.b.Clients.PutClient(e.ctx, "p", storage.ClientRecord{ClientID: c, Cursor: 1}); err != nil {
				e.t.Fatal(err)
			}
		}
		ep, err := e.b.Log.RotateLogEpoch(e.ctx, "p", 2000)
		if err != nil {
			e.t.Fatal(err)
		}
		if ep == "" || ep == before.LogEpoch {
			e.t.Fatalf("RotateLogEpoch returned %q (old %q)", ep, before.LogEpoch)
		}
		after := e.readPartition("p")
		if after.LogEpoch != ep || !after.EpochRequired || after.MaxCommitSeq != 1 || !after.Exists {
			e.t.Fatalf("after rotate: %+v (want epoch %q, required, max 1)", after, ep)
		}
		if t2 := e.touch("p"); t2 != after {
			e.t.Fatalf("TouchPartition after rotate = %+v, want %+v", t2, after)
		}
		for _, c := range []string{"c1", "c2"} {
			if rec, err := e.b.Clients.GetClient(e.ctx, "p", c); err != nil || rec != nil {
				e.t.Fatalf("client %s survived rotation: %+v %v", c, rec, err)
			}
		}
		if r := e.committedRow("p", e.items, "r"); r == nil {
			e.t.Fatal("rotation deleted a row")
		}
		ep2, err := e.b.Log.RotateLogEpoch(e.ctx, "p", 3000)
		if err != nil || ep2 == ep || ep2 == "" {
			e.t.Fatalf("second rotation = %q, %v (previous %q)", ep2, err, ep)
		}
		// Untouched partition: rotation creates it.
		ep3, err := e.b.Log.RotateLogEpoch(e.ctx, "fresh", 1)
		if err != nil {
			e.t.Fatal(err)
		}
		if f := e.readPartition("fresh"); !f.Exists || f.LogEpoch != ep3 || !f.EpochRequired {
			e.t.Fatalf("rotate of untouched partition: %+v (epoch %q)", f, ep3)
		}
	}},
	{name: "RotateTakesWriteLock", fn: func(e *env) {
		before := e.touch("p")
		tx := e.begin("p")
		ctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
		defer cancel()
		if _, err := e.b.Log.RotateLogEpoch(ctx, "p", 1); err == nil {
			e.t.Fatal("RotateLogEpoch succeeded while a PushTx held the partition")
		}
		if err := tx.Rollback(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		if p := e.readPartition("p"); p.LogEpoch != before.LogEpoch || p.EpochRequired {
			e.t.Fatalf("failed rotation changed the partition: %+v", p)
		}
		if _, err := e.b.Log.RotateLogEpoch(e.ctx, "p", 1); err != nil {
			e.t.Fatalf("RotateLogEpoch after the lock was released: %v", err)
		}
	}},
}
