package operations

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"unicode/utf8"

	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/opwire"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// MaxScopeValues bounds the values one covered scope parameter may carry.
const MaxScopeValues = 1000

// Prepare authorizes caller for the query with params and binds it: a
// scoped query checks every covered value against allowed (resolved false
// means the resolver failed: denied), a privileged query asks Authorize.
// It returns the storage query to run, or a coded error:
// operation.forbidden, operation.invalid_request (params), or
// operation.execution_failed (Bind returned the wrong values).
func (cq *CompiledQuery) Prepare(ctx context.Context, caller Caller, params any, allowed map[string][]string, resolved bool) (storage.Query, error) {
	q := storage.Query{MaxRows: cq.MaxRows, Parts: slices.Clone(cq.parts)}
	if cq.Scoped() {
		if !resolved {
			return q, syncerr.New(syncerr.OperationForbidden, "scope resolution failed; query %q is denied", cq.ID)
		}
		filters := map[string][]storage.ScopeFilter{}
		for _, t := range cq.tables {
			fs, err := cq.coverFilters(t, params, allowed)
			if err != nil {
				return q, err
			}
			filters[t.Name] = fs
		}
		for i, p := range q.Parts {
			if p.Relation != nil {
				r := *p.Relation
				r.Filters = filters[r.Table.Name]
				q.Parts[i].Relation = &r
			}
		}
	} else {
		ok, err := Guard("Authorize of query "+cq.ID, func() (bool, error) { return cq.Authorize(ctx, caller, params) })
		if err != nil {
			return q, syncerr.Wrap(syncerr.OperationForbidden, err, "authorization of query %q failed", cq.ID)
		}
		if !ok {
			return q, syncerr.New(syncerr.OperationForbidden, "query %q is not allowed for this caller", cq.ID)
		}
	}
	if cq.binds > 0 {
		args, err := Guard("Bind of query "+cq.ID, func() ([]any, error) { return cq.Bind(params) })
		if err != nil {
			return q, syncerr.Wrap(syncerr.OperationInvalidRequest, err, "params of query %q: %v", cq.ID, err)
		}
		if len(args) != cq.binds {
			return q, syncerr.New(syncerr.OperationExecutionFailed, "Bind of query %q returned %d values for %d parameters", cq.ID, len(args), cq.binds)
		}
		for i, a := range args {
			switch a.(type) {
			case nil, bool, int64, float64, string, []byte:
			default:
				return q, syncerr.New(syncerr.OperationExecutionFailed, "Bind of query %q returned a %T for parameter %d", cq.ID, a, i+1)
			}
		}
		q.Args = args
	}
	return q, nil
}

// coverFilters reads the covered values of table t from params and checks
// each against allowed.
func (cq *CompiledQuery) coverFilters(t *schema.Table, params any, allowed map[string][]string) ([]storage.ScopeFilter, error) {
	obj, _ := params.(opwire.Object)
	cov := cq.cover[t.Name]
	out := make([]storage.ScopeFilter, 0, len(t.Scopes))
	for _, sv := range t.Scopes {
		key := cov.Params[sv.Var]
		raw, ok := obj.Get(key)
		if !ok {
			return nil, syncerr.New(syncerr.OperationInvalidRequest, "params of query %q have no %q (scope %q of %q)", cq.ID, key, sv.Var, t.Name)
		}
		var vals []string
		switch x := raw.(type) {
		case string:
			vals = []string{x}
		case []any:
			for _, e := range x {
				s, ok := e.(string)
				if !ok {
					vals = nil
					break
				}
				vals = append(vals, s)
			}
			if len(vals) != len(x) {
				vals = nil
			}
		}
		if len(vals) == 0 || len(vals) > MaxScopeValues || slices.Contains(vals, "") {
			return nil, syncerr.New(syncerr.OperationInvalidRequest, "params %q of query %q must be a non-empty string or 1..%d non-empty strings", key, cq.ID, MaxScopeValues)
		}
		al := allowed[sv.Var]
		if !slices.Contains(al, partition.Wildcard) {
			for _, v := range vals {
				if !slices.Contains(al, v) {
					return nil, syncerr.New(syncerr.OperationForbidden, "query %q: scope %s=%q is not allowed for this caller", cq.ID, sv.Var, v)
				}
			}
		}
		out = append(out, storage.ScopeFilter{Column: sv.Column, Values: vals})
	}
	return out, nil
}

// Rows returns the result's rows as objects of the declared columns, in
// declared order, values normalized to their declared types. A declared
// column missing from the result, a NULL in a non-nullable column or a
// value that does not fit is operation.query_failed.
func (cq *CompiledQuery) Rows(res storage.QueryResult) ([]opwire.Object, error) {
	vals, err := cq.values(res)
	if err != nil {
		return nil, err
	}
	out := make([]opwire.Object, len(vals))
	for r, row := range vals {
		o := make(opwire.Object, len(cq.Columns))
		for i, c := range cq.Columns {
			o[i] = opwire.Field{Key: c.Name, Value: row[i]}
		}
		out[r] = o
	}
	return out, nil
}

