package ssp2

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
)

// CanonicalScopesJSON returns the canonical JSON (§11.2) of a scope map: no
// whitespace, keys sorted by UTF-16 code units, each value list sorted the
// same way and de-duplicated, strings escaped as JSON.stringify does. A nil
// map renders as {}.
func CanonicalScopesJSON(scopes map[string][]string) []byte {
	keys := make([]string, 0, len(scopes))
	for k := range scopes {
		keys = append(keys, k)
	}
	sortKeysUTF16(keys)
	b := make([]byte, 0, 64)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':', '[')
		vals := slices.Clone(scopes[k])
		slices.SortFunc(vals, CompareUTF16)
		vals = slices.Compact(vals)
		for j, v := range vals {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, v)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// ScopeDigest returns the lowercase hex SHA-256 of the canonical JSON of an
// effective scope map (§3.5). {"project":["p1"]} digests to
// 5a993aa4d503af6f5dc77acc12ad399ff2e9d933c393f4de6af5f6aef4fa2977.
func ScopeDigest(effective map[string][]string) string {
	sum := sha256.Sum256(CanonicalScopesJSON(effective))
	return hex.EncodeToString(sum[:])
}
