package ssp2

// RespHeader is RESP_HEADER (0x10).
type RespHeader struct {
	RequiredSchemaVersion *int32
	LatestSchemaVersion   *int32
	LogEpoch              string // v2 only
	ResetRequired         bool   // v2 only
}

func (*RespHeader) FrameType() FrameType { return FrameRespHeader }

func (d *dec) respHeader(r *rd) *RespHeader {
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

func appendRespHeader(b []byte, h *RespHeader, version uint16) ([]byte, error) {
	b = appendOptI32(b, h.RequiredSchemaVersion)
	b = appendOptI32(b, h.LatestSchemaVersion)
	if version >= WireV2 {
		if h.LogEpoch == "" {
			return b, encFail("RESP_HEADER.logEpoch must be non-empty in wire v2")
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
