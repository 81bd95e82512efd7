package storagetest

import (
	"errors"
	"strings"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// CollidingIndexes declares unique indexes whose storage names were equal
// before schema.IndexIdent: "a__b__c" on SQLite (table a__b index c, table a
// index b__c: the second was never created, its constraint never enforced)
// and "a__i_b__i_c" on PostgreSQL (table a__i_b index c, table a index
// b__i_c: storage setup failed).
const CollidingIndexes = `{"version":1,"tables":[
 {"name":"a__b","columns":[{"name":"id","type":"string"},{"name":"p","type":"string"},{"name":"x","type":"string","nullable":true},{"name":"y","type":"string","nullable":true}],
  "primaryKey":"id","scopes":["p:{p}"],"indexes":[{"name":"c","columns":["x"],"unique":true}]},
 {"name":"a","columns":[{"name":"id","type":"string"},{"name":"p","type":"string"},{"name":"x","type":"string","nullable":true},{"name":"y","type":"string","nullable":true}],
  "primaryKey":"id","scopes":["p:{p}"],"indexes":[{"name":"b__c","columns":["x"],"unique":true},{"name":"b__i_c","columns":["y"],"unique":true}]},
 {"name":"a__i_b","columns":[{"name":"id","type":"string"},{"name":"p","type":"string"},{"name":"x","type":"string","nullable":true},{"name":"y","type":"string","nullable":true}],
  "primaryKey":"id","scopes":["p:{p}"],"indexes":[{"name":"c","columns":["x"],"unique":true}]}]}`

var schemaShapeTests = []test{
	// Every declared unique index is enforced, whatever the table and
	// index names (issue 31).
	{name: "DerivedIndexNamesDistinct", raw: true, fn: func(e *env) {
		sch := MustParse(CollidingIndexes)
		e.ensure(sch)
		e.ensure(sch) // and again, on the existing tables
		for _, c := range []struct{ table, index, col string }{
			{"a__b", "c", "x"}, {"a", "b__c", "x"}, {"a", "b__i_c", "y"}, {"a__i_b", "c", "x"},
		} {
			t := sch.Table(c.table)
			row := func(id string) ssp2.Row {
				if c.col == "x" {
					return ssp2.Row{id, "p", "same", id}
				}
				return ssp2.Row{id, "p", id, "same"}
			}
			e.push("p", func(tx storage.PushTx) {
				e.put(tx, t, 1, row(c.index+"1"))
				if err := tx.Savepoint(e.ctx); err != nil {
					e.t.Fatal(err)
				}
				err := tx.PutRow(e.ctx, t, storage.RowRecord{RowID: c.index + "2", Version: 1, Values: row(c.index + "2")})
				wantErrIs(e, "table "+c.table+": duplicate on its unique index "+c.index, err, storage.ErrConstraint)
				if err := tx.RollbackToSavepoint(e.ctx); err != nil {
					e.t.Fatal(err)
				}
			})
		}
	}},
	// A schema edited without bumping its version is refused, naming the
	// fix, and nothing changes: the stored schema still works.
	{name: "ChangedAtSameVersion", fn: func(e *env) {
		e.push("p", func(tx storage.PushTx) { e.put(tx, e.items, 1, item("r1", "p1", 1)) })
		edits := map[string]string{
			"integer to string": strings.Replace(SchemaV1, `{"name": "owner", "type": "integer"}`, `{"name": "owner", "type": "string"}`, 1),
			"new NOT NULL column": strings.Replace(SchemaV1, `{"name": "body", "type": "string", "nullable": true}`,
				`{"name": "body", "type": "string", "nullable": true}, {"name": "must", "type": "string"}`, 1),
			"index made non-unique": strings.Replace(SchemaV1, `"columns": ["code"], "unique": true`, `"columns": ["code"]`, 1),
		}
		for name, src := range edits {
			if src == SchemaV1 {
				e.t.Fatalf("%s: the edit did not apply", name)
			}
			err := e.b.Lifecycle.EnsureSchema(e.ctx, MustParse(src))
			wantErrIs(e, "EnsureSchema("+name+") at v1", err, storage.ErrSchemaChanged)
			if !strings.Contains(err.Error(), "bump the schema version") {
				e.t.Fatalf("%s: error %q does not say to bump the version", name, err)
			}
		}
		// The same schema spelled differently is the same schema.
		respelled, err := schema.Parse([]byte(strings.ReplaceAll(SchemaV1, `"primaryKey": "id"`, `"primaryKey": ["id"]`)))
		if err != nil {
			e.t.Fatal(err)
		}
		e.ensure(respelled)
		e.ensure(MustParse(SchemaV1))
		e.wantRow("row after the refusals", e.committedRow("p", e.items, "r1"), storage.RowRecord{RowID: "r1", Version: 1, Values: item("r1", "p1", 1)})
		// A bumped version is accepted, and then the old one is older.
		e.ensure(MustParse(SchemaV2))
		err = e.b.Lifecycle.EnsureSchema(e.ctx, MustParse(SchemaV1))
		if !errors.Is(err, storage.ErrSchemaNewer) {
			e.t.Fatalf("EnsureSchema(v1) after v2: %v, want ErrSchemaNewer", err)
		}
	}},
}
