package ssp2

import "encoding/json"

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

func (*ErrorFrame) FrameType() FrameType { return FrameError }

func (d *dec) errorFrame(r *rd) *ErrorFrame {
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

func appendErrorFrame(b []byte, e *ErrorFrame) ([]byte, error) {
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
