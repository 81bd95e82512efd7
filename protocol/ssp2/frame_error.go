package ssp2

import "encoding/json"

// FrameError is the type byte of ERROR.
const FrameError FrameType = 0x1F

func init() {
	registerFrame(&frameSpec{typ: FrameError, name: "ERROR", kind: KindResponse,
		decode: decodeError, parse: parseError, order: orderError})
}

// ErrorFrame is ERROR (0x1F).
type ErrorFrame struct {
	Code              string
	Message           string
	Category          string
	Retryable         bool
	RecommendedAction string
	// Details is raw JSON; nil means absent.
	Details json.RawMessage
}

var _ frameCodec = (*ErrorFrame)(nil)

// FrameType reports FrameError.
func (*ErrorFrame) FrameType() FrameType { return FrameError }

func decodeError(d *dec, r *rd) Frame {
	e := &ErrorFrame{}
	e.Code = r.str("code")
	e.Message = r.str("message")
	e.Category = r.str("category")
	e.Retryable = r.boolean("retryable")
	e.RecommendedAction = r.str("recommendedAction")
	if r.opt("details") {
		e.Details = r.jsonText("details")
	}
	return e
}

func (e *ErrorFrame) appendPayload(b []byte, _ uint16) ([]byte, error) {
	for _, s := range [...]string{e.Code, e.Message, e.Category, e.RecommendedAction} {
		if err := checkStr("ERROR field", s); err != nil {
			return b, err
		}
	}
	b = appendStr(b, e.Code)
	b = appendStr(b, e.Message)
	b = appendStr(b, e.Category)
	b = appendBool(b, e.Retryable)
	b = appendStr(b, e.RecommendedAction)
	return appendOptJSON(b, "details", e.Details)
}

func (e *ErrorFrame) renderFields(o *obj, _ uint16) error {
	o.str("code", e.Code)
	o.str("message", e.Message)
	o.str("category", e.Category)
	o.boolean("retryable", e.Retryable)
	o.str("recommendedAction", e.RecommendedAction)
	if e.Details != nil {
		return o.jsonField("details", e.Details)
	}
	return nil
}

func parseError(f *fields) Frame {
	return &ErrorFrame{Code: f.str("code"), Message: f.str("message"), Category: f.str("category"), Retryable: f.boolean("retryable"),
		RecommendedAction: f.str("recommendedAction"), Details: f.jsonVal("details")}
}

// orderError: ERROR may come anywhere after RESP_HEADER, cutting an open
// section; only END may follow it.
func orderError(g *grammar, _ Frame) string {
	g.phase = phaseError
	return ""
}
