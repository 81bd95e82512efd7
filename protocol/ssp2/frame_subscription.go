package ssp2

import "encoding/json"

// Subscription is SUBSCRIPTION (0x04).
type Subscription struct {
	ID     string
	Table  string
	Scopes map[string][]string
	// Params is raw JSON kept byte-for-byte; nil means absent.
	Params json.RawMessage
	Cursor int64
	// BootstrapState is raw JSON kept byte-for-byte; nil means absent.
	BootstrapState json.RawMessage
}

func (*Subscription) FrameType() FrameType { return FrameSubscription }

func (d *dec) subscription(r *rd) *Subscription {
	s := &Subscription{}
	s.ID = r.str("subscription.id")
	s.Table = r.str("subscription.table")
	s.Scopes = d.listMap(r, "subscription.scopes")
	if r.opt("subscription.params") {
		s.Params = r.jsonText("subscription.params")
	}
	s.Cursor = r.i64("subscription.cursor")
	if r.opt("subscription.bootstrapState") {
		s.BootstrapState = r.jsonText("subscription.bootstrapState")
	}
	return s
}

func appendSubscription(b []byte, s *Subscription) ([]byte, error) {
	if err := checkStr("subscription.id", s.ID); err != nil {
		return b, err
	}
	if err := checkStr("subscription.table", s.Table); err != nil {
		return b, err
	}
	b = appendStr(b, s.ID)
	b = appendStr(b, s.Table)
	b, err := appendListMap(b, s.Scopes)
	if err != nil {
		return b, err
	}
	if b, err = appendOptJSON(b, "subscription.params", s.Params); err != nil {
		return b, err
	}
	if err := checkI64("subscription.cursor", s.Cursor); err != nil {
		return b, err
	}
	b = appendI64(b, s.Cursor)
	return appendOptJSON(b, "subscription.bootstrapState", s.BootstrapState)
}
