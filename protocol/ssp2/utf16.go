package ssp2

import (
	"slices"
	"unicode/utf8"
)

// CompareUTF16 compares a and b by UTF-16 code units (JavaScript string
// order) without allocating. It returns -1, 0 or +1. It differs from byte
// order exactly when one string has a U+E000..U+FFFF character where the
// other has a supplementary-plane character. Invalid UTF-8 compares as
// U+FFFD.
func CompareUTF16(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		switch {
		case len(a) < len(b):
			return -1
		case len(a) > len(b):
			return 1
		}
		return 0
	}
	for i > 0 && !utf8.RuneStart(a[i]) {
		i--
	}
	ra, _ := utf8.DecodeRuneInString(a[i:])
	rb, _ := utf8.DecodeRuneInString(b[i:])
	ua, ub := firstUnit(ra), firstUnit(rb)
	if ua != ub {
		if ua < ub {
			return -1
		}
		return 1
	}
	// Same lead unit: both supplementary with the same high surrogate (or
	// equal BMP runes, impossible here since bytes differ); the low
	// surrogate order equals rune order.
	if ra < rb {
		return -1
	}
	if ra > rb {
		return 1
	}
	return 0
}

func firstUnit(r rune) rune {
	if r >= 0x10000 {
		return 0xD800 + ((r - 0x10000) >> 10)
	}
	return r
}

// sortKeysUTF16 sorts keys in place without allocating (insertion sort for
// the usual tiny maps, slices.SortFunc beyond that).
func sortKeysUTF16(keys []string) {
	if len(keys) > 16 {
		slices.SortFunc(keys, CompareUTF16)
		return
	}
	for i := 1; i < len(keys); i++ {
		k := keys[i]
		j := i - 1
		for j >= 0 && CompareUTF16(keys[j], k) > 0 {
			keys[j+1] = keys[j]
			j--
		}
		keys[j+1] = k
	}
}
