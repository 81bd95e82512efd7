package ssp2

// FrameSegmentInline is the type byte of SEGMENT_INLINE.
const FrameSegmentInline FrameType = 0x15

func init() {
	registerFrame(&frameSpec{typ: FrameSegmentInline, name: "SEGMENT_INLINE", kind: KindResponse,
		decode: decodeSegmentInline, parse: parseSegmentInline, order: orderSegmentInline})
}

// SegmentInline is SEGMENT_INLINE (0x15): one whole SSG2 segment.
type SegmentInline struct {
	Payload []byte
	// Verified marks a Payload already known to be a valid SSG2 segment:
	// built by a SegmentBuilder in this process, or read back from a
	// content-addressed store of such segments. The Encoder then writes it
	// without decoding it again (a 10,000-row page costs about a millisecond
	// to validate, paid per client per page). Decoders never set it; set it
	// only for bytes this process produced or stored itself.
	Verified bool
	// Segment is Payload decoded, set only by a Decoder asked to
	// (Decoder.DecodeSegments): a client that applies the rows then decodes
	// the page once instead of validating it and decoding it again.
	// Encoders ignore it.
	Segment *Segment
}

var _ verbatimFrame = (*SegmentInline)(nil)

// FrameType reports FrameSegmentInline.
func (*SegmentInline) FrameType() FrameType { return FrameSegmentInline }

// decodeSegmentInline checks the payload as an SSG2 segment, or decodes it
// when d is asked to (Decoder.DecodeSegments): one pass either way.
func decodeSegmentInline(d *dec, r *rd) Frame {
	seg, err := decodeSegment(r.b, r.base, d.buildSegments)
	if err != nil {
		r.err = err
		return nil
	}
	si := &SegmentInline{Payload: r.b}
	if d.buildSegments {
		si.Segment = seg
	}
	r.off = len(r.b)
	return si
}

func (si *SegmentInline) verbatimPayload() []byte { return si.Payload }

func (si *SegmentInline) checkPayload() error {
	if verr := checkInline(si); verr != nil {
		return encFail("SEGMENT_INLINE payload is not a valid SSG2 segment: %v", verr)
	}
	return nil
}

func (si *SegmentInline) appendPayload(b []byte, _ uint16) ([]byte, error) {
	if err := si.checkPayload(); err != nil {
		return b, err
	}
	return append(b, si.Payload...), nil
}

// checkInline validates an inline segment's payload unless it is marked
// Verified; a Verified payload still needs a whole SSG2 header.
func checkInline(si *SegmentInline) error {
	if si.Verified && len(si.Payload) >= 8 && string(si.Payload[:4]) == SegmentMagic {
		return nil
	}
	return validateSegment(si.Payload, 0)
}

func (si *SegmentInline) renderFields(o *obj, _ uint16) error {
	o.b64("payload", si.Payload)
	return nil
}

func parseSegmentInline(f *fields) Frame {
	return &SegmentInline{Payload: f.b64("payload", true)}
}

// orderSegmentInline: segment frames are section data, not mixed with
// COMMITs.
func orderSegmentInline(g *grammar, _ Frame) string {
	return g.sectionFrame(FrameSegmentInline, sectionSegments)
}
