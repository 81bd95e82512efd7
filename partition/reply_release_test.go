package partition

import (
	"bytes"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
)

// TestWriteToReleasesInlinePages: once written, a reply's inline segments
// are dropped from Frames (the response holds one page at a time), and the
// bytes written still carry them.
func TestWriteToReleasesInlinePages(t *testing.T) {
	cols := []ssp2.Column{{Name: "id", Type: ssp2.TypeString}}
	seg := func(n int) []byte {
		sb := ssp2.NewSegmentBuilder("t", 1, cols)
		for i := range n {
			if err := sb.AddRow(int64(i+1), ssp2.Row{string(rune('a' + i%26))}); err != nil {
				t.Fatal(err)
			}
		}
		return sb.Finish()
	}
	latest := int32(1)
	cases := []struct {
		name  string
		pages []int // rows per inline page
	}{
		{"one small page", []int{3}},
		{"pages over the encoder threshold", []int{20000, 20000}},
	}
	for _, c := range cases {
		rep := &Reply{WireVersion: ssp2.WireV2, Frames: []ssp2.Frame{&ssp2.RespHeader{LatestSchemaVersion: &latest, LogEpoch: "e"},
			&ssp2.SubStart{ID: "s", Status: ssp2.SubActive, Bootstrap: true}}}
		for _, n := range c.pages {
			rep.Frames = append(rep.Frames, &ssp2.SegmentInline{Payload: seg(n)})
		}
		rep.Frames = append(rep.Frames, &ssp2.SubEnd{NextCursor: 1})
		var buf bytes.Buffer
		if _, err := rep.WriteTo(&buf); err != nil {
			t.Fatalf("%s: WriteTo: %v", c.name, err)
		}
		for i, f := range rep.Frames {
			if _, ok := f.(*ssp2.SegmentInline); ok {
				t.Fatalf("%s: frame %d still holds its page after WriteTo", c.name, i)
			}
		}
		m, err := ssp2.DecodeResponse(buf.Bytes())
		if err != nil {
			t.Fatalf("%s: decode: %v", c.name, err)
		}
		pages := 0
		for _, f := range m.Frames {
			if si, ok := f.(*ssp2.SegmentInline); ok {
				s, err := ssp2.DecodeSegment(si.Payload)
				if err != nil {
					t.Fatal(err)
				}
				rows := 0
				for _, b := range s.Blocks {
					rows += len(b)
				}
				if rows != c.pages[pages] {
					t.Fatalf("%s: page %d has %d rows, want %d", c.name, pages, rows, c.pages[pages])
				}
				pages++
			}
		}
		if pages != len(c.pages) {
			t.Fatalf("%s: %d pages written, want %d", c.name, pages, len(c.pages))
		}
	}
}
