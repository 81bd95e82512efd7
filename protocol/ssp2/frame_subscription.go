package ssp2

import "encoding/json"

// FrameSubscription is the type byte of SUBSCRIPTION.
const FrameSubscription FrameType = 0x04

func init() {
	registerFrame(&frameSpec{typ: FrameSubscription, name: "SUBSCRIPTION", kind: KindRequest,
		decode: decodeSubscription, parse: parseSubscription, order: orderSubscription})
}

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

var _ frameCodec = (*Subscription)(nil)

// FrameType reports FrameSubscription.
func (*Subscription) FrameType() FrameType { return FrameSubscription }

func decodeSubscription(d *dec, r *rd) Frame {
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

func (s *Subscription) appendPayload(b []byte, _ uint16) ([]byte, error) {
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

func (s *Subscription) renderFields(o *obj, _ uint16) error {
	o.str("id", s.ID)
	o.str("table", s.Table)
	o.listMap("scopes", s.Scopes)
	if s.Params != nil {
		if err := o.jsonField("params", s.Params); err != nil {
			return err
		}
	}
	o.num("cursor", s.Cursor)
	if s.BootstrapState != nil {
		return o.jsonField("bootstrapState", s.BootstrapState)
	}
	return nil
}

func parseSubscription(f *fields) Frame {
	s := &Subscription{ID: f.str("id"), Table: f.str("table"), Scopes: f.listMap("scopes")}
	s.Params = f.jsonVal("params")
	s.Cursor = f.i64("cursor")
	s.BootstrapState = f.jsonVal("bootstrapState")
	return s
}

// orderSubscription: SUBSCRIPTIONs follow the PULL_HEADER.
func orderSubscription(g *grammar, _ Frame) string {
	if g.phase == phasePull {
		return ""
	}
	return outOfOrder(FrameSubscription)
}
