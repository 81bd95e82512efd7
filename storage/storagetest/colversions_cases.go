package storagetest

import (
	"bytes"
	"fmt"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// Column versions (storage.ColumnVersions, SPEC §2.2) are stored verbatim:
// PutRow writes rec.ColumnVersions, PushTx.GetRow and PushTx.ScanRows
// return exactly those bytes, and nil (a row from before column versions)
// never turns into a non-nil value nor a non-nil one (even empty) into
// nil. Rows.ScanRows and VisitRows may leave them nil; every encoded or
// copied row (EncodeRows, CopyRowsToImage: allTypesFixture writes column
// versions) holds the schema's columns only.

// putCV is put with column versions.
func (e *env) putCV(tx storage.PushTx, t *schema.Table, version int64, row ssp2.Row, cv storage.ColumnVersions) {
	e.t.Helper()
	if err := tx.PutRow(e.ctx, t, storage.RowRecord{RowID: rowIDOf(e, t, row), Version: version, Values: row, ColumnVersions: cv}); err != nil {
		e.t.Fatalf("PutRow(%s, %v): %v", t.Name, row[t.PK], err)
	}
}

// fmtCV renders column versions with their nil-ness.
func fmtCV(cv storage.ColumnVersions) string {
	if cv == nil {
		return "nil"
	}
	return fmt.Sprintf("%x (len %d)", []byte(cv), len(cv))
}

// wantCV compares column versions exactly: bytes and nil-ness.
func (e *env) wantCV(what string, got, want storage.ColumnVersions) {
	e.t.Helper()
	if (got == nil) != (want == nil) || !bytes.Equal(got, want) {
		e.t.Fatalf("%s: column versions %s, want %s", what, fmtCV(got), fmtCV(want))
	}
}

// wantRowCV is wantRow plus the exact column versions.
func (e *env) wantRowCV(what string, got *storage.RowRecord, want storage.RowRecord) {
	e.t.Helper()
	e.wantRow(what, got, want)
	e.wantCV(what+" ("+want.RowID+")", got.ColumnVersions, want.ColumnVersions)
}

// cvFixture is the column versions colVersionTests store: nil (legacy),
// the inserted form, an encoded set of versions, and an empty non-nil
// value (not a valid encoding, but backends store bytes without reading
// them and must keep it non-nil).
var cvFixture = []struct {
	id string
	cv storage.ColumnVersions
}{
	{"a-legacy", nil},
	{"b-inserted", storage.InsertedColumnVersions()},
	{"c-versions", storage.EncodeColumnVersions([]int64{1, 1, 1, 5, 7, 1, 1, 1, 1, 1, 1, 200}, 200)},
	{"d-empty", storage.ColumnVersions{}},
}

var colVersionTests = []test{
	{name: "RoundTrip", fn: func(e *env) {
		want := func(i int) storage.RowRecord {
			f := cvFixture[i]
			return storage.RowRecord{RowID: f.id, Version: 200, Values: item(f.id, "p1", 1), ColumnVersions: f.cv}
		}
		e.push("p", func(tx storage.PushTx) {
			for i, f := range cvFixture {
				e.putCV(tx, e.items, 200, item(f.id, "p1", 1), f.cv)
				e.wantRowCV("GetRow of a row written in the transaction", e.getRow(tx, e.items, f.id), want(i))
			}
		})
		tx := e.begin("p")
		defer func() { _ = tx.Rollback(e.ctx) }()
		for i, f := range cvFixture {
			e.wantRowCV("GetRow of a committed row", e.getRow(tx, e.items, f.id), want(i))
		}
		got, err := tx.ScanRows(e.ctx, storage.RowQuery{Table: e.items, Scopes: p1, Limit: 10})
		if err != nil || len(got) != len(cvFixture) {
			e.t.Fatalf("PushTx.ScanRows = %d rows, %v; want %d", len(got), err, len(cvFixture))
		}
		for i := range cvFixture {
			e.wantRowCV("PushTx.ScanRows", &got[i], want(i))
		}
		// Replaced as given, in every direction, and a rolled-back write
		// leaves the previous value.
		longer := storage.EncodeColumnVersions([]int64{1, 201, 1, 5, 7, 201, 1, 1, 1, 1, 1, 200}, 201)
		e.putCV(tx, e.items, 201, item("a-legacy", "p1", 1), longer)
		e.putCV(tx, e.items, 201, item("c-versions", "p1", 1), nil)
		e.must(tx.Savepoint(e.ctx))
		e.putCV(tx, e.items, 202, item("b-inserted", "p1", 1), longer)
		e.putCV(tx, e.items, 202, item("d-empty", "p1", 1), nil)
		e.must(tx.RollbackToSavepoint(e.ctx))
		e.must(tx.ReleaseSavepoint(e.ctx))
		e.must(tx.Commit(e.ctx))
		after := map[string]storage.ColumnVersions{"a-legacy": longer, "b-inserted": cvFixture[1].cv, "c-versions": nil, "d-empty": cvFixture[3].cv}
		for id, cv := range after {
			e.wantCV("after the replacements: "+id, e.committedRow("p", e.items, id).ColumnVersions, cv)
		}
		// Committed-row reads hand out the same values; their column
		// versions, when set at all, are the stored ones.
		rows := e.scanRows("p", storage.RowQuery{Table: e.items, Scopes: p1, Limit: 10})
		if len(rows) != len(cvFixture) {
			e.t.Fatalf("Rows.ScanRows: %d rows, want %d", len(rows), len(cvFixture))
		}
		for _, r := range rows {
			if !rowEqual(r.Values, item(r.RowID, "p1", 1)) {
				e.t.Fatalf("Rows.ScanRows %s: values %s", r.RowID, fmtRow(r.Values))
			}
			if r.ColumnVersions != nil {
				e.wantCV("Rows.ScanRows "+r.RowID, r.ColumnVersions, after[r.RowID])
			}
		}
	}},
	{name: "Prefetched", fn: func(e *env) {
		e.push("p", func(tx storage.PushTx) {
			for _, f := range cvFixture {
				e.putCV(tx, e.items, 3, item(f.id, "p1", 1), f.cv)
			}
		})
		tx := e.begin("p")
		defer func() { _ = tx.Rollback(e.ctx) }()
		var keys []storage.RowKey
		for _, f := range cvFixture {
			keys = append(keys, storage.RowKey{Table: e.items, RowID: f.id})
		}
		e.prefetch(tx, nil, keys)
		for _, f := range cvFixture {
			e.wantRowCV("prefetched row", e.getRow(tx, e.items, f.id), storage.RowRecord{RowID: f.id, Version: 3, Values: item(f.id, "p1", 1), ColumnVersions: f.cv})
		}
	}},
	{name: "TableAddedByMigration", fn: func(e *env) {
		// A table created by a schema migration stores them too.
		e.ensure(MustParse(SchemaV2))
		tags := e.sch.Table("tags")
		cv := storage.EncodeColumnVersions([]int64{1, 1, 4}, 4)
		e.push("p", func(tx storage.PushTx) {
			e.putCV(tx, tags, 4, ssp2.Row{"t", "p1", "x"}, cv)
			e.putCV(tx, tags, 1, ssp2.Row{"u", "p1", "y"}, nil)
		})
		e.wantCV("migrated schema, new table", e.committedRow("p", tags, "t").ColumnVersions, cv)
		e.wantCV("migrated schema, new table, nil", e.committedRow("p", tags, "u").ColumnVersions, nil)
	}},
}
