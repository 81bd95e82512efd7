package ssp2

import (
	"encoding/json"
	"regexp"
	"unicode/utf16"
)

var detailsToken = regexp.MustCompile(`^[a-z][a-z0-9]*([._-][a-z0-9]+)*$`)

func utf16Len(s string) int { return len(utf16.Encode([]rune(s))) }

// checkDetailsJSON validates a PUSH_RESULT_DETAILS detailsJson string
// (notes §4) and returns "" or the reason it is malformed.
func checkDetailsJSON(s string) string {
	if len(s) > 4096 {
		return "longer than 4096 bytes"
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &m); err != nil || m == nil {
		return "not a JSON object"
	}
	if len(m) == 0 {
		return "needs at least one of fieldPaths, reason, requiredAction, references"
	}
	for k, v := range m {
		switch k {
		case "fieldPaths":
			var paths []string
			if json.Unmarshal(v, &paths) != nil || len(paths) < 1 || len(paths) > 32 {
				return "fieldPaths must be 1-32 strings"
			}
			seen := make(map[string]bool, len(paths))
			for _, p := range paths {
				if seen[p] || utf16Len(p) > 160 {
					return "fieldPaths entries must be unique and at most 160 characters"
				}
				seen[p] = true
			}
		case "reason", "requiredAction":
			var t string
			if json.Unmarshal(v, &t) != nil || len(t) > 96 || !detailsToken.MatchString(t) {
				return k + " must be a token of at most 96 characters"
			}
		case "references":
			var refs map[string]string
			if json.Unmarshal(v, &refs) != nil || len(refs) < 1 || len(refs) > 16 {
				return "references must be an object of 1-16 string entries"
			}
			for rk, rv := range refs {
				if len(rk) > 64 || !detailsToken.MatchString(rk) || len(rv) > 256 {
					return "references keys must be tokens of at most 64 characters and values at most 256 bytes"
				}
			}
		default:
			return "unknown member " + k
		}
	}
	return ""
}
