package ssp2

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

func (*SegmentInline) FrameType() FrameType { return FrameSegmentInline }

// checkInline validates an inline segment's payload unless it is marked
// Verified; a Verified payload still needs a whole SSG2 header.
func checkInline(si *SegmentInline) error {
	if si.Verified && len(si.Payload) >= 8 && string(si.Payload[:4]) == SegmentMagic {
		return nil
	}
	return validateSegment(si.Payload, 0)
}
