package sqlite

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// classify wraps err with storage.ErrConstraint when the driver reports a
// result code of the SQLITE_CONSTRAINT family.
func classify(err error, what string) error {
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_CONSTRAINT {
		return fmt.Errorf("sqlite: %s: %w: %w", what, storage.ErrConstraint, err)
	}
	return fmt.Errorf("sqlite: %s: %w", what, err)
}

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

// scopeArgs turns the values of scope var sv into bind arguments for its
// column: strings as they are, integers only in canonical decimal form
// (anything else cannot equal a stored int64 and is dropped).
func scopeArgs(t *schema.Table, sv *schema.ScopeVar, vals []string) []any {
	out := make([]any, 0, len(vals))
	for _, v := range vals {
		if t.Columns[sv.Column].Type == ssp2.TypeInteger {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || strconv.FormatInt(n, 10) != v {
				continue
			}
			out = append(out, n)
			continue
		}
		out = append(out, v)
	}
	return out
}
