package storage

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/synclane/synclane/protocol/ssp2"
)

// Rules the backends share. Each is written once here so that every
// backend (memory, sqlite, postgres) applies the same rule the same way.

// NewLogEpoch returns a fresh, unpredictable log epoch for a partition: a
// random (version 4) UUID, 122 random bits from crypto/rand, rendered as
// 32 lowercase hexadecimal characters without dashes. Every backend creates
// and rotates log epochs with it, so epochs have one format whichever
// backend stores them, and two calls return different epochs. It does not
// fail: crypto/rand never returns an error (a broken system random source
// aborts the program).
func NewLogEpoch() string {
	u := uuid.New()
	return hex.EncodeToString(u[:])
}

// ValueFits reports whether v has the Go type ssp2.Row documents for a
// non-NULL value of column c (string for string and blob_ref, int64, float64,
// bool, json.RawMessage for json, []byte for bytes and crdt). Backends check
// row values with it before storing them.
func ValueFits(c ssp2.Column, v any) bool {
	switch c.Type {
	case ssp2.TypeString, ssp2.TypeBlobRef:
		_, ok := v.(string)
		return ok
	case ssp2.TypeInteger:
		_, ok := v.(int64)
		return ok
	case ssp2.TypeFloat:
		_, ok := v.(float64)
		return ok
	case ssp2.TypeBoolean:
		_, ok := v.(bool)
		return ok
	case ssp2.TypeJSON:
		_, ok := v.(json.RawMessage)
		return ok
	case ssp2.TypeBytes, ssp2.TypeCRDT:
		_, ok := v.([]byte)
		return ok
	}
	return false
}

// MatchScopes reports whether stored change scopes match an effective scope
// map: for every var of effective, the stored value of that var exists and
// is in the var's list (an empty list matches nothing). Backends that
// filter in Go use it so every backend agrees.
func MatchScopes(stored map[string]string, effective map[string][]string) bool {
	for k, vals := range effective {
		v, ok := stored[k]
		if !ok || !slices.Contains(vals, v) {
			return false
		}
	}
	return true
}

// CanonicalInts returns, in order, the values of vals that are the
// canonical decimal form of an int64 (as strconv.FormatInt renders it: no
// "+" sign, no leading zeros, no spaces), parsed. Scope values given for an
// integer scope column match a stored integer only in that form, so the
// others can match no row and are dropped. The result is empty, not nil,
// when none qualifies.
func CanonicalInts(vals []string) []int64 {
	out := make([]int64, 0, len(vals))
	for _, v := range vals {
		n, err := strconv.ParseInt(v, 10, 64)
		if err == nil && strconv.FormatInt(n, 10) == v {
			out = append(out, n)
		}
	}
	return out
}

// CheckIncomplete implements EnsureSchema's final check. pending lists the
// checkpoints at the running schema version that are not activated; it
// returns nil when decls declares every one of them, else an error wrapping
// ErrCheckpointIncomplete that names the undeclared ones as partition/name,
// in the order of pending. Callers add their backend and version prefix.
func CheckIncomplete(pending []CheckpointRef, decls []CheckpointDeclaration) error {
	var missing []string
	for _, r := range pending {
		if !slices.ContainsFunc(decls, func(d CheckpointDeclaration) bool { return d.Partition == r.Partition && d.Name == r.Name }) {
			missing = append(missing, r.Partition+"/"+r.Name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("undeclared checkpoints %s: %w", strings.Join(missing, ", "), ErrCheckpointIncomplete)
	}
	return nil
}
