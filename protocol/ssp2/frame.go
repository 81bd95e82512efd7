package ssp2

import (
	"encoding/binary"
	"fmt"
)

// Frame is one decoded frame. END is never represented: it is implied by the
// end of a Message.
type Frame interface {
	// FrameType reports the wire type byte of the frame.
	FrameType() FrameType
}

// The frame registry. Each frame_<name>.go file holds one frame whole: its
// Go type, type byte, decoder, payload encoder, §11.1 rendering and JSON
// parser, and its rule in the frame grammar. It registers what needs no
// frame value (frameSpec) from an init function, and its Go type implements
// frameCodec. The functions below dispatch by type byte through a 256-entry
// array, or through the frameCodec methods of the value; none of them names
// a frame.

// frameSpec is what a frame file registers for its type byte.
type frameSpec struct {
	typ FrameType
	// name is the frame's name in renderings and error messages.
	name string
	// kind is the message kind the frame belongs to.
	kind MsgKind
	// header marks the frame that opens every message of its kind.
	header bool
	// decode reads the payload from r. A problem is recorded in r (its
	// sticky error), and the frame is then discarded; dec.frame checks
	// r's error and that the payload was read to its end.
	decode func(d *dec, r *rd) Frame
	// parse reads the frame's members from its §11.1 rendering, "type"
	// already consumed; problems are recorded in f.
	parse func(f *fields) Frame
	// order checks that f (of this type) may come now and advances g; it
	// returns why not, or "". The checks common to every frame (kind,
	// header first, nothing after ERROR) have passed when it is called.
	order func(g *grammar, f Frame) string
}

// frameCodec is implemented by the Go type of every frame: what needs the
// frame value.
type frameCodec interface {
	Frame
	// appendPayload appends the frame's payload (without type and length)
	// to b for the given wire version, refusing what the decoder refuses.
	appendPayload(b []byte, version uint16) ([]byte, error)
	// renderFields writes the frame's §11.1 members after "type" into o.
	renderFields(o *obj, version uint16) error
}

// verbatimFrame is a frame whose payload is a byte slice written unchanged
// once checked (SEGMENT_INLINE). The Encoder writes a large one straight to
// its writer instead of copying it into its buffer.
type verbatimFrame interface {
	frameCodec
	// verbatimPayload returns the payload bytes as they go on the wire.
	verbatimPayload() []byte
	// checkPayload validates them: the check appendPayload applies.
	checkPayload() error
}

var (
	// frameSpecs is indexed by type byte; nil for END and unknown types.
	frameSpecs [256]*frameSpec
	// frameSpecByName serves ParseJSON.
	frameSpecByName = make(map[string]*frameSpec)
	// headerSpec is the header frame of each message kind.
	headerSpec = make(map[MsgKind]*frameSpec)
)

// registerFrame adds s to the registry. It panics (at package
// initialization) on an incomplete spec or one that clashes with a
// registered type byte or name.
func registerFrame(s *frameSpec) {
	why := ""
	switch {
	case s.typ == FrameEnd || frameSpecs[s.typ] != nil:
		why = "type byte already registered"
	case s.name == "" || s.name == "END" || s.name == "UNKNOWN" || frameSpecByName[s.name] != nil:
		why = "name empty, reserved or already registered"
	case s.kind != KindRequest && s.kind != KindResponse:
		why = "unknown message kind"
	case s.decode == nil || s.parse == nil || s.order == nil:
		why = "decode, parse and order are required"
	case s.header && headerSpec[s.kind] != nil:
		why = "second header frame for its message kind"
	}
	if why != "" {
		panic(fmt.Sprintf("ssp2: registering frame 0x%02x %q: %s", uint8(s.typ), s.name, why))
	}
	frameSpecs[s.typ] = s
	frameSpecByName[s.name] = s
	if s.header {
		headerSpec[s.kind] = s
	}
}

// frameName returns the rendering name of a registered frame type.
func frameName(t FrameType) string {
	if t == FrameEnd {
		return "END"
	}
	if s := frameSpecs[t]; s != nil {
		return s.name
	}
	return ""
}

// IsRegistered reports whether t has a layout for either message kind
// (END included). Frames of any other type are unknown and skippable.
func IsRegistered(t FrameType) bool { return t == FrameEnd || frameSpecs[t] != nil }

// frame decodes one non-END frame payload and advances the grammar.
func (d *dec) frame(t FrameType, payload []byte, base int, g *grammar) (Frame, error) {
	spec := frameSpecs[t] // callers handle END
	if spec == nil {
		if why := g.step(t, nil); why != "" {
			return nil, decodeFail(base-5, why)
		}
		return &UnknownFrame{Type: t, Payload: payload}, nil
	}
	if spec.kind != g.kind {
		return nil, decodeFail(base-5, g.step(t, nil))
	}
	// The reader lives in d: a decode function reached through the table
	// would make a fresh one escape, one allocation per frame.
	d.r = rd{b: payload, base: base}
	r := &d.r
	f := spec.decode(d, r)
	if r.err != nil {
		return nil, r.err
	}
	if r.off != len(r.b) {
		return nil, decodeFail(base+r.off, fmt.Sprintf("%d trailing bytes in %s frame", len(r.b)-r.off, spec.name))
	}
	if why := g.step(t, f); why != "" {
		return nil, decodeFail(base-5, why)
	}
	return f, nil
}

// appendFrame appends type, length and payload of f, advancing g.
func appendFrame(b []byte, f Frame, version uint16, g *grammar) ([]byte, error) {
	if f == nil {
		return b, encFail("nil frame")
	}
	t := f.FrameType()
	if u, ok := f.(*UnknownFrame); ok && IsRegistered(u.Type) {
		return b, encFail("refusing to emit an unknown frame under registered type 0x%02x", uint8(u.Type))
	}
	if why := g.step(t, f); why != "" {
		return b, encFail("%s", why)
	}
	start := len(b)
	b = append(b, byte(t), 0, 0, 0, 0)
	var err error
	if c, ok := f.(frameCodec); ok {
		b, err = c.appendPayload(b, version)
	} else {
		err = encFail("unsupported frame implementation %T", f)
	}
	if err != nil {
		return b[:start], err
	}
	n := len(b) - start - 5
	if uint64(n) > 0xFFFFFFFF {
		return b[:start], encFail("frame payload of %d bytes exceeds u32", n)
	}
	binary.LittleEndian.PutUint32(b[start+1:], uint32(n))
	return b, nil
}

// renderFrame appends the §11.1 rendering of one frame.
func renderFrame(b []byte, f Frame, version uint16) ([]byte, error) {
	if f == nil {
		return b, encFail("nil frame")
	}
	c, ok := f.(frameCodec)
	if !ok {
		return b, encFail("unsupported frame implementation %T", f)
	}
	name := "UNKNOWN"
	if _, unknown := f.(*UnknownFrame); !unknown {
		name = frameName(f.FrameType())
	}
	o := openObj(&b)
	o.str("type", name)
	if err := c.renderFields(o, version); err != nil {
		return b, err
	}
	o.close()
	return b, nil
}

// parseFrame builds one frame from its §11.1 rendering.
func parseFrame(f *fields) Frame {
	t := f.str("type")
	if t == "UNKNOWN" {
		return parseUnknown(f)
	}
	if s := frameSpecByName[t]; s != nil {
		return s.parse(f)
	}
	f.failf("unknown frame type %q", t)
	return nil
}
