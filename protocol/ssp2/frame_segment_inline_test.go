package ssp2

import (
	"encoding/base64"
	"testing"
)

func TestFrameSegmentInline(t *testing.T) {
	small := NewSegmentBuilder("t", 1, []Column{{Name: "a", Type: TypeString, Nullable: true}}).Finish()
	large := segmentOf(t, 2000) // beyond the Encoder's flush threshold: written past its buffer
	if len(large) <= flushThreshold {
		t.Fatalf("large segment of %d bytes is not beyond the flush threshold", len(large))
	}
	checkFrame(t, "SEGMENT_INLINE",
		frameCase{name: "small", at: 2, frames: []Frame{exRespHeader, exSubStart, &SegmentInline{Payload: small}, exSubEnd},
			payload: small,
			json:    `{"type":"SEGMENT_INLINE","payload":"` + base64.StdEncoding.EncodeToString(small) + `"}`},
		frameCase{name: "large", at: 2, frames: []Frame{exRespHeader, exSubStart, &SegmentInline{Payload: large}, exSubEnd},
			payload: large,
			json:    `{"type":"SEGMENT_INLINE","payload":"` + base64.StdEncoding.EncodeToString(large) + `"}`},
	)
	checkRefusals(t,
		frameRefusal{name: "not a segment", kind: KindResponse, frames: []Frame{exRespHeader, exSubStart, &SegmentInline{Payload: []byte("nope")}, exSubEnd},
			want: "SEGMENT_INLINE payload is not a valid SSG2 segment"},
		frameRefusal{name: "large, outside a section", kind: KindResponse, frames: []Frame{exRespHeader, &SegmentInline{Payload: large}}, want: "SEGMENT_INLINE outside a subscription section"},
		frameRefusal{name: "after a commit", kind: KindResponse, frames: []Frame{exRespHeader, exSubStart, &Commit{}, &SegmentInline{Payload: small}, exSubEnd},
			want: "COMMIT and segment frames mixed in one section"},
	)
}
