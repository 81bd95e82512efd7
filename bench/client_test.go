package main

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
)

// TestStripInlineStream: reading a response while dropping its inline
// pages gives the same rest, page count and byte count as stripping the
// whole message, and a truncated body is an error.
func TestStripInlineStream(t *testing.T) {
	cols := []ssp2.Column{{Name: "id", Type: ssp2.TypeString}}
	page := func(n int) []byte {
		sb := ssp2.NewSegmentBuilder("t", 1, cols)
		for i := range n {
			if err := sb.AddRow(int64(i+1), ssp2.Row{fmt.Sprintf("r%06d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		return sb.Finish()
	}
	latest := int32(1)
	msg := &ssp2.Message{WireVersion: ssp2.WireV2, Kind: ssp2.KindResponse, Frames: []ssp2.Frame{
		&ssp2.RespHeader{LatestSchemaVersion: &latest, LogEpoch: "e"},
		&ssp2.SubStart{ID: "s", Status: ssp2.SubActive, Bootstrap: true},
		&ssp2.SegmentInline{Payload: page(10)}, &ssp2.SegmentInline{Payload: page(20000)},
		&ssp2.SubEnd{NextCursor: 7},
	}}
	data, err := ssp2.Encode(msg)
	if err != nil {
		t.Fatal(err)
	}
	wantRest, wantPages := stripInlineFrames(data)
	rest, pages, n, err := stripInlineStream(bytes.NewReader(data))
	if err != nil || !bytes.Equal(rest, wantRest) || pages != wantPages || pages != 2 || n != int64(len(data)) {
		t.Fatalf("stream strip: err %v, %d pages (want %d), %d bytes of %d, rest equal %v", err, pages, wantPages, n, len(data), bytes.Equal(rest, wantRest))
	}
	if m, err := ssp2.DecodeResponse(rest); err != nil || len(m.Frames) != 3 {
		t.Fatalf("the rest does not decode to the three other frames: %v", err)
	}
	if _, _, _, err := stripInlineStream(bytes.NewReader(data[:len(data)-100_000])); err == nil {
		t.Fatal("a truncated body was read without error")
	}
}
