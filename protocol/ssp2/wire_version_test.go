package ssp2

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/syncerr"
)

// TestKnownWireVersions: the list and the predicate agree, and the list
// is exactly versions 1, 2 and 3 in order.
func TestKnownWireVersions(t *testing.T) {
	if !slices.Equal(KnownWireVersions, []uint16{WireV1, WireV2, WireV3}) {
		t.Fatalf("KnownWireVersions = %v", KnownWireVersions)
	}
	for v := range 1 << 16 {
		if got, want := IsKnownWireVersion(uint16(v)), slices.Contains(KnownWireVersions, uint16(v)); got != want {
			t.Fatalf("IsKnownWireVersion(%d) = %v, KnownWireVersions says %v", v, got, want)
		}
	}
}

// TestPeekWireVersion reads the version from the header alone: it needs
// the 8 header bytes and the magic, and nothing else (not a known
// version, kind or flags, not a single frame).
func TestPeekWireVersion(t *testing.T) {
	v3 := rawMsg(WireV3, KindRequest, frm(FrameReqHeader, cat(s("c"), i32(1), []byte{0})), pullHdr3)
	for _, c := range []struct {
		name   string
		in     []byte
		want   uint16
		reason string // "" when it must succeed
	}{
		{"v1 request", rawMsg(WireV1, KindRequest, reqHdrV1, pullHdr3), WireV1, ""},
		{"v2 response", rawMsg(WireV2, KindResponse, frm(FrameRespHeader, cat([]byte{0, 0}, s("e"), []byte{0}))), WireV2, ""},
		{"v3 request", v3, WireV3, ""},
		{"header only", v3[:HeaderSize], WireV3, ""},
		{"unknown version 999", appendHeader(nil, 999, KindRequest), 999, ""},
		{"version 0", appendHeader(nil, 0, KindRequest), 0, ""},
		{"unknown kind and flags are not its business", []byte("SSP2\x03\x00\x07\x09"), WireV3, ""},
		{"empty", nil, 0, "truncated envelope header (0 bytes)"},
		{"seven bytes", v3[:HeaderSize-1], 0, "truncated envelope header (7 bytes)"},
		{"bad magic", append([]byte("SSP1"), v3[4:]...), 0, `bad magic "SSP1"`},
		{"a JSON error body", []byte(`{"code":"sync.invalid_request"}`), 0, "bad magic"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, err := PeekWireVersion(c.in)
			if c.reason == "" {
				if err != nil || v != c.want {
					t.Fatalf("PeekWireVersion = %d, %v; want %d", v, err, c.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("PeekWireVersion = %d, want an error", v)
			}
			var de *DecodeError
			if syncerr.CodeOf(err) != syncerr.InvalidRequest || !errors.As(err, &de) || de.Offset != 0 || !strings.Contains(de.Reason, c.reason) {
				t.Fatalf("error %v (code %s), want sync.invalid_request wrapping a *DecodeError at 0 with %q", err, syncerr.CodeOf(err), c.reason)
			}
		})
	}
}

// TestWireVersionEnvelope: every known version decodes and encodes (the
// minimal request and response of each), and any other version is a
// decode error at offset 4, before any frame, and refused by every
// encoder and by the rendering.
func TestWireVersionEnvelope(t *testing.T) {
	for _, v := range KnownWireVersions {
		req := rawMsg(v, KindRequest, reqHdrV1, pullHdr3)
		resp := rawMsg(v, KindResponse, respHdrV1)
		if v >= WireV2 {
			req = rawMsg(v, KindRequest, frm(FrameReqHeader, cat(s("client-a"), i32(1), []byte{1}, s("e"))), pullHdr3)
			resp = rawMsg(v, KindResponse, frm(FrameRespHeader, cat([]byte{0, 0}, s("e"), []byte{0})))
		}
		for _, in := range [][]byte{req, resp} {
			m := mustDecodeOK(t, in)
			if m.WireVersion != v {
				t.Fatalf("v%d: decoded WireVersion %d", v, m.WireVersion)
			}
			dec := NewDecoder(bytes.NewReader(in), 0, 0)
			if _, err := dec.Next(); err != nil || dec.WireVersion() != v {
				t.Fatalf("v%d: streaming decoder: %v, version %d", v, err, dec.WireVersion())
			}
			r, err := RenderJSON(m)
			if err != nil || !bytes.Contains(r, []byte(fmt.Sprintf(`"wireVersion":%d,`, v))) {
				t.Fatalf("v%d: rendering %s (%v)", v, r, err)
			}
			pm, err := ParseJSON(r)
			if err != nil {
				t.Fatalf("v%d: ParseJSON: %v", v, err)
			}
			if again, err := Encode(pm); err != nil || !bytes.Equal(again, in) {
				t.Fatalf("v%d: Encode(ParseJSON(RenderJSON)) = %x, %v", v, again, err)
			}
		}
	}
	for _, v := range []uint16{0, 4, 999, 0xFFFF} {
		// A request whose frames would be valid at v2: the version alone
		// refuses it, before any frame is read.
		in := rawMsg(v, KindRequest, frm(FrameReqHeader, cat(s("client-a"), i32(1), []byte{0})), pullHdr3)
		for name, decode := range map[string]func([]byte) (*Message, error){"Decode": Decode, "DecodeRequest": DecodeRequest} {
			_, err := decode(in)
			var de *DecodeError
			if syncerr.CodeOf(err) != syncerr.InvalidRequest || !errors.As(err, &de) || de.Offset != 4 || !strings.Contains(de.Reason, "unsupported wireVersion") {
				t.Fatalf("v%d %s: %v, want an unsupported wireVersion decode error at offset 4", v, name, err)
			}
		}
		if _, err := NewDecoder(bytes.NewReader(in), KindRequest, 0).Next(); syncerr.CodeOf(err) != syncerr.InvalidRequest {
			t.Fatalf("v%d: streaming decoder: %v", v, err)
		}
		m := &Message{WireVersion: v, Kind: KindRequest, Frames: []Frame{exReqHeader, exPull}}
		if _, err := Encode(m); err == nil || !strings.Contains(err.Error(), "unsupported wire version") {
			t.Fatalf("v%d: Encode: %v", v, err)
		}
		if _, err := RenderJSON(m); err == nil {
			t.Fatalf("v%d: RenderJSON accepted the version", v)
		}
		enc := NewEncoder(&bytes.Buffer{}, v, KindRequest)
		err := enc.WriteFrame(exReqHeader)
		if err == nil {
			err = enc.Close()
		}
		if err == nil {
			t.Fatalf("v%d: Encoder accepted the version", v)
		}
	}
}
