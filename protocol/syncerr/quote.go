package syncerr

import (
	"strconv"
	"unicode/utf8"
)

// Bounds of what an error sent to a client may carry: an error names what
// was wrong, it never needs to echo a client's input whole (a 900 KB
// segment id made a 900 KB 404).
const (
	// MaxQuoteBytes is how much of a client's input Quote keeps.
	MaxQuoteBytes = 128
	// MaxMessageBytes bounds the message of an error body or ERROR frame
	// (TrimMessage).
	MaxMessageBytes = 1 << 10
)

// Quote returns s quoted (strconv.Quote) for an error message: at most its
// first MaxQuoteBytes bytes, cut at a character boundary; a longer s is
// followed by "… (N bytes)", its whole length. The result is at most
// 4 × MaxQuoteBytes + 32 bytes (strconv.Quote escapes a byte in at most
// four).
func Quote(s string) string {
	if len(s) <= MaxQuoteBytes {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:cutAt(s, MaxQuoteBytes)]) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// TrimMessage returns msg when it is at most MaxMessageBytes, else its
// first bytes, cut at a character boundary, and "… (message cut: N bytes)"
// within MaxMessageBytes. httperr and the socket rounds' ERROR frames pass
// every message through it, so no error answer echoes unbounded input even
// where a message quotes it without Quote.
func TrimMessage(msg string) string {
	if len(msg) <= MaxMessageBytes {
		return msg
	}
	tail := "… (message cut: " + strconv.Itoa(len(msg)) + " bytes)"
	return msg[:cutAt(msg, MaxMessageBytes-len(tail))] + tail
}

// cutAt is the largest n <= limit at which s can be cut without splitting
// a UTF-8 sequence.
func cutAt(s string, limit int) int {
	n := limit
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}
