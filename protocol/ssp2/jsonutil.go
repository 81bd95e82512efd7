package ssp2

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string the way JavaScript's
// JSON.stringify does: only '"', '\\' and control characters are escaped;
// everything else (including non-ASCII) is written literally.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"':
			dst = append(dst, '\\', '"')
		case '\\':
			dst = append(dst, '\\', '\\')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendJSONFloat renders f as a JSON number (shortest round-trip form), or
// null for NaN and ±Inf (§11.1 rule 10).
func appendJSONFloat(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	abs := math.Abs(f)
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		return strconv.AppendFloat(dst, f, 'e', -1, 64)
	}
	return strconv.AppendFloat(dst, f, 'f', -1, 64)
}

// compactJSON returns the whitespace-free form of a valid JSON text,
// preserving member order and number literals.
func compactJSON(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// scanJSONString returns the length of the JSON string token starting at
// b[0] == '"', or -1.
func scanJSONString(b []byte) int {
	if len(b) == 0 || b[0] != '"' {
		return -1
	}
	for i := 1; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// canonicalJSONString reports whether tok is a JSON string token exactly as
// JSON.stringify would write its value.
func canonicalJSONString(tok []byte) bool {
	var s string
	if json.Unmarshal(tok, &s) != nil || !utf8.ValidString(s) {
		return false
	}
	return string(appendJSONString(nil, s)) == string(tok)
}
