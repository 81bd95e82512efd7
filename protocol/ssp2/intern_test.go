package ssp2

import (
	"strconv"
	"testing"
	"unsafe"
)

// intern returns one string per distinct value of a message, whether it
// sits in the first few (the array) or the later ones (the map), and
// copies the bytes (the input may be reused).
func TestInternOneStringPerValue(t *testing.T) {
	var d dec
	first := map[string]string{}
	for round := range 2 {
		for i := range 20 {
			b := []byte("name-" + strconv.Itoa(i))
			s := d.intern(b)
			b[0] = 'X'
			if s != "name-"+strconv.Itoa(i) {
				t.Fatalf("intern returned %q, aliasing its input", s)
			}
			if round == 0 {
				first[s] = s
			} else if p := first[s]; unsafe.StringData(p) != unsafe.StringData(s) {
				t.Fatalf("value %d: a second string for %q", i, s)
			}
		}
	}
	if d.nsmall != len(d.small) || len(d.in) != 20-len(d.small) {
		t.Fatalf("%d in the array, %d in the map; want %d and %d", d.nsmall, len(d.in), len(d.small), 20-len(d.small))
	}
}
