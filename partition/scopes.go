// Package partition holds synclane's pure decision logic: scope resolution
// (SPEC §3.2), write authorization (§3.4), scope extraction, conflict
// detection (§6.2), log-epoch and schema-floor rules (§2.1, §1.6). Nothing
// here does I/O; the partition actor calls these functions and acts on the
// answers, and they are unit-tested without actors or storage.
package partition

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
)

// Wildcard in an allowed-scope list means "any value".
const Wildcard = "*"

// Allowed is the result of a host's scope resolution for one actor: scope
// variable → allowed values (Wildcard allows any value). It covers every
// table.
type Allowed map[string][]string

// ValidateAllowed checks that every key of a resolver result is a scope
// variable some table declares (SPEC §3.2 step 2).
func ValidateAllowed(s *schema.Schema, a Allowed) *syncerr.Error {
	for k := range a {
		if !s.DeclaresVar(k) {
			return syncerr.New(syncerr.InvalidSubscription, "scope resolver returned variable %q that no table declares", k)
		}
	}
	return nil
}

// ValidateRequested checks a subscription's requested scope map against its
// table (SPEC §3.2 step 1): every key must be a variable the table declares
// and no value may be the wildcard.
func ValidateRequested(t *schema.Table, requested map[string][]string) *syncerr.Error {
	for k, vals := range requested {
		if t.ScopeVar(k) == nil {
			return syncerr.New(syncerr.InvalidSubscription, "table %q declares no scope variable %q", t.Name, k)
		}
		if slices.Contains(vals, Wildcard) {
			return syncerr.New(syncerr.InvalidSubscription, "requested scope %q may not use %q", k, Wildcard)
		}
	}
	return nil
}

// Effective computes a subscription's effective scopes (SPEC §3.2 step 3-4)
// from its validated requested map and the actor's allowed map. resolved is
// false when the resolver failed. It reports revoked when the resolver
// failed, when a requested key has no effective values, or when the result
// is empty. Value lists are returned sorted and de-duplicated.
func Effective(requested map[string][]string, allowed Allowed, resolved bool) (effective map[string][]string, revoked bool) {
	if !resolved || len(requested) == 0 {
		return map[string][]string{}, true
	}
	effective = make(map[string][]string, len(requested))
	for k, req := range requested {
		al, ok := allowed[k]
		if !ok {
			return map[string][]string{}, true
		}
		// Requested values pass through in the order the client sent them
		// (SPEC §3.2); canonical forms (the scope digest) sort for themselves.
		var out []string
		if slices.Contains(al, Wildcard) {
			out = slices.Clone(req)
		} else {
			for _, v := range req {
				if slices.Contains(al, v) {
					out = append(out, v)
				}
			}
		}
		if len(out) == 0 {
			return map[string][]string{}, true
		}
		effective[k] = out
	}
	return effective, false
}

// ScopeValue renders the value of a scope column as the string stored with
// changes and compared against scope lists. ok is false for NULL, the empty
// string, or a value of the wrong type.
func ScopeValue(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, x != ""
	case int64:
		return strconv.FormatInt(x, 10), true
	default:
		return "", false
	}
}

// ExtractScopes returns var → value for every declared scope variable of t,
// read from row (the row after an upsert or before a delete). A missing
// value is sync.missing_scopes (SPEC §3.1).
func ExtractScopes(t *schema.Table, row ssp2.Row) (map[string]string, *syncerr.Error) {
	out := make(map[string]string, len(t.Scopes))
	for _, sv := range t.Scopes {
		if sv.Column >= len(row) {
			return nil, syncerr.New(syncerr.MissingScopes, "row of %q has no value for scope %q", t.Name, sv.Var)
		}
		v, ok := ScopeValue(row[sv.Column])
		if !ok {
			return nil, syncerr.New(syncerr.MissingScopes, "row of %q has no value for scope %q (column %q)", t.Name, sv.Var, t.Columns[sv.Column].Name)
		}
		out[sv.Var] = v
	}
	return out, nil
}

// AuthorizeRow is the write-path check of SPEC §3.4 step 3: for every
// declared variable of t, the row's value must be in the actor's allowed
// list (or the list holds the wildcard). A missing or empty value is denied.
// resolved is false when the resolver failed, which denies everything.
func AuthorizeRow(t *schema.Table, row ssp2.Row, allowed Allowed, resolved bool) *syncerr.Error {
	if !resolved {
		return syncerr.New(syncerr.Forbidden, "scope resolution failed; writes to %q are denied", t.Name)
	}
	for _, sv := range t.Scopes {
		var v string
		ok := false
		if sv.Column < len(row) {
			v, ok = ScopeValue(row[sv.Column])
		}
		if !ok {
			return syncerr.New(syncerr.Forbidden, "row of %q has no value for scope %q", t.Name, sv.Var)
		}
		al := allowed[sv.Var]
		if !slices.Contains(al, Wildcard) && !slices.Contains(al, v) {
			return syncerr.New(syncerr.Forbidden, "actor may not write %q rows with %s=%q", t.Name, sv.Var, v)
		}
	}
	return nil
}

// equalValue compares two decoded row values (see ssp2.Row).
func equalValue(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		y, ok := b.(string)
		return ok && x == y
	case int64:
		y, ok := b.(int64)
		return ok && x == y
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case json.RawMessage:
		y, ok := b.(json.RawMessage)
		return ok && bytes.Equal(x, y)
	case []byte:
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y)
	default:
		return false
	}
}
