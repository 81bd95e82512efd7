package ssp2

// FramePushResultDetails is the type byte of PUSH_RESULT_DETAILS.
const FramePushResultDetails FrameType = 0x1B

func init() {
	registerFrame(&frameSpec{typ: FramePushResultDetails, name: "PUSH_RESULT_DETAILS", kind: KindResponse,
		decode: decodePushResultDetails, parse: parsePushResultDetails, order: orderPushResultDetails})
}

// PushResultDetail is one entry of PUSH_RESULT_DETAILS.
type PushResultDetail struct {
	OpIndex     int32
	DetailsJSON string
}

// PushResultDetails is PUSH_RESULT_DETAILS (0x1B).
type PushResultDetails struct {
	ClientCommitID string
	Entries        []PushResultDetail
}

var _ frameCodec = (*PushResultDetails)(nil)

// FrameType reports FramePushResultDetails.
func (*PushResultDetails) FrameType() FrameType { return FramePushResultDetails }

func decodePushResultDetails(d *dec, r *rd) Frame {
	p := &PushResultDetails{}
	p.ClientCommitID = r.str("clientCommitId")
	start := r.off
	n := r.count("entries", 8)
	if r.err == nil && n == 0 {
		r.off = start
		r.fail("PUSH_RESULT_DETAILS needs at least one entry")
	}
	if r.err != nil {
		return p
	}
	p.Entries = make([]PushResultDetail, n)
	for i := 0; i < n && r.err == nil; i++ {
		e := &p.Entries[i]
		st := r.off
		e.OpIndex = r.i32("opIndex")
		for j := 0; j < i && r.err == nil; j++ {
			if p.Entries[j].OpIndex == e.OpIndex {
				r.off = st
				r.fail("duplicate opIndex %d in PUSH_RESULT_DETAILS", e.OpIndex)
			}
		}
		st = r.off
		e.DetailsJSON = r.str("detailsJson")
		if r.err == nil {
			if why := checkDetailsJSON(e.DetailsJSON); why != "" {
				r.off = st
				r.fail("detailsJson: %s", why)
			}
		}
	}
	return p
}

func (p *PushResultDetails) appendPayload(b []byte, _ uint16) ([]byte, error) {
	if err := checkStr("clientCommitId", p.ClientCommitID); err != nil {
		return b, err
	}
	if len(p.Entries) == 0 {
		return b, encFail("PUSH_RESULT_DETAILS needs at least one entry")
	}
	b = appendStr(b, p.ClientCommitID)
	b = appendU32(b, uint32(len(p.Entries)))
	for i, e := range p.Entries {
		for j := 0; j < i; j++ {
			if p.Entries[j].OpIndex == e.OpIndex {
				return b, encFail("duplicate opIndex %d in PUSH_RESULT_DETAILS", e.OpIndex)
			}
		}
		if why := checkDetailsJSON(e.DetailsJSON); why != "" {
			return b, encFail("detailsJson: %s", why)
		}
		b = appendI32(b, e.OpIndex)
		b = appendStr(b, e.DetailsJSON)
	}
	return b, nil
}

func (p *PushResultDetails) renderFields(o *obj, _ uint16) error {
	o.str("clientCommitId", p.ClientCommitID)
	o.objects("entries", len(p.Entries), func(e *obj, i int) {
		e.num("opIndex", int64(p.Entries[i].OpIndex))
		e.str("detailsJson", p.Entries[i].DetailsJSON)
	})
	return nil
}

func parsePushResultDetails(f *fields) Frame {
	p := &PushResultDetails{ClientCommitID: f.str("clientCommitId")}
	for _, o := range subObjects(f, "entries") {
		p.Entries = append(p.Entries, PushResultDetail{OpIndex: o.i32("opIndex"), DetailsJSON: o.str("detailsJson")})
		finishSub(f, o)
	}
	return p
}

// orderPushResultDetails: only directly after a rejected PUSH_RESULT.
func orderPushResultDetails(g *grammar, _ Frame) string {
	if g.afterRejected {
		return ""
	}
	return "PUSH_RESULT_DETAILS not directly after a rejected PUSH_RESULT"
}
