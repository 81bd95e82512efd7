package ssp2

import "encoding/json"

// FrameSubEnd is the type byte of SUB_END.
const FrameSubEnd FrameType = 0x16

func init() {
	registerFrame(&frameSpec{typ: FrameSubEnd, name: "SUB_END", kind: KindResponse,
		decode: decodeSubEnd, parse: parseSubEnd, order: orderSubEnd})
}

// SubEnd is SUB_END (0x16).
type SubEnd struct {
	NextCursor int64
	// BootstrapState is raw JSON; nil means absent (bootstrap complete).
	BootstrapState json.RawMessage
}

var _ frameCodec = (*SubEnd)(nil)

// FrameType reports FrameSubEnd.
func (*SubEnd) FrameType() FrameType { return FrameSubEnd }

func decodeSubEnd(d *dec, r *rd) Frame {
	s := &SubEnd{}
	s.NextCursor = r.i64("nextCursor")
	if r.opt("bootstrapState") {
		s.BootstrapState = r.jsonText("bootstrapState")
	}
	return s
}

func (s *SubEnd) appendPayload(b []byte, _ uint16) ([]byte, error) {
	if err := checkI64("nextCursor", s.NextCursor); err != nil {
		return b, err
	}
	b = appendI64(b, s.NextCursor)
	return appendOptJSON(b, "bootstrapState", s.BootstrapState)
}

func (s *SubEnd) renderFields(o *obj, _ uint16) error {
	o.num("nextCursor", s.NextCursor)
	if s.BootstrapState != nil {
		return o.jsonField("bootstrapState", s.BootstrapState)
	}
	return nil
}

func parseSubEnd(f *fields) Frame {
	return &SubEnd{NextCursor: f.i64("nextCursor"), BootstrapState: f.jsonVal("bootstrapState")}
}

// orderSubEnd: SUB_END closes the open section.
func orderSubEnd(g *grammar, _ Frame) string {
	if !g.inSection {
		return "SUB_END without SUB_START"
	}
	g.inSection = false
	return ""
}
