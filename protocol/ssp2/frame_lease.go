package ssp2

// FrameLease is the type byte of LEASE.
const FrameLease FrameType = 0x19

func init() {
	registerFrame(&frameSpec{typ: FrameLease, name: "LEASE", kind: KindResponse,
		decode: decodeLease, parse: parseLease, order: orderLease})
}

// Lease is LEASE (0x19).
type Lease struct {
	LeaseID     string
	ExpiresAtMs int64
}

var _ frameCodec = (*Lease)(nil)

// FrameType reports FrameLease.
func (*Lease) FrameType() FrameType { return FrameLease }

func decodeLease(d *dec, r *rd) Frame {
	l := &Lease{}
	l.LeaseID = r.str("leaseId")
	l.ExpiresAtMs = r.i64("expiresAtMs")
	return l
}

func (l *Lease) appendPayload(b []byte, _ uint16) ([]byte, error) {
	if l.LeaseID == "" {
		return b, encFail("LEASE.leaseId must be non-empty")
	}
	if err := checkStr("leaseId", l.LeaseID); err != nil {
		return b, err
	}
	if err := checkI64("expiresAtMs", l.ExpiresAtMs); err != nil {
		return b, err
	}
	b = appendStr(b, l.LeaseID)
	return appendI64(b, l.ExpiresAtMs), nil
}

func (l *Lease) renderFields(o *obj, _ uint16) error {
	o.str("leaseId", l.LeaseID)
	o.num("expiresAtMs", l.ExpiresAtMs)
	return nil
}

func parseLease(f *fields) Frame {
	return &Lease{LeaseID: f.str("leaseId"), ExpiresAtMs: f.i64("expiresAtMs")}
}

// orderLease: at most one LEASE, directly after RESP_HEADER.
func orderLease(g *grammar, _ Frame) string {
	if g.phase == phaseHeader {
		g.phase = phasePushes
		return ""
	}
	return "LEASE must come directly after RESP_HEADER, at most once"
}
