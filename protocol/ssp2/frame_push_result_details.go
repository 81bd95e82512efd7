package ssp2

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

func (*PushResultDetails) FrameType() FrameType { return FramePushResultDetails }

func (d *dec) pushResultDetails(r *rd) *PushResultDetails {
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

func appendPushResultDetails(b []byte, p *PushResultDetails) ([]byte, error) {
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
