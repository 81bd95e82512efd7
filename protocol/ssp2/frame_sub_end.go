package ssp2

import "encoding/json"

// SubEnd is SUB_END (0x16).
type SubEnd struct {
	NextCursor int64
	// BootstrapState is raw JSON; nil means absent (bootstrap complete).
	BootstrapState json.RawMessage
}

func (*SubEnd) FrameType() FrameType { return FrameSubEnd }

func (d *dec) subEnd(r *rd) *SubEnd {
	s := &SubEnd{}
	s.NextCursor = r.i64("nextCursor")
	if r.opt("bootstrapState") {
		s.BootstrapState = r.jsonText("bootstrapState")
	}
	return s
}

func appendSubEnd(b []byte, s *SubEnd) ([]byte, error) {
	if err := checkI64("nextCursor", s.NextCursor); err != nil {
		return b, err
	}
	b = appendI64(b, s.NextCursor)
	return appendOptJSON(b, "bootstrapState", s.BootstrapState)
}
