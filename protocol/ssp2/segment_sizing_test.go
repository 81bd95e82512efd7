package ssp2

import (
	"bytes"
	"fmt"
	"testing"
)

// TestExpectRowsSizesTheBufferOnce: with ExpectRows, the buffer is grown
// once when the first block closes and never moves again for the rows
// announced; the bytes are those of a builder without the hint.
func TestExpectRowsSizesTheBufferOnce(t *testing.T) {
	cols := []Column{{Name: "id", Type: TypeString}, {Name: "n", Type: TypeInteger}}
	for _, n := range []int{SegmentBlockRows - 1, SegmentBlockRows, 5*SegmentBlockRows + 7} {
		plain := NewSegmentBuilder("t", 1, cols)
		hinted := NewSegmentBuilder("t", 1, cols)
		hinted.ExpectRows(n)
		var base *byte
		for i := range n {
			row := Row{fmt.Sprintf("row-%06d", i), int64(i)}
			if err := plain.AddRow(int64(i+1), row); err != nil {
				t.Fatal(err)
			}
			if err := hinted.AddRow(int64(i+1), row); err != nil {
				t.Fatal(err)
			}
			if i+1 == SegmentBlockRows {
				base = &hinted.buf[0]
			}
		}
		if base != nil && &hinted.buf[0] != base {
			t.Fatalf("%d rows: the buffer moved after the first block", n)
		}
		if a, b := plain.Finish(), hinted.Finish(); !bytes.Equal(a, b) {
			t.Fatalf("%d rows: ExpectRows changed the bytes", n)
		}
	}
}

// TestBuilderBufferReusesStorage: NewSegmentBuilderBuffer writes into the
// given buffer's storage (whatever it held) and builds the same bytes.
func TestBuilderBufferReusesStorage(t *testing.T) {
	cols := []Column{{Name: "id", Type: TypeString}}
	spare := bytes.Repeat([]byte{0xEE}, 64<<10)
	a := NewSegmentBuilder("t", 1, cols)
	b := NewSegmentBuilderBuffer(spare[:7], "t", 1, cols)
	for i := range 100 {
		if err := a.AddRow(1, Row{fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		if err := b.AddRow(1, Row{fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	sa, sb := a.Finish(), b.Finish()
	if !bytes.Equal(sa, sb) {
		t.Fatal("a builder on a spare buffer built other bytes")
	}
	if &sb[0] != &spare[0] {
		t.Fatal("the spare buffer's storage was not used")
	}
	if small := NewSegmentBuilderBuffer(make([]byte, 3), "t", 1, cols); small.Err() != nil || cap(small.buf) < 4096 {
		t.Fatal("a tiny spare buffer was not replaced")
	}
}
