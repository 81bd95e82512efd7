package ssp2

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

// frameCase is one example of a frame for checkFrame: a whole message
// (frames, in grammar order) and, for its frame at index at, the payload
// bytes on the wire and the §11.1 rendering, both spelled out.
type frameCase struct {
	name    string
	version uint16 // 0: WireV2
	frames  []Frame
	at      int
	payload []byte
	json    string
}

// checkFrame checks every path of the codec on each example of the frame
// registered as name: the encoders write the payload, the decoders give the
// frame back, RenderJSON writes the rendering and ParseJSON reads it back
// to the same bytes.
func checkFrame(t *testing.T, name string, cases ...frameCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := c.frames[c.at]
			spec := frameSpecs[f.FrameType()]
			if spec == nil || spec.name != name {
				t.Fatalf("type 0x%02x is not registered as %s", uint8(f.FrameType()), name)
			}
			v := c.version
			if v == 0 {
				v = WireV2
			}
			m := &Message{WireVersion: v, Kind: spec.kind, Frames: c.frames}
			bin, err := Encode(m)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if got := framePayload(t, bin, c.at); !bytes.Equal(got, c.payload) {
				t.Fatalf("payload\n got %x\nwant %x", got, c.payload)
			}
			var buf bytes.Buffer
			enc := NewEncoder(&buf, v, spec.kind)
			for _, fr := range c.frames {
				if err := enc.WriteFrame(fr); err != nil {
					t.Fatalf("WriteFrame: %v", err)
				}
			}
			if err := enc.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if !bytes.Equal(buf.Bytes(), bin) {
				t.Fatal("the streaming Encoder writes other bytes than Encode")
			}

			back, err := Decode(bin)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(back.Frames[c.at], f) {
				t.Fatalf("Decode gives\n%#v\nwant\n%#v", back.Frames[c.at], f)
			}
			dec := NewDecoder(bytes.NewReader(bin), spec.kind, 0)
			for i := 0; ; i++ {
				fr, err := dec.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("Decoder.Next: %v", err)
				}
				if i == c.at && !reflect.DeepEqual(fr, f) {
					t.Fatalf("Decoder gives\n%#v\nwant\n%#v", fr, f)
				}
			}

			rendering, err := RenderJSON(m)
			if err != nil {
				t.Fatalf("RenderJSON: %v", err)
			}
			var top struct{ Frames []json.RawMessage }
			if err := json.Unmarshal(rendering, &top); err != nil {
				t.Fatal(err)
			}
			if got := string(top.Frames[c.at]); got != c.json {
				t.Fatalf("rendering\n got %s\nwant %s", got, c.json)
			}
			parsed, err := ParseJSON(rendering)
			if err != nil {
				t.Fatalf("ParseJSON: %v", err)
			}
			again, err := Encode(parsed)
			if err != nil {
				t.Fatalf("Encode(ParseJSON): %v", err)
			}
			if !bytes.Equal(again, bin) {
				t.Fatalf("Encode(ParseJSON(RenderJSON)) differs\n got %x\nwant %x", again, bin)
			}
		})
	}
}

// framePayload returns the payload of the i-th frame of an encoded message.
func framePayload(t *testing.T, bin []byte, i int) []byte {
	t.Helper()
	off := HeaderSize
	for ; i > 0; i-- {
		off += 5 + int(binary.LittleEndian.Uint32(bin[off+1:]))
	}
	n := int(binary.LittleEndian.Uint32(bin[off+1:]))
	return bin[off+5 : off+5+n]
}

// frameRefusal is a message that Encode and the Encoder refuse, with a
// part of the reason.
type frameRefusal struct {
	name    string
	version uint16 // 0: WireV2
	kind    MsgKind
	frames  []Frame
	want    string
}

func checkRefusals(t *testing.T, cases ...frameRefusal) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := c.version
			if v == 0 {
				v = WireV2
			}
			_, err := Encode(&Message{WireVersion: v, Kind: c.kind, Frames: c.frames})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Encode: %v, want an error with %q", err, c.want)
			}
			enc := NewEncoder(io.Discard, v, c.kind)
			for _, f := range c.frames {
				if err = enc.WriteFrame(f); err != nil {
					break
				}
			}
			if err == nil {
				err = enc.Close()
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Encoder: %v, want an error with %q", err, c.want)
			}
		})
	}
}

