package sqlite

import (
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// bindValue converts a row value to its SQLite form, checking its Go type
// against the column type. Booleans become 0/1, JSON its verbatim text.
func bindValue(c ssp2.Column, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	if !storage.ValueFits(c, v) {
		return nil, fmt.Errorf("column %s: value of Go type %T does not fit type tag %d", c.Name, v, c.Type)
	}
	switch x := v.(type) {
	case bool:
		if x {
			return int64(1), nil
		}
		return int64(0), nil
	case json.RawMessage:
		return string(x), nil
	case []byte:
		if x == nil {
			return nil, nil
		}
	}
	return v, nil
}

// keyArg is the SQLite argument of the primary key of t that rowID
// names (storage.KeyValue, in bindValue's form: an integer, 0/1 for a
// boolean, text for a string or json key); ok is false when it names
// none, and nothing is to be sent.
func keyArg(t *schema.Table, rowID string) (any, bool) {
	k, ok := storage.KeyValue(t, rowID)
	if !ok {
		return nil, false
	}
	v, err := bindValue(t.Columns[t.PK], k)
	return v, err == nil
}

// decodeValue converts a scanned SQLite value back to the row value of c.
func decodeValue(c ssp2.Column, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch c.Type {
	case ssp2.TypeString, ssp2.TypeBlobRef:
		switch x := v.(type) {
		case string:
			return x, nil
		case []byte:
			return string(x), nil
		}
	case ssp2.TypeInteger:
		if x, ok := v.(int64); ok {
			return x, nil
		}
	case ssp2.TypeFloat:
		switch x := v.(type) {
		case float64:
			return x, nil
		case int64:
			return float64(x), nil
		}
	case ssp2.TypeBoolean:
		if x, ok := v.(int64); ok {
			return x != 0, nil
		}
	case ssp2.TypeJSON:
		switch x := v.(type) {
		case string:
			return json.RawMessage(x), nil
		case []byte:
			return json.RawMessage(append([]byte{}, x...)), nil
		}
	case ssp2.TypeBytes, ssp2.TypeCRDT:
		if x, ok := v.([]byte); ok {
			if x == nil {
				return []byte{}, nil // zero-length BLOB, not NULL
			}
			return x, nil
		}
	}
	return nil, fmt.Errorf("column %s: stored value of Go type %T does not fit type tag %d", c.Name, v, c.Type)
}

// scopeArray renders the values of scope var sv as the JSON array ScanRows
// binds for its column, and returns how many it holds: strings that are
// storage.Storable as JSON strings, and, for an integer column, only the
// canonical decimal forms (storage.CanonicalInts: anything else cannot
// equal a stored int64) as JSON integers. The others match no row and are
// dropped.
func scopeArray(t *schema.Table, sv *schema.ScopeVar, vals []string) (string, int, error) {
	var v any
	var n int
	if t.Columns[sv.Column].Type == ssp2.TypeInteger {
		ns := storage.CanonicalInts(vals)
		v, n = ns, len(ns)
	} else {
		ss := storage.StorableValues(vals)
		v, n = ss, len(ss)
	}
	b, err := json.Marshal(v)
	return string(b), n, err
}

// rowBuf reuses its scan buffers across the rows of one query.
type rowBuf struct {
	t         *schema.Table
	raw, ptrs []any
	// values, when set, is reused as every row's Values (VisitRows).
	values ssp2.Row
	// cv says the rows were selected with tableStmts.txSelectCols: the
	// last column is _sync_column_versions.
	cv bool
}

// newRowBuf scans rows selected with tableStmts.selectCols.
func newRowBuf(t *schema.Table) *rowBuf { return newBuf(t, false) }

// newTxRowBuf scans rows selected with tableStmts.txSelectCols, filling
// RowRecord.ColumnVersions.
func newTxRowBuf(t *schema.Table) *rowBuf { return newBuf(t, true) }

func newBuf(t *schema.Table, cv bool) *rowBuf {
	n := len(t.Columns) + 1
	if cv {
		n++
	}
	sc := &rowBuf{t: t, raw: make([]any, n), ptrs: make([]any, n), cv: cv}
	for i := range sc.raw {
		sc.ptrs[i] = &sc.raw[i]
	}
	return sc
}

func (sc *rowBuf) scan(rows *sql.Rows) (storage.RowRecord, error) {
	t, raw := sc.t, sc.raw
	clear(raw)
	if err := rows.Scan(sc.ptrs...); err != nil {
		return storage.RowRecord{}, err
	}
	rec := storage.RowRecord{Values: sc.values}
	if rec.Values == nil {
		rec.Values = make(ssp2.Row, len(t.Columns))
	}
	for i, c := range t.Columns {
		v, err := decodeValue(c, raw[i])
		if err != nil {
			return rec, err
		}
		rec.Values[i] = v
	}
	ver, ok := raw[len(t.Columns)].(int64)
	if !ok {
		return rec, fmt.Errorf("_sync_version of Go type %T", raw[len(t.Columns)])
	}
	rec.Version = ver
	if sc.cv {
		cv, err := decodeColumnVersions(raw[len(t.Columns)+1])
		if err != nil {
			return rec, err
		}
		rec.ColumnVersions = cv
	}
	id, ok := t.RowID(rec.Values)
	if !ok {
		return rec, fmt.Errorf("primary key %s: stored value %v renders no row id", t.Columns[t.PK].Name, rec.Values[t.PK])
	}
	rec.RowID = id
	return rec, nil
}

// bindColumnVersions is the SQLite form of a row's column versions: NULL
// for nil, else a BLOB of their bytes (a zero-length one for an empty,
// non-nil value, which must not read back as NULL).
func bindColumnVersions(cv storage.ColumnVersions) any {
	if cv == nil {
		return nil
	}
	if len(cv) == 0 {
		return []byte{}
	}
	return []byte(cv)
}

// decodeColumnVersions converts a scanned _sync_column_versions value:
// NULL is nil (a row written before column versions), a BLOB its bytes
// (database/sql hands a zero-length one as a nil []byte inside a non-nil
// interface: it is an empty, non-nil value).
func decodeColumnVersions(v any) (storage.ColumnVersions, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case []byte:
		if x == nil {
			return storage.ColumnVersions{}, nil
		}
		return storage.ColumnVersions(x), nil
	}
	return nil, fmt.Errorf("%s of Go type %T, want BLOB", columnVersionsCol, v)
}