// values returns the result's rows as values of the declared columns, in
// declared order, normalized as Rows describes.
func (cq *CompiledQuery) values(res storage.QueryResult) ([][]any, error) {
	idx := make([]int, len(cq.Columns))
	for i, c := range cq.Columns {
		idx[i] = slices.Index(res.Columns, c.Name)
		if idx[i] < 0 {
			return nil, syncerr.New(syncerr.OperationQueryFailed, "query %q: the result has no column %q", cq.ID, c.Name)
		}
	}
	out := make([][]any, len(res.Rows))
	for r, row := range res.Rows {
		vs := make([]any, len(cq.Columns))
		for i, c := range cq.Columns {
			v, err := normalize(c, row[idx[i]])
			if err != nil {
				return nil, syncerr.Wrap(syncerr.OperationQueryFailed, err, "query %q row %d column %q: %v", cq.ID, r, c.Name, err)
			}
			vs[i] = v
		}
		out[r] = vs
	}
	return out, nil
}

// normalize converts a driver value to the declared column type.
func normalize(c Column, v any) (any, error) {
	if v == nil {
		if !c.Nullable {
			return nil, fmt.Errorf("NULL in a non-nullable column")
		}
		return nil, nil
	}
	switch c.Type {
	case ssp2.TypeInteger:
		switch x := v.(type) {
		case int64:
			return x, nil
		case int32:
			return int64(x), nil
		case int16:
			return int64(x), nil
		case float64:
			if x == math.Trunc(x) && math.Abs(x) < 1<<63 {
				return int64(x), nil
			}
		}
	case ssp2.TypeFloat:
		switch x := v.(type) {
		case float64:
			return x, nil
		case float32:
			return float64(x), nil
		case int64:
			return float64(x), nil
		case int32:
			return float64(x), nil
		}
	case ssp2.TypeBoolean:
		switch x := v.(type) {
		case bool:
			return x, nil
		case int64:
			if x == 0 || x == 1 {
				return x == 1, nil
			}
		}
	case ssp2.TypeString, ssp2.TypeBlobRef:
		switch x := v.(type) {
		case string:
			return x, nil
		case []byte:
			if utf8.Valid(x) {
				return string(x), nil
			}
		}
	case ssp2.TypeJSON:
		var s string
		switch x := v.(type) {
		case string:
			s = x
		case []byte:
			s = string(x)
		default:
			b, err := json.Marshal(x)
			if err != nil {
				return nil, err
			}
			s = string(b)
		}
		if json.Valid([]byte(s)) {
			return s, nil
		}
	case ssp2.TypeBytes, ssp2.TypeCRDT:
		switch x := v.(type) {
		case []byte:
			return x, nil
		case string:
			return []byte(x), nil
		}
	}
	return nil, fmt.Errorf("a %T value does not fit type %d", v, c.Type)
}

// Row converts a command's mutation into the table, row ID and full row
// (in column order) the write path applies. Errors are
// operation.invalid_request.
func (r *Registry) Row(m Mutation) (*schema.Table, string, ssp2.Row, error) {
	t := r.schema.Table(m.Table)
	if t == nil {
		return nil, "", nil, syncerr.New(syncerr.OperationInvalidRequest, "mutation names unknown table %q", m.Table)
	}
	if m.Delete {
		if m.RowID == "" || m.Values != nil {
			return nil, "", nil, syncerr.New(syncerr.OperationInvalidRequest, "a delete of %q needs a RowID and no Values", m.Table)
		}
		return t, m.RowID, nil, nil
	}
	row := make(ssp2.Row, len(t.Columns))
	for k := range m.Values {
		if t.Column(k) < 0 {
			return nil, "", nil, syncerr.New(syncerr.OperationInvalidRequest, "mutation of %q names unknown column %q", m.Table, k)
		}
	}
	for i, c := range t.Columns {
		v, ok := m.Values[c.Name]
		if !ok || v == nil {
			if !c.Nullable {
				return nil, "", nil, syncerr.New(syncerr.OperationInvalidRequest, "mutation of %q has no value for non-nullable column %q", m.Table, c.Name)
			}
			continue
		}
		switch x := v.(type) {
		case int:
			v = int64(x)
		case string:
			if c.Type == ssp2.TypeJSON {
				if !json.Valid([]byte(x)) {
					return nil, "", nil, syncerr.New(syncerr.OperationInvalidRequest, "mutation of %q: column %q is not valid JSON", m.Table, c.Name)
				}
				v = json.RawMessage(x)
			}
		}
		if !storage.ValueFits(c, v) {
			return nil, "", nil, syncerr.New(syncerr.OperationInvalidRequest, "mutation of %q: a %T does not fit column %q", m.Table, v, c.Name)
		}
		row[i] = v
	}
	id, _ := t.RowID(row) // the key is non-nullable and fits its column: it renders
	if m.RowID != "" && m.RowID != id {
		return nil, "", nil, syncerr.New(syncerr.OperationInvalidRequest, "mutation of %q: RowID %q differs from the primary key %q", m.Table, m.RowID, id)
	}
	return t, id, row, nil
}

// RowValues renders a stored row as column name → value.
func RowValues(t *schema.Table, row ssp2.Row) map[string]any {
	out := make(map[string]any, len(t.Columns))
	for i, c := range t.Columns {
		if i < len(row) {
			out[c.Name] = row[i]
		}
	}
	return out
}

// Guard runs a host callback (an Authorize, a Bind), turning a panic in it
// into an error naming what panicked, so the operation is refused (an
// Authorize panic denies it) and the goroutine that called survives.
func Guard[T any](what string, fn func() (T, error)) (v T, err error) {
	defer func() {
		if r := recover(); r != nil {
			var zero T
			v, err = zero, fmt.Errorf("operations: %s panicked: %v", what, r)
		}
	}()
	return fn()
}
