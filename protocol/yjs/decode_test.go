package yjs

import (
	"bytes"
	"strings"
	"testing"
)

// hi is an update inserting "hi" into root text "t" as client 1.
var hi = []byte{1, 1, 1, 0, 4, 1, 1, 't', 2, 'h', 'i', 0}

// TestDecodeRefuses: bytes Yjs would not apply, or past the limits, are
// refused with an error (the merger's answer is then
// sync.crdt_merge_failed), never a panic or a large allocation.
func TestDecodeRefuses(t *testing.T) {
	deepAny := append([]byte{1, 1, 1, 0, 8, 1, 1, 'm', 1}, bytes.Repeat([]byte{117, 1}, maxAnyDepth+1)...)
	deepAny = append(deepAny, 126, 0)
	cases := []struct {
		name   string
		update []byte
		want   string
	}{
		{"empty", []byte{}, "end of update"},
		{"truncated", hi[:len(hi)-2], "end of update"},
		{"trailing bytes", append(append([]byte{}, hi...), 0), "after the delete set"},
		{"varint past 2^53", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, "2^53"},
		{"struct count past the bytes", []byte{1, 0xff, 0xff, 0x03, 1, 0}, "structs exceed"},
		{"delete ranges past the bytes", []byte{0, 1, 1, 0xff, 0xff, 0x03}, "delete ranges exceed"},
		{"oversized", make([]byte, MaxUpdateBytes+1), "exceeds"},
		{"unknown content ref", []byte{1, 1, 1, 0, 11, 1, 1, 't', 0}, "unknown content ref"},
		{"unknown type ref", []byte{1, 1, 1, 0, 7, 1, 1, 't', 9, 0}, "unknown type ref"},
		{"invalid UTF-8", []byte{1, 1, 1, 0, 4, 1, 1, 't', 1, 0xff, 0}, "UTF-8"},
		{"invalid JSON", []byte{1, 1, 1, 0, 2, 1, 1, 't', 1, 2, '{', 'x', 0}, "not JSON"},
		{"zero-length GC", []byte{1, 1, 1, 0, 0, 0, 0}, "struct length 0"},
		{"empty string item", []byte{1, 1, 1, 0, 4, 1, 1, 't', 0, 0}, "item length 0"},
		{"bad parent info", []byte{1, 1, 1, 0, 4, 2, 0}, "parent info"},
		{"any nested too deep", deepAny, "nested deeper"},
		{"unknown any tag", []byte{1, 1, 1, 0, 8, 1, 1, 'm', 1, 100, 0}, "unknown any tag"},
		{"clock past 2^53", []byte{1, 1, 1, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 5, 0}, "struct length"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := decode(c.update)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("decode = %v, want an error containing %q", err, c.want)
			}
			if _, err := (Merger{}).Merge(hi, c.update); len(c.update) > 0 && err == nil {
				t.Fatal("Merge accepted it")
			}
		})
	}
}

// TestDecodeRoundTrip: a valid update normalizes to itself.
func TestDecodeRoundTrip(t *testing.T) {
	got, err := MergeUpdates(hi)
	if err != nil || !bytes.Equal(got, hi) {
		t.Fatalf("MergeUpdates(hi) = %x, %v", got, err)
	}
}
