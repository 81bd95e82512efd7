package yjs

import (
	"bytes"
	"testing"
)

// FuzzMerge feeds hostile bytes to the decoder and the merge: nothing may
// panic, and whenever both inputs are accepted the merge must be
// commutative and idempotent byte for byte. The seeds are the vector
// updates (split at the first byte's position) and a few hand-made ones.
func FuzzMerge(f *testing.F) {
	for _, v := range loadVectors(f)[:8] {
		us := v.updates(f)
		for i := range us {
			f.Add(append([]byte{byte(len(us[i]))}, append(us[i], us[(i+1)%len(us)]...)...))
		}
	}
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{2, 1, 1, 0, 4, 1, 1, 't', 2, 'h', 'i', 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		cut := min(int(data[0]), len(data)-1)
		a, b := data[1:1+cut], data[1+cut:]
		ab, errAB := Merger{}.Merge(a, b)
		ba, errBA := Merger{}.Merge(b, a)
		if (errAB == nil) != (errBA == nil) {
			t.Fatalf("Merge(a, b) error %v but Merge(b, a) error %v", errAB, errBA)
		}
		if errAB != nil {
			return
		}
		if !bytes.Equal(ab, ba) {
			t.Fatalf("not commutative:\n%x\n%x", ab, ba)
		}
		again, err := Merger{}.Merge(ab, a)
		if err != nil {
			t.Fatalf("re-merging an accepted input failed: %v", err)
		}
		if !bytes.Equal(again, ab) {
			t.Fatalf("not idempotent:\n%x\n%x", ab, again)
		}
		if _, err := decode(ab); err != nil {
			t.Fatalf("the merge does not decode: %v", err)
		}
	})
}
