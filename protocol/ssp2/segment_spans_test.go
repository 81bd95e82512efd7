package ssp2

import (
	"bytes"
	"fmt"
	"testing"
)

// TestSegmentRowSpansRebuildTheSegment: the spans of a segment, added back
// with AddEncodedRow, give the same bytes, across block boundaries and with
// NULLs; each span carries its row's key and version. Damaged segments are
// decode errors.
func TestSegmentRowSpansRebuildTheSegment(t *testing.T) {
	cols := []Column{{Name: "id", Type: TypeString}, {Name: "n", Type: TypeInteger, Nullable: true}, {Name: "b", Type: TypeBytes, Nullable: true}}
	for _, rows := range []int{0, 1, SegmentBlockRows, SegmentBlockRows + 3} {
		t.Run(fmt.Sprint(rows), func(t *testing.T) {
			sb := NewSegmentBuilder("t", 3, cols)
			for i := range rows {
				var n, b any
				if i%3 != 0 {
					n, b = int64(i), []byte{byte(i)}
				}
				if err := sb.AddRow(int64(i+1), Row{fmt.Sprintf("r%05d", i), n, b}); err != nil {
					t.Fatal(err)
				}
			}
			seg := sb.Finish()
			spans, err := SegmentRowSpans(seg, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(spans) != rows {
				t.Fatalf("%d spans, want %d", len(spans), rows)
			}
			again := NewSegmentBuilder("t", 3, cols)
			for i, s := range spans {
				if s.Key != fmt.Sprintf("r%05d", i) || s.ServerVersion != int64(i+1) {
					t.Fatalf("span %d: key %v version %d", i, s.Key, s.ServerVersion)
				}
				again.AddEncodedRow(s.ServerVersion, s.Row)
			}
			if !bytes.Equal(again.Finish(), seg) {
				t.Fatal("rebuilt segment differs")
			}
			for _, bad := range [][]byte{seg[:len(seg)-1], append(bytes.Clone(seg), 0), append([]byte("SSG3"), seg[4:]...)} {
				if _, err := SegmentRowSpans(bad, 0); err == nil {
					t.Fatal("a damaged segment decoded")
				}
			}
			if _, err := SegmentRowSpans(seg, 3); err == nil {
				t.Fatal("a key column outside the columns was accepted")
			}
		})
	}
}
