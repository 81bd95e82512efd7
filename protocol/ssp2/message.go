package ssp2

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/synclane/synclane/protocol/syncerr"
)

// HeaderSize is the size of the SSP2 envelope header.
const HeaderSize = 8

// dec holds per-message decode state: the wire version and a string
// interner for the highly repetitive names (tables, scope keys and values).
type dec struct {
	version uint16
	// small holds the first interned strings (nsmall of them): a request
	// names a handful, so most never need the map.
	small  [8]string
	nsmall int
	in     map[string]string
	// buildSegments makes SEGMENT_INLINE frames carry their decoded
	// Segment (Decoder.DecodeSegments).
	buildSegments bool
	// r reads the payload of the frame being decoded.
	r rd
}

func (d *dec) intern(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > 64 {
		return string(b)
	}
	for _, s := range d.small[:d.nsmall] {
		if s == string(b) {
			return s
		}
	}
	if d.nsmall < len(d.small) {
		s := string(b)
		d.small[d.nsmall] = s
		d.nsmall++
		return s
	}
	if s, ok := d.in[string(b)]; ok {
		return s
	}
	if d.in == nil {
		d.in = make(map[string]string, 16)
	} else if len(d.in) >= 4096 {
		return string(b)
	}
	s := string(b)
	d.in[s] = s
	return s
}

// DecodeRequest decodes a whole SSP2 request message. Byte-slice fields of
// the result (payloads, raw JSON) alias b. Errors are *syncerr.Error values
// (sync.invalid_request, or sync.empty_commit for a zero-op commit) wrapping
// a *DecodeError; it never panics.
func DecodeRequest(b []byte) (*Message, error) { return decodeMessage(b, KindRequest) }

// DecodeResponse decodes a whole SSP2 response message, with the same
// guarantees as DecodeRequest.
func DecodeResponse(b []byte) (*Message, error) { return decodeMessage(b, KindResponse) }

// Decode decodes a request or response, taking the kind from the envelope
// header, with the same guarantees as DecodeRequest.
func Decode(b []byte) (*Message, error) { return decodeMessage(b, 0) }

// ReadRequest reads at most maxBytes from r and decodes them as a request.
// A longer body fails with sync.invalid_request wrapping ErrTooLarge
// (errors.Is(err, ErrTooLarge)); read failures are sync.invalid_request too.
func ReadRequest(r io.Reader, maxBytes int64) (*Message, error) {
	if maxBytes < 0 {
		maxBytes = 0
	}
	b, err := io.ReadAll(io.LimitReader(r, maxBytes+1))
	if err != nil {
		return nil, syncerr.Wrap(syncerr.InvalidRequest, err, "reading request body")
	}
	if int64(len(b)) > maxBytes {
		return nil, syncerr.Wrap(syncerr.InvalidRequest, ErrTooLarge, "request body exceeds the %d byte limit", maxBytes)
	}
	return DecodeRequest(b)
}

// PeekWireVersion reads the wire version from the envelope header of b
// without reading any frame, so that a server can hold a request against
// its version window first (SPEC §1.2, §9). It checks only the header's
// length and magic: the version returned may be one this codec does not
// know (see IsKnownWireVersion), and the message kind, flags and frames
// are left to DecodeRequest. An error is sync.invalid_request wrapping a
// *DecodeError, as every decode error of this package.
func PeekWireVersion(b []byte) (uint16, error) {
	if len(b) < HeaderSize {
		return 0, decodeFail(0, fmt.Sprintf("truncated envelope header (%d bytes)", len(b)))
	}
	if string(b[:4]) != Magic {
		return 0, decodeFail(0, fmt.Sprintf("bad magic %q", b[:4]))
	}
	return binary.LittleEndian.Uint16(b[4:]), nil
}

