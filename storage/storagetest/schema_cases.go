package storagetest

import (
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

var schemaTests = []test{
	{name: "NotEnsured", raw: true, fn: func(e *env) {
		_, err := e.b.Log.TouchPartition(e.ctx, "p", 1)
		wantErrIs(e, "TouchPartition before EnsureSchema", err, storage.ErrSchemaNotEnsured)
		_, err = e.b.Log.BeginPush(e.ctx, "p")
		wantErrIs(e, "BeginPush before EnsureSchema", err, storage.ErrSchemaNotEnsured)
	}},
	{name: "Idempotent", fn: func(e *env) {
		e.push("p", func(tx storage.PushTx) { e.put(tx, e.items, 1, item("r1", "p1", 1)) })
		ep := e.touch("p").LogEpoch
		for i := 0; i < 2; i++ {
			e.ensure(MustParse(SchemaV1))
		}
		e.wantRow("row after re-ensure", e.committedRow("p", e.items, "r1"), storage.RowRecord{RowID: "r1", Version: 1, Values: item("r1", "p1", 1)})
		if got := e.touch("p").LogEpoch; got != ep {
			e.t.Fatalf("epoch changed by EnsureSchema: %q -> %q", ep, got)
		}
	}},
	{name: "MigrateV2", fn: func(e *env) {
		e.push("p", func(tx storage.PushTx) {
			e.put(tx, e.items, 3, item("old", "p1", 1))
			e.appendNext(tx, upsert("items", "old", 3, sc("project", "p1", "owner", "1")))
		})
		v2 := MustParse(SchemaV2)
		e.ensure(v2)
		e.ensure(v2) // idempotent at v2 too
		items, tags := v2.Table("items"), v2.Table("tags")

		oldV2 := append(item("old", "p1", 1), nil)
		e.wantRow("pre-migration row read with v2", e.committedRow("p", items, "old"), storage.RowRecord{RowID: "old", Version: 3, Values: oldV2})
		if p := e.readPartition("p"); p.MaxCommitSeq != 1 {
			e.t.Fatalf("MaxCommitSeq after migration = %d, want 1", p.MaxCommitSeq)
		}

		withExtra := append(item("new", "p1", 1), "x1")
		tag := ssp2.Row{"t1", "p1", "red"}
		e.push("p", func(tx storage.PushTx) {
			e.put(tx, items, 1, withExtra)
			e.put(tx, tags, 1, tag)
			// the new unique index is enforced
			if err := tx.Savepoint(e.ctx); err != nil {
				e.t.Fatal(err)
			}
			err := tx.PutRow(e.ctx, items, storage.RowRecord{RowID: "dup", Version: 1, Values: append(item("dup", "p1", 1), "x1")})
			wantErrIs(e, "duplicate on migrated unique index", err, storage.ErrConstraint)
			if err := tx.RollbackToSavepoint(e.ctx); err != nil {
				e.t.Fatal(err)
			}
		})
		e.wantRow("new column round trip", e.committedRow("p", items, "new"), storage.RowRecord{RowID: "new", Version: 1, Values: withExtra})
		rows := e.scanRows("p", storage.RowQuery{Table: tags, Scopes: map[string][]string{"project": {"p1"}}, Limit: 10})
		if len(rows) != 1 || !rowEqual(rows[0].Values, tag) {
			e.t.Fatalf("ScanRows(tags) = %+v, want the one tag", rows)
		}

		err := e.b.Lifecycle.EnsureSchema(e.ctx, MustParse(SchemaV1))
		wantErrIs(e, "EnsureSchema(v1) after v2", err, storage.ErrSchemaNewer)
	}},
}
