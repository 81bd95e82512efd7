package postgres

import (
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// encodeValue converts a row value of column c into a query argument.
func encodeValue(c ssp2.Column, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	bad := func() (any, error) {
		return nil, fmt.Errorf("column %q: value of type %T for column type %d", c.Name, v, c.Type)
	}
	switch c.Type {
	case ssp2.TypeString, ssp2.TypeBlobRef:
		if s, ok := v.(string); ok {
			return s, nil
		}
	case ssp2.TypeInteger:
		if n, ok := v.(int64); ok {
			return n, nil
		}
	case ssp2.TypeFloat:
		if f, ok := v.(float64); ok {
			return f, nil
		}
	case ssp2.TypeBoolean:
		if b, ok := v.(bool); ok {
			return b, nil
		}
	case ssp2.TypeJSON:
		switch x := v.(type) {
		case json.RawMessage:
			return string(x), nil
		case string:
			return x, nil
		}
	case ssp2.TypeBytes, ssp2.TypeCRDT:
		if b, ok := v.([]byte); ok {
			if b == nil {
				b = []byte{} // a nil slice would be sent as NULL
			}
			return b, nil
		}
	}
	return bad()
}

// keyArg is the query argument of the primary key of t that rowID names
// (storage.KeyValue, in encodeValue's form: an int64, a bool, or text for
// a string or json key); ok is false when it names none, and nothing is
// to be sent.
func keyArg(t *schema.Table, rowID string) (any, bool) {
	k, ok := storage.KeyValue(t, rowID)
	if !ok {
		return nil, false
	}
	v, err := encodeValue(t.Columns[t.PK], k)
	return v, err == nil
}

// rowScanner holds typed scan targets for one row of a table.
type rowScanner struct {
	t       *schema.Table
	targets []any
	version int64
	// cv, when set (newTxRowScanner), is the _sync_column_versions target.
	cv *[]byte
}

// newTxRowScanner scans rows selected with tableSQL.txSelectList: record
// fills ColumnVersions from the last column.
func newTxRowScanner(t *schema.Table) *rowScanner {
	rs := newRowScanner(t)
	rs.cv = new([]byte)
	rs.targets = append(rs.targets, rs.cv)
	return rs
}

// newRowScanner scans rows selected with tableSQL.selectList.
func newRowScanner(t *schema.Table) *rowScanner {
	rs := &rowScanner{t: t, targets: make([]any, len(t.Columns)+1, len(t.Columns)+2)}
	for i, c := range t.Columns {
		switch c.Type {
		case ssp2.TypeInteger:
			rs.targets[i] = new(pgtype.Int8)
		case ssp2.TypeFloat:
			rs.targets[i] = new(pgtype.Float8)
		case ssp2.TypeBoolean:
			rs.targets[i] = new(pgtype.Bool)
		case ssp2.TypeBytes, ssp2.TypeCRDT:
			rs.targets[i] = new([]byte)
		default:
			rs.targets[i] = new(pgtype.Text)
		}
	}
	rs.targets[len(t.Columns)] = &rs.version
	return rs
}

// record converts the last scanned row into a RowRecord with fresh values.
func (rs *rowScanner) record() storage.RowRecord {
	row := make(ssp2.Row, len(rs.t.Columns))
	for i, c := range rs.t.Columns {
		switch x := rs.targets[i].(type) {
		case *pgtype.Int8:
			if x.Valid {
				row[i] = x.Int64
			}
		case *pgtype.Float8:
			if x.Valid {
				row[i] = x.Float64
			}
		case *pgtype.Bool:
			if x.Valid {
				row[i] = x.Bool
			}
		case *[]byte:
			if *x != nil {
				b := make([]byte, len(*x))
				copy(b, *x)
				row[i] = b
			}
		case *pgtype.Text:
			if x.Valid {
				if c.Type == ssp2.TypeJSON {
					row[i] = json.RawMessage(x.String)
				} else {
					row[i] = x.String
				}
			}
		}
	}
	id, _ := rs.t.RowID(row) // the key column is NOT NULL of the key's type: it renders
	rec := storage.RowRecord{RowID: id, Version: rs.version, Values: row}
	if rs.cv != nil && *rs.cv != nil { // NULL scans as nil, an empty bytea as a non-nil empty slice
		rec.ColumnVersions = append(storage.ColumnVersions{}, *rs.cv...)
	}
	return rec
}
