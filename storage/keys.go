package storage

import (
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
)

// Row ids and primary keys. The storage roles take and return row ids:
// the wire rowId, the primary key rendered as a string (schema.RenderKey,
// SPEC §2.2). A row table stores its key in the key column's own type
// (a string, integer, boolean or json column, schema.KeyTypeEligible), so
// a backend converts each row id it is given into that value (KeyValue)
// before it asks the database, and renders each row it reads back
// (schema.Table.RowID). The system tables (changes, tombstones, blob
// references) hold the row id string itself.
//
// Rows are ordered by primary key in the key's native order, which is
// the order of every backend's primary-key index and of
// schema.Table.CompareRowIDs: integer keys numerically, boolean keys
// false before true, string and json keys by the bytes of their text
// (which is their rowId). Bootstrap pages, AfterRowID paging and every
// ordered row read follow it, on every backend alike.

// KeyValue returns the primary-key value of t that rowID names, in the
// row codec's Go type (string, int64, bool, json.RawMessage), for a
// backend to look the row up with. ok is false when rowID names no row
// that can exist: it is not Storable, or no key value renders as it
// (schema.ParseKey: "abc" or "007" for an integer key, "1" for a boolean
// key, "{" for a json key). The backend then treats the row as absent
// (GetRow nil, DeleteRow deleting nothing) and sends nothing to the
// database, exactly as for any unstorable row id.
func KeyValue(t *schema.Table, rowID string) (any, bool) {
	if !Storable(rowID) {
		return nil, false
	}
	return t.KeyOf(rowID)
}

// AfterKey converts an AfterRowID of a row query on t (RowQuery,
// ColumnQuery) into the bound a backend compares the key column with:
// the rows it must return are exactly those whose row id sorts strictly
// after rowID in t.CompareRowIDs order. Either all of them qualify (all:
// no bound), none does (none: the query returns no row without asking
// the database), or the rows with key > v in the key column's native
// order do. v is:
//
//   - a string or json key: rowID itself, a string (the key's text
//     compares as bytes; a backend that cannot send U+0000 cuts it
//     there, which selects the same rows, since no stored key holds one);
//   - an integer key: its int64, when rowID is a canonical decimal; any
//     other rowID sorts after every integer, so none qualifies;
//   - a boolean key: false when rowID sorts between "false" (included)
//     and "true"; all below "false"; none from "true" on.
func AfterKey(t *schema.Table, rowID string) (v any, all, none bool) {
	switch t.Columns[t.PK].Type {
	case ssp2.TypeInteger:
		k, ok := t.KeyOf(rowID)
		if !ok {
			return nil, false, true
		}
		return k, false, false
	case ssp2.TypeBoolean:
		switch {
		case rowID < "false":
			return nil, true, false
		case rowID < "true":
			return false, false, false
		}
		return nil, false, true
	}
	return rowID, false, false
}
