package ssp2

// FrameSubStart is the type byte of SUB_START.
const FrameSubStart FrameType = 0x12

func init() {
	registerFrame(&frameSpec{typ: FrameSubStart, name: "SUB_START", kind: KindResponse,
		decode: decodeSubStart, parse: parseSubStart, order: orderSubStart})
}

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

var _ frameCodec = (*SubStart)(nil)

// FrameType reports FrameSubStart.
func (*SubStart) FrameType() FrameType { return FrameSubStart }

func decodeSubStart(d *dec, r *rd) Frame {
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

func (s *SubStart) appendPayload(b []byte, _ uint16) ([]byte, error) {
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

var subStatusNames = []string{"", "active", "revoked", "reset"}

func (s *SubStart) renderFields(o *obj, _ uint16) error {
	o.str("id", s.ID)
	o.str("status", enumName(subStatusNames, int(s.Status)))
	o.str("reasonCode", s.ReasonCode)
	o.listMap("effectiveScopes", s.EffectiveScopes)
	o.boolean("bootstrap", s.Bootstrap)
	return nil
}

func parseSubStart(f *fields) Frame {
	return &SubStart{ID: f.str("id"), Status: SubStatus(f.enum("status", subStatusNames)), ReasonCode: f.str("reasonCode"),
		EffectiveScopes: f.listMap("effectiveScopes"), Bootstrap: f.boolean("bootstrap")}
}

// orderSubStart: SUB_START opens a section, never inside another.
func orderSubStart(g *grammar, _ Frame) string {
	if g.inSection {
		return "SUB_START inside an open section"
	}
	g.phase = phaseSections
	g.inSection = true
	g.section = sectionEmpty
	return ""
}
