package ssp2

// Lease is LEASE (0x19).
type Lease struct {
	LeaseID     string
	ExpiresAtMs int64
}

func (*Lease) FrameType() FrameType { return FrameLease }

func (d *dec) lease(r *rd) *Lease {
	l := &Lease{}
	l.LeaseID = r.str("leaseId")
	l.ExpiresAtMs = r.i64("expiresAtMs")
	return l
}

func appendLease(b []byte, l *Lease) ([]byte, error) {
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
