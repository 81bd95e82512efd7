package httpsync

import "testing"

// FuzzParseRange: whatever the Range header, a selected range lies within
// the blob and is non-empty, and an unsatisfiable answer is never a range.
func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"bytes=0-0", "bytes=2-5", "bytes=-4", "bytes=10-", "bytes=0-1,5-6", "bytes=9-3", "bytes=-0", "items=1-2", "bytes=99999999999999999999-"} {
		f.Add(s, int64(100))
	}
	f.Fuzz(func(t *testing.T, h string, size int64) {
		if size < 0 {
			size = -size
		}
		if size < 0 {
			return
		}
		off, n, ok, satisfiable := parseRange(h, size)
		if ok && (!satisfiable || off < 0 || n <= 0 || off+n > size) {
			t.Fatalf("parseRange(%q, %d) = %d, %d, %v, %v", h, size, off, n, ok, satisfiable)
		}
	})
}
