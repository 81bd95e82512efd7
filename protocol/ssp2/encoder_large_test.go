package ssp2

import (
	"bytes"
	"fmt"
	"testing"
)

// segmentOf builds an SSG2 segment of n todo rows.
func segmentOf(t *testing.T, n int) []byte {
	t.Helper()
	sb := NewSegmentBuilder("todos", 3, todoCols)
	sb.Grow(n * 64)
	for i := range n {
		row := Row{fmt.Sprintf("todo-%06d", i), fmt.Sprintf("title %d", i), i%2 == 0, "p1", int64(i), nil}
		if err := sb.AddRow(int64(i+1), row); err != nil {
			t.Fatal(err)
		}
	}
	return sb.Finish()
}

// TestEncoderLargeInlineSegment: a SEGMENT_INLINE over the flush threshold
// is written header then payload, byte-identical to Encode, the encoder's
// buffer stays about the threshold, and a bad payload or grammar step
// writes nothing of the frame.
func TestEncoderLargeInlineSegment(t *testing.T) {
	latest := int32(3)
	small, large := segmentOf(t, 10), segmentOf(t, 5000)
	if len(large) <= flushThreshold || len(small) >= flushThreshold {
		t.Fatalf("fixture sizes %d and %d do not straddle %d", len(small), len(large), flushThreshold)
	}
	head := []Frame{&RespHeader{LatestSchemaVersion: &latest, LogEpoch: "e"}, &SubStart{ID: "s", Status: SubActive, Bootstrap: true}}
	cases := []struct {
		name    string
		frames  []Frame
		wantErr bool
	}{
		{"small", append(append([]Frame{}, head...), &SegmentInline{Payload: small}, &SubEnd{NextCursor: 1}), false},
		{"large", append(append([]Frame{}, head...), &SegmentInline{Payload: large}, &SubEnd{NextCursor: 1}), false},
		{"large twice", append(append([]Frame{}, head...), &SegmentInline{Payload: large}, &SegmentInline{Payload: small}, &SegmentInline{Payload: large}, &SubEnd{NextCursor: 1}), false},
		{"large, invalid", append(append([]Frame{}, head...), &SegmentInline{Payload: append(bytes.Clone(large[:len(large)-4]), 1, 0, 0, 0)}), true},
		{"large outside a section", []Frame{head[0], &SegmentInline{Payload: large}}, true},
		// Verified payloads are not decoded again, but still need an SSG2 header.
		{"large, verified", append(append([]Frame{}, head...), &SegmentInline{Payload: large, Verified: true}, &SegmentInline{Payload: small, Verified: true}, &SubEnd{NextCursor: 1}), false},
		{"verified without a header", append(append([]Frame{}, head...), &SegmentInline{Payload: []byte("SSG"), Verified: true}), true},
		{"verified, bad magic", append(append([]Frame{}, head...), &SegmentInline{Payload: append([]byte("XXXX"), large[4:]...), Verified: true}), true},
	}
	for _, c := range cases {
		var buf bytes.Buffer
		enc := NewEncoder(&buf, WireV2, KindResponse)
		var err error
		wrote := 0
		for _, f := range c.frames {
			before := buf.Len() + len(enc.buf)
			if err = enc.WriteFrame(f); err != nil {
				if buf.Len()+len(enc.buf) != before {
					t.Fatalf("%s: the refused frame wrote %d bytes", c.name, buf.Len()+len(enc.buf)-before)
				}
				break
			}
			wrote++
		}
		if c.wantErr {
			if err == nil {
				t.Fatalf("%s: no error", c.name)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := enc.Close(); err != nil {
			t.Fatal(err)
		}
		if cap(enc.buf) > 2*flushThreshold {
			t.Fatalf("%s: encoder buffer grew to %d bytes", c.name, cap(enc.buf))
		}
		whole, err := Encode(&Message{WireVersion: WireV2, Kind: KindResponse, Frames: c.frames})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), whole) {
			t.Fatalf("%s: streaming output (%d bytes) differs from Encode (%d bytes)", c.name, buf.Len(), len(whole))
		}
		m, err := DecodeResponse(buf.Bytes())
		if err != nil || len(m.Frames) != wrote {
			t.Fatalf("%s: decode: %v, %d frames, want %d", c.name, err, len(m.Frames), wrote)
		}
	}
}
