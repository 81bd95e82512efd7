package schema

import (
	"cmp"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/synclane/synclane/protocol/ssp2"
)

// Primary keys and row ids (SPEC §2.2, §2.4 "Primary-key eligibility").
//
// A primary-key column is a non-nullable string, integer, boolean or json
// column; float, bytes, crdt and blob_ref keys are refused at compile
// (KeyTypeEligible). The wire rowId of a row is its key rendered as a
// string, as the reference renders it with JavaScript String(value):
//
//	string   the string itself
//	integer  its decimal form: "-12", "0", "9007199254740993" (no sign
//	         for positives, no leading zeros)
//	boolean  "true" or "false"
//	json     the raw JSON text as stored, byte for byte (json values are
//	         raw text in the row codec: "{\"a\":1}" and "{ \"a\": 1 }" are
//	         two keys)
//
// The rendering is total and injective, so it is inverted exactly
// (ParseKey): a rowId names at most one key value. A rowId that no value
// renders to (e.g. "abc" or "007" for an integer key, "1" for a boolean
// key, "{" for a json key) names no row: lookups treat it as absent.
//
// Rows are ordered by the key's native order, the order of the storage
// backends' primary-key index (CompareRowIDs): numeric for integer keys,
// false before true for boolean keys, and the byte order of the text for
// string and json keys. Bootstrap pages and every "after rowId" cursor
// follow it.

// KeyTypeEligible reports whether a column of type typ may be a primary
// key (SPEC §2.4): string, integer, boolean and json may; float, bytes,
// crdt and blob_ref may not.
func KeyTypeEligible(typ ssp2.ColumnType) bool {
	switch typ {
	case ssp2.TypeString, ssp2.TypeInteger, ssp2.TypeBoolean, ssp2.TypeJSON:
		return true
	}
	return false
}

// RenderKey renders v, a value of the primary-key column c (a Go value of
// the row codec: string, int64, bool or json.RawMessage), as its wire
// rowId. ok is false for a nil value, a value of another Go type, or a
// column type that cannot be a key.
func RenderKey(c ssp2.Column, v any) (rowID string, ok bool) {
	switch c.Type {
	case ssp2.TypeString:
		s, ok := v.(string)
		return s, ok
	case ssp2.TypeInteger:
		n, ok := v.(int64)
		if !ok {
			return "", false
		}
		return strconv.FormatInt(n, 10), true
	case ssp2.TypeBoolean:
		b, ok := v.(bool)
		if !ok {
			return "", false
		}
		return strconv.FormatBool(b), true
	case ssp2.TypeJSON:
		j, ok := v.(json.RawMessage)
		if !ok || j == nil {
			return "", false
		}
		return string(j), true
	}
	return "", false
}

// ParseKey returns the value of the primary-key column c whose rendering
// (RenderKey) is rowID, as the row codec's Go type (string, int64, bool,
// json.RawMessage). ok is false when no value renders as rowID: rowID
// then names no row. For a json key rowID must be a valid UTF-8 JSON
// document (what the row codec accepts); it is kept verbatim.
func ParseKey(c ssp2.Column, rowID string) (v any, ok bool) {
	switch c.Type {
	case ssp2.TypeString:
		return rowID, true
	case ssp2.TypeInteger:
		n, ok := parseCanonicalInt(rowID)
		if !ok {
			return nil, false
		}
		return n, true
	case ssp2.TypeBoolean:
		switch rowID {
		case "true":
			return true, true
		case "false":
			return false, true
		}
	case ssp2.TypeJSON:
		if utf8.ValidString(rowID) && json.Valid([]byte(rowID)) {
			return json.RawMessage(rowID), true
		}
	}
	return nil, false
}

// parseCanonicalInt parses s when it is the canonical decimal form of an
// int64 (strconv.FormatInt's): no "+", no leading zeros, no "-0".
func parseCanonicalInt(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || strconv.FormatInt(n, 10) != s {
		return 0, false
	}
	return n, true
}

// RowID renders the primary key of row (a row of t in column order) as
// its wire rowId; ok is false when the row's key is missing or not a
// value of the key column's type.
func (t *Table) RowID(row ssp2.Row) (string, bool) {
	if t.PK >= len(row) {
		return "", false
	}
	return RenderKey(t.Columns[t.PK], row[t.PK])
}

// KeyOf returns the primary-key value of t that rowID names (ParseKey on
// t's key column); ok is false when it names none.
func (t *Table) KeyOf(rowID string) (any, bool) { return ParseKey(t.Columns[t.PK], rowID) }

// CompareRowIDs orders two rowIds of t in the key's native order (see the
// package notes above): -1 when a sorts before b, 0 when equal, +1 after.
// For an integer key, a rowId that is not a canonical decimal sorts after
// every one that is, in byte order among themselves (such ids name no
// row; the order only keeps sorting total). Every other key type orders
// as the bytes of the rowId, which is also the native order of boolean
// keys ("false" < "true") and of string and json keys.
func (t *Table) CompareRowIDs(a, b string) int {
	if t.Columns[t.PK].Type == ssp2.TypeInteger {
		x, xok := parseCanonicalInt(a)
		y, yok := parseCanonicalInt(b)
		switch {
		case xok && yok:
			return cmp.Compare(x, y)
		case xok:
			return -1
		case yok:
			return 1
		}
	}
	return strings.Compare(a, b)
}