// Frames that examples put around the frame they show.
var (
	exReqHeader  = &ReqHeader{ClientID: "c", SchemaVersion: 1}
	exPull       = &PullHeader{Accept: AcceptInlineRows}
	exRespHeader = &RespHeader{LogEpoch: "e"}
	exSubStart   = &SubStart{ID: "s", Status: SubActive, EffectiveScopes: map[string][]string{}}
	exSubEnd     = &SubEnd{NextCursor: 1}
)

// TestFrameRegistry checks the registry as a whole: every spec complete and
// filed under its own type byte, one header frame per message kind, and the
// Go type each spec's parser builds answering to that type byte with the
// codec methods.
func TestFrameRegistry(t *testing.T) {
	n := 0
	headers := map[MsgKind]int{}
	for i, s := range frameSpecs {
		if s == nil {
			if i != 0 && IsRegistered(FrameType(i)) {
				t.Errorf("0x%02x: IsRegistered without a spec", i)
			}
			continue
		}
		n++
		if int(s.typ) != i {
			t.Errorf("spec %s filed under 0x%02x, its type is 0x%02x", s.name, i, uint8(s.typ))
		}
		if !IsRegistered(s.typ) || frameName(s.typ) != s.name || frameSpecByName[s.name] != s {
			t.Errorf("%s: lookups by type and by name disagree", s.name)
		}
		if s.header {
			headers[s.kind]++
		}
		f := s.parse(&fields{where: "test", m: map[string]json.RawMessage{}, used: map[string]bool{}})
		if _, ok := f.(frameCodec); !ok || f.FrameType() != s.typ {
			t.Errorf("%s: parse builds %T, not a frameCodec of type 0x%02x", s.name, f, uint8(s.typ))
		}
	}
	if n == 0 {
		t.Fatal("no frame registered")
	}
	if headers[KindRequest] != 1 || headers[KindResponse] != 1 {
		t.Errorf("header frames per kind: %v, want one each", headers)
	}
	if !IsRegistered(FrameEnd) || frameName(FrameEnd) != "END" {
		t.Error("END is not registered")
	}
}

func i32(v int32) []byte  { return appendI32(nil, v) }
func u16(v uint16) []byte { return appendU16(nil, v) }

// TestRegisterFrameRefusesClashes: a frame file that clashes with a
// registered frame, or registers an incomplete spec, stops the program at
// initialization. Every case is refused before the registry changes.
func TestRegisterFrameRefusesClashes(t *testing.T) {
	free := FrameType(0x7e)
	if frameSpecs[free] != nil {
		t.Fatal("test type byte is registered")
	}
	ok := func() *frameSpec {
		return &frameSpec{typ: free, name: "TEST_FRAME", kind: KindResponse, decode: decodeLease, parse: parseLease, order: orderLease}
	}
	cases := []struct {
		name string
		edit func(s *frameSpec)
		want string
	}{
		{"registered type byte", func(s *frameSpec) { s.typ = FrameCommit }, "type byte already registered"},
		{"END's type byte", func(s *frameSpec) { s.typ = FrameEnd }, "type byte already registered"},
		{"registered name", func(s *frameSpec) { s.name = "COMMIT" }, "name empty, reserved or already registered"},
		{"reserved name", func(s *frameSpec) { s.name = "UNKNOWN" }, "name empty, reserved or already registered"},
		{"no name", func(s *frameSpec) { s.name = "" }, "name empty, reserved or already registered"},
		{"no kind", func(s *frameSpec) { s.kind = 0 }, "unknown message kind"},
		{"no decoder", func(s *frameSpec) { s.decode = nil }, "decode, parse and order are required"},
		{"no parser", func(s *frameSpec) { s.parse = nil }, "decode, parse and order are required"},
		{"no order", func(s *frameSpec) { s.order = nil }, "decode, parse and order are required"},
		{"second header", func(s *frameSpec) { s.header = true }, "second header frame"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := ok()
			c.edit(s)
			var got any
			func() {
				defer func() { got = recover() }()
				registerFrame(s)
			}()
			if msg, _ := got.(string); !strings.Contains(msg, c.want) {
				t.Fatalf("registerFrame panicked with %v, want %q", got, c.want)
			}
			if frameSpecs[free] != nil || frameSpecByName["TEST_FRAME"] != nil {
				t.Fatal("a refused spec was registered")
			}
		})
	}
}
