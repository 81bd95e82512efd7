package ssp2

// FrameRespHeader is the type byte of RESP_HEADER.
const FrameRespHeader FrameType = 0x10

func init() {
	registerFrame(&frameSpec{typ: FrameRespHeader, name: "RESP_HEADER", kind: KindResponse, header: true,
		decode: decodeRespHeader, parse: parseRespHeader, order: orderRespHeader})
}

// RespHeader is RESP_HEADER (0x10).
type RespHeader struct {
	RequiredSchemaVersion *int32
	LatestSchemaVersion   *int32
	LogEpoch              string // from v2 on (v3 keeps the v2 layout)
	ResetRequired         bool   // from v2 on
}

var _ frameCodec = (*RespHeader)(nil)

// FrameType reports FrameRespHeader.
func (*RespHeader) FrameType() FrameType { return FrameRespHeader }

func decodeRespHeader(d *dec, r *rd) Frame {
	h := &RespHeader{}
	if r.opt("requiredSchemaVersion") {
		v := r.i32("requiredSchemaVersion")
		h.RequiredSchemaVersion = &v
	}
	if r.opt("latestSchemaVersion") {
		v := r.i32("latestSchemaVersion")
		h.LatestSchemaVersion = &v
	}
	if d.version >= WireV2 {
		h.LogEpoch = r.strNonEmpty("logEpoch")
		h.ResetRequired = r.boolean("resetRequired")
	}
	return h
}

func (h *RespHeader) appendPayload(b []byte, version uint16) ([]byte, error) {
	b = appendOptI32(b, h.RequiredSchemaVersion)
	b = appendOptI32(b, h.LatestSchemaVersion)
	if version >= WireV2 {
		if h.LogEpoch == "" {
			return b, encFail("RESP_HEADER.logEpoch must be non-empty in wire v%d", version)
		}
		if err := checkStr("logEpoch", h.LogEpoch); err != nil {
			return b, err
		}
		b = appendStr(b, h.LogEpoch)
		b = appendBool(b, h.ResetRequired)
	} else if h.LogEpoch != "" || h.ResetRequired {
		return b, encFail("RESP_HEADER.logEpoch/resetRequired are not representable in wire v1")
	}
	return b, nil
}

func (h *RespHeader) renderFields(o *obj, version uint16) error {
	if h.RequiredSchemaVersion != nil {
		o.num("requiredSchemaVersion", int64(*h.RequiredSchemaVersion))
	}
	if h.LatestSchemaVersion != nil {
		o.num("latestSchemaVersion", int64(*h.LatestSchemaVersion))
	}
	if version >= WireV2 {
		o.str("logEpoch", h.LogEpoch)
		o.boolean("resetRequired", h.ResetRequired)
	}
	return nil
}

func parseRespHeader(f *fields) Frame {
	h := &RespHeader{RequiredSchemaVersion: f.optI32("requiredSchemaVersion"), LatestSchemaVersion: f.optI32("latestSchemaVersion")}
	if f.has("logEpoch") || f.has("resetRequired") {
		h.LogEpoch = f.str("logEpoch")
		h.ResetRequired = f.boolean("resetRequired")
	}
	return h
}

// orderRespHeader: RESP_HEADER opens a response, once.
func orderRespHeader(g *grammar, _ Frame) string {
	if g.phase == phaseStart {
		g.phase = phaseHeader
		return ""
	}
	return "second RESP_HEADER"
}
