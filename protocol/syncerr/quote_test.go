package syncerr

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestQuoteAndTrimMessageBound(t *testing.T) {
	for _, c := range []struct {
		in, want string
	}{
		{"", `""`},
		{"seg-1", `"seg-1"`},
		{strings.Repeat("a", MaxQuoteBytes), `"` + strings.Repeat("a", MaxQuoteBytes) + `"`},
		{strings.Repeat("a", 900<<10), `"` + strings.Repeat("a", MaxQuoteBytes) + `"… (921600 bytes)`},
		// A cut never splits a character: 127 ASCII bytes, then "é" (2 bytes).
		{strings.Repeat("a", MaxQuoteBytes-1) + "éé", `"` + strings.Repeat("a", MaxQuoteBytes-1) + `"… (131 bytes)`},
	} {
		if got := Quote(c.in); got != c.want {
			t.Errorf("Quote(%d bytes) = %.200q, want %.200q", len(c.in), got, c.want)
		}
	}
	if got := Quote(strings.Repeat("\x00", 1<<20)); len(got) > 4*MaxQuoteBytes+32 {
		t.Errorf("Quote of escaped bytes: %d bytes", len(got))
	}
	for _, n := range []int{0, MaxMessageBytes, MaxMessageBytes + 1, 900 << 10} {
		msg := strings.Repeat("ü", n/2) + strings.Repeat("x", n%2)
		got := TrimMessage(msg)
		switch {
		case len(msg) <= MaxMessageBytes && got != msg:
			t.Errorf("TrimMessage changed a %d-byte message", len(msg))
		case len(got) > MaxMessageBytes || !utf8.ValidString(got):
			t.Errorf("TrimMessage(%d bytes) = %d bytes, valid UTF-8 %v", len(msg), len(got), utf8.ValidString(got))
		case len(msg) > MaxMessageBytes && !strings.HasSuffix(got, " bytes)"):
			t.Errorf("TrimMessage(%d bytes) does not say it cut: %.80q", len(msg), got[len(got)-60:])
		}
	}
}
