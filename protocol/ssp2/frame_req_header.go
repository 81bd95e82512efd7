package ssp2

// FrameReqHeader is the type byte of REQ_HEADER.
const FrameReqHeader FrameType = 0x01

func init() {
	registerFrame(&frameSpec{typ: FrameReqHeader, name: "REQ_HEADER", kind: KindRequest, header: true,
		decode: decodeReqHeader, parse: parseReqHeader, order: orderReqHeader})
}

// ReqHeader is REQ_HEADER (0x01).
type ReqHeader struct {
	ClientID      string
	SchemaVersion int32
	// LogEpoch is on the wire from v2 on (v3 keeps the v2 layout); nil
	// means absent (epoch acquisition).
	LogEpoch *string
}

var _ frameCodec = (*ReqHeader)(nil)

// FrameType reports FrameReqHeader.
func (*ReqHeader) FrameType() FrameType { return FrameReqHeader }

func decodeReqHeader(d *dec, r *rd) Frame {
	h := &ReqHeader{}
	h.ClientID = r.strNonEmpty("clientId")
	start := r.off
	h.SchemaVersion = r.i32("schemaVersion")
	if r.err == nil && h.SchemaVersion < 1 {
		r.off = start
		r.fail("schemaVersion %d < 1", h.SchemaVersion)
	}
	if d.version >= WireV2 && r.opt("logEpoch") {
		s := r.strNonEmpty("logEpoch")
		h.LogEpoch = &s
	}
	return h
}

func (h *ReqHeader) appendPayload(b []byte, version uint16) ([]byte, error) {
	if h.ClientID == "" {
		return b, encFail("REQ_HEADER.clientId must be non-empty")
	}
	if err := checkStr("clientId", h.ClientID); err != nil {
		return b, err
	}
	if h.SchemaVersion < 1 {
		return b, encFail("REQ_HEADER.schemaVersion %d < 1", h.SchemaVersion)
	}
	b = appendStr(b, h.ClientID)
	b = appendI32(b, h.SchemaVersion)
	if version >= WireV2 {
		if h.LogEpoch == nil {
			b = append(b, 0)
		} else {
			if *h.LogEpoch == "" {
				return b, encFail("REQ_HEADER.logEpoch must be non-empty when present")
			}
			if err := checkStr("logEpoch", *h.LogEpoch); err != nil {
				return b, err
			}
			b = append(b, 1)
			b = appendStr(b, *h.LogEpoch)
		}
	} else if h.LogEpoch != nil {
		return b, encFail("REQ_HEADER.logEpoch is not representable in wire v1")
	}
	return b, nil
}

func (h *ReqHeader) renderFields(o *obj, _ uint16) error {
	o.str("clientId", h.ClientID)
	o.num("schemaVersion", int64(h.SchemaVersion))
	if h.LogEpoch != nil {
		o.str("logEpoch", *h.LogEpoch)
	}
	return nil
}

func parseReqHeader(f *fields) Frame {
	return &ReqHeader{ClientID: f.str("clientId"), SchemaVersion: f.i32("schemaVersion"), LogEpoch: f.optStr("logEpoch")}
}

// orderReqHeader: REQ_HEADER opens a request, once.
func orderReqHeader(g *grammar, _ Frame) string {
	if g.phase == phaseStart {
		g.phase = phaseHeader
		return ""
	}
	return outOfOrder(FrameReqHeader)
}