// decodeHeader validates the 8-byte envelope header.
func decodeHeader(b []byte, want MsgKind) (uint16, MsgKind, error) {
	v, err := PeekWireVersion(b)
	if err != nil {
		return 0, 0, err
	}
	if !IsKnownWireVersion(v) {
		return 0, 0, decodeFail(4, fmt.Sprintf("unsupported wireVersion %d", v))
	}
	k := MsgKind(b[6])
	if k != KindRequest && k != KindResponse {
		return 0, 0, decodeFail(6, fmt.Sprintf("unknown msgKind 0x%02x", b[6]))
	}
	if want != 0 && k != want {
		return 0, 0, decodeFail(6, fmt.Sprintf("expected a %s, got a %s", kindName(want), kindName(k)))
	}
	if b[7] != 0 {
		return 0, 0, decodeFail(7, fmt.Sprintf("flags byte 0x%02x must be 0", b[7]))
	}
	return v, k, nil
}

func decodeMessage(b []byte, want MsgKind) (*Message, error) {
	version, kind, err := decodeHeader(b, want)
	if err != nil {
		return nil, err
	}
	// Pre-count frames so the frame slice is allocated once.
	nframes := 0
	for off := HeaderSize; len(b)-off >= 5; {
		n := uint64(binary.LittleEndian.Uint32(b[off+1:]))
		if b[off] == 0 || n > uint64(len(b)-off-5) {
			break
		}
		nframes++
		off += 5 + int(n)
	}
	m := &Message{WireVersion: version, Kind: kind, Frames: make([]Frame, 0, nframes)}
	d := &dec{version: version}
	g := grammar{kind: kind}
	off := HeaderSize
	for {
		if len(b)-off < 5 {
			return nil, decodeFail(off, "truncated: message ends without an END frame")
		}
		t := FrameType(b[off])
		n := binary.LittleEndian.Uint32(b[off+1:])
		if t == FrameEnd {
			if n != 0 {
				return nil, decodeFail(off+1, fmt.Sprintf("END frame length %d, must be 0", n))
			}
			if off+5 != len(b) {
				return nil, decodeFail(off+5, fmt.Sprintf("%d bytes after END", len(b)-off-5))
			}
			if why := g.end(); why != "" {
				return nil, decodeFail(off, why)
			}
			return m, nil
		}
		if uint64(n) > uint64(len(b)-off-5) {
			return nil, decodeFail(off+1, fmt.Sprintf("frame length %d exceeds remaining %d bytes", n, len(b)-off-5))
		}
		payload := b[off+5 : off+5+int(n) : off+5+int(n)]
		f, err := d.frame(t, payload, off+5, &g)
		if err != nil {
			return nil, err
		}
		m.Frames = append(m.Frames, f)
		off += 5 + int(n)
	}
}

// Encode returns the canonical bytes of m. It validates what the decoder
// validates (grammar, enums, opt ties, i64 range, UTF-8, JSON, map
// keys are emitted in UTF-16 order), so its output always decodes back to
// an equal message.
func Encode(m *Message) ([]byte, error) {
	if m == nil {
		return nil, encFail("nil message")
	}
	if err := checkEnvelope(m.WireVersion, m.Kind); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 256)
	b = appendHeader(b, m.WireVersion, m.Kind)
	g := grammar{kind: m.Kind}
	var err error
	for _, f := range m.Frames {
		if b, err = appendFrame(b, f, m.WireVersion, &g); err != nil {
			return nil, err
		}
	}
	if why := g.end(); why != "" {
		return nil, encFail("%s", why)
	}
	return append(b, 0, 0, 0, 0, 0), nil
}

func checkEnvelope(v uint16, k MsgKind) error {
	if !IsKnownWireVersion(v) {
		return encFail("unsupported wire version %d", v)
	}
	if k != KindRequest && k != KindResponse {
		return encFail("unknown message kind %d", k)
	}
	return nil
}

func appendHeader(b []byte, v uint16, k MsgKind) []byte {
	b = append(b, Magic...)
	b = appendU16(b, v)
	return append(b, byte(k), 0)
}
