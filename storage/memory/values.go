package memory

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

func cloneBytes[T ~[]byte](b T) T {
	if b == nil {
		return nil
	}
	return append(T{}, b...)
}

// copyRow deep-copies r and pads it with NULLs to n columns.
func copyRow(r ssp2.Row, n int) ssp2.Row {
	out := make(ssp2.Row, max(n, len(r)))
	for i, v := range r {
		switch x := v.(type) {
		case []byte:
			out[i] = cloneBytes(x)
		case json.RawMessage:
			out[i] = cloneBytes(x)
		default:
			out[i] = v
		}
	}
	return out[:n]
}

func copyRecord(r storage.RowRecord, n int) storage.RowRecord {
	r.Values = copyRow(r.Values, n)
	if r.ColumnVersions != nil {
		r.ColumnVersions = slices.Clone(r.ColumnVersions)
	}
	return r
}

// copyTombs deep-copies a tombstone map.
func copyTombs(m map[string]map[string]int64) map[string]map[string]int64 {
	out := make(map[string]map[string]int64, len(m))
	for t, ids := range m {
		out[t] = maps.Clone(ids)
	}
	return out
}

func copyChange(c storage.ChangeRecord) storage.ChangeRecord {
	c.Scopes = maps.Clone(c.Scopes)
	c.Row = cloneBytes(c.Row)
	return c
}

func copyCommit(c storage.CommitRecord) storage.CommitRecord {
	chs := make([]storage.ChangeRecord, len(c.Changes))
	for i, ch := range c.Changes {
		chs[i] = copyChange(ch)
	}
	c.Changes = chs
	return c
}

func copyIdem(r storage.IdempotencyRecord) storage.IdempotencyRecord {
	r.Result = cloneBytes(r.Result)
	return r
}

// checkShape validates the arity of rec and its primary key against t
// (programming errors).
func checkShape(t *schema.Table, rec storage.RowRecord) error {
	if len(rec.Values) != len(t.Columns) {
		return fmt.Errorf("memory: table %s: row has %d values, schema has %d columns", t.Name, len(rec.Values), len(t.Columns))
	}
	if id, ok := t.RowID(rec.Values); !ok || id != rec.RowID {
		return fmt.Errorf("memory: table %s: primary key value %v does not render as rowID %q", t.Name, rec.Values[t.PK], rec.RowID)
	}
	return nil
}

// checkRow validates rec (of the shape checkShape accepts) against t: Go
// types per column type (a programming error otherwise) and NOT NULL
// (reported as storage.ErrConstraint like a SQL backend would).
func checkRow(t *schema.Table, rec storage.RowRecord) error {
	for i, c := range t.Columns {
		v := rec.Values[i]
		if v == nil {
			if !c.Nullable {
				return fmt.Errorf("memory: table %s: NULL in NOT NULL column %s: %w", t.Name, c.Name, storage.ErrConstraint)
			}
			continue
		}
		ok := storage.ValueFits(c, v)
		if !ok {
			return fmt.Errorf("memory: table %s column %s: value of Go type %T does not fit type tag %d", t.Name, c.Name, v, c.Type)
		}
	}
	return nil
}

func valueEqual(a, b any) bool {
	switch x := a.(type) {
	case []byte:
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y)
	case json.RawMessage:
		y, ok := b.(json.RawMessage)
		return ok && bytes.Equal(x, y)
	default:
		return a == b
	}
}

// scopeString renders a scope column value the way change scopes store it.
func scopeString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case int64:
		return strconv.FormatInt(x, 10), true
	}
	return "", false
}

// rowMatches reports whether row matches the effective scopes of t.
func rowMatches(t *schema.Table, row ssp2.Row, scopes map[string][]string) bool {
	for v, vals := range scopes {
		sv := t.ScopeVar(v)
		if sv == nil || sv.Column >= len(row) {
			return false
		}
		s, ok := scopeString(row[sv.Column])
		if !ok || !slices.Contains(vals, s) {
			return false
		}
	}
	return true
}
