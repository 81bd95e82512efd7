package ssp2

// SubStatus is the status of a SUB_START.
type SubStatus uint8

// Subscription statuses.
const (
	SubActive  SubStatus = 1
	SubRevoked SubStatus = 2
	SubReset   SubStatus = 3
)

// SubStart is SUB_START (0x12).
type SubStart struct {
	ID              string
	Status          SubStatus
	ReasonCode      string
	EffectiveScopes map[string][]string
	Bootstrap       bool
}

func (*SubStart) FrameType() FrameType { return FrameSubStart }

func (d *dec) subStart(r *rd) *SubStart {
	s := &SubStart{}
	s.ID = r.str("SUB_START.id")
	st := r.off
	switch v := SubStatus(r.u8("SUB_START.status")); v {
	case SubActive, SubRevoked, SubReset:
		s.Status = v
	default:
		if r.err == nil {
			r.off = st
			r.fail("SUB_START status %d", v)
		}
	}
	s.ReasonCode = d.intern(r.strBytes("SUB_START.reasonCode"))
	s.EffectiveScopes = d.listMap(r, "effectiveScopes")
	s.Bootstrap = r.boolean("SUB_START.bootstrap")
	return s
}

func appendSubStart(b []byte, s *SubStart) ([]byte, error) {
	if err := checkStr("SUB_START.id", s.ID); err != nil {
		return b, err
	}
	if err := checkStr("SUB_START.reasonCode", s.ReasonCode); err != nil {
		return b, err
	}
	switch s.Status {
	case SubActive, SubRevoked, SubReset:
	default:
		return b, encFail("SUB_START status %d", s.Status)
	}
	b = appendStr(b, s.ID)
	b = append(b, byte(s.Status))
	b = appendStr(b, s.ReasonCode)
	b, err := appendListMap(b, s.EffectiveScopes)
	if err != nil {
		return b, err
	}
	return appendBool(b, s.Bootstrap), nil
}
