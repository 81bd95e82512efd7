package ssp2

import (
	"github.com/synclane/synclane/protocol/syncerr"
)

func (d *dec) reqHeader(r *rd) *ReqHeader {
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

func appendReqHeader(b []byte, h *ReqHeader, version uint16) ([]byte, error) {
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

func (d *dec) pushCommit(r *rd) *PushCommit {
	c := &PushCommit{}
	c.ClientCommitID = r.strNonEmpty("clientCommitId")
	start := r.off
	// Each op needs at least: table(4) rowId(4) op(1) base(1) payload(1).
	n := r.count("ops", 11)
	if r.err != nil {
		return c
	}
	if n == 0 {
		r.err = decodeFailCode(syncerr.EmptyCommit, r.base+start, "PUSH_COMMIT with zero operations")
		return c
	}
	c.Operations = make([]Operation, n)
	for i := 0; i < n && r.err == nil; i++ {
		op := &c.Operations[i]
		op.Table = d.intern(r.strBytes("op.table"))
		op.RowID = r.str("op.rowId")
		opStart := r.off
		switch k := r.u8("op.op"); OpKind(k) {
		case OpUpsert, OpDelete:
			op.Op = OpKind(k)
		default:
			if r.err == nil {
				r.off = opStart
				r.fail("op byte %d is not upsert(1) or delete(2)", k)
			}
		}
		if r.opt("op.baseVersion") {
			v := r.i64("op.baseVersion")
			op.BaseVersion = &v
		}
		pStart := r.off
		if r.opt("op.payload") {
			op.Payload = r.rawBytes("op.payload")
			if op.Payload == nil && r.err == nil {
				op.Payload = []byte{}
			}
		}
		if r.err == nil && (op.Payload != nil) != (op.Op == OpUpsert) {
			r.off = pStart
			r.fail("op payload must be present iff the op is an upsert")
		}
	}
	return c
}

func appendPushCommit(b []byte, c *PushCommit) ([]byte, error) {
	if c.ClientCommitID == "" {
		return b, encFail("PUSH_COMMIT.clientCommitId must be non-empty")
	}
	if len(c.Operations) == 0 {
		return b, encFail("PUSH_COMMIT with zero operations")
	}
	if err := checkStr("clientCommitId", c.ClientCommitID); err != nil {
		return b, err
	}
	b = appendStr(b, c.ClientCommitID)
	b = appendU32(b, uint32(len(c.Operations)))
	for i := range c.Operations {
		op := &c.Operations[i]
		if err := checkStr("op.table", op.Table); err != nil {
			return b, err
		}
		if err := checkStr("op.rowId", op.RowID); err != nil {
			return b, err
		}
		if op.Op != OpUpsert && op.Op != OpDelete {
			return b, encFail("op kind %d", op.Op)
		}
		if (op.Payload != nil) != (op.Op == OpUpsert) {
			return b, encFail("op payload must be present iff the op is an upsert")
		}
		b = appendStr(b, op.Table)
		b = appendStr(b, op.RowID)
		b = append(b, byte(op.Op))
		if op.BaseVersion == nil {
			b = append(b, 0)
		} else {
			if err := checkI64("baseVersion", *op.BaseVersion); err != nil {
				return b, err
			}
			b = append(b, 1)
			b = appendI64(b, *op.BaseVersion)
		}
		if op.Payload == nil {
			b = append(b, 0)
		} else {
			b = append(b, 1)
			b = appendBytes(b, op.Payload)
		}
	}
	return b, nil
}

func (d *dec) pullHeader(r *rd) *PullHeader {
	p := &PullHeader{}
	p.LimitCommits = r.i32("limitCommits")
	p.LimitSnapshotRows = r.i32("limitSnapshotRows")
	p.MaxSnapshotPages = r.i32("maxSnapshotPages")
	start := r.off
	p.Accept = r.u8("accept")
	if r.err == nil && p.Accept&0xF0 != 0 {
		r.off = start
		r.fail("accept bits 4-7 must be zero (got 0x%02x)", p.Accept)
	}
	return p
}

func appendPullHeader(b []byte, p *PullHeader) ([]byte, error) {
	if p.Accept&0xF0 != 0 {
		return b, encFail("PULL_HEADER.accept bits 4-7 must be zero")
	}
	b = appendI32(b, p.LimitCommits)
	b = appendI32(b, p.LimitSnapshotRows)
	b = appendI32(b, p.MaxSnapshotPages)
	return append(b, p.Accept), nil
}

// Pull-limit clamps and defaults (notes §3).
const (
	DefaultLimitCommits      = 1000
	MaxLimitCommits          = 1000
	DefaultLimitSnapshotRows = 1000
	MaxLimitSnapshotRows     = 50000
	DefaultMaxSnapshotPages  = 4
	MaxMaxSnapshotPages      = 50
)

// Clamped returns p with each limit defaulted when 0 and clamped into its
// range: limitCommits [1,1000] default 1000, limitSnapshotRows [1,50000]
// default 1000, maxSnapshotPages [1,50] default 4. Accept is unchanged.
func (p PullHeader) Clamped() PullHeader {
	p.LimitCommits = clampLimit(p.LimitCommits, DefaultLimitCommits, MaxLimitCommits)
	p.LimitSnapshotRows = clampLimit(p.LimitSnapshotRows, DefaultLimitSnapshotRows, MaxLimitSnapshotRows)
	p.MaxSnapshotPages = clampLimit(p.MaxSnapshotPages, DefaultMaxSnapshotPages, MaxMaxSnapshotPages)
	return p
}

func clampLimit(v, def, hi int32) int32 {
	switch {
	case v == 0:
		return def
	case v < 1:
		return 1
	case v > hi:
		return hi
	}
	return v
}

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

func appendOptJSON(b []byte, what string, v []byte) ([]byte, error) {
	if v == nil {
		return append(b, 0), nil
	}
	if err := checkJSON(what, v); err != nil {
		return b, err
	}
	b = append(b, 1)
	return appendBytes(b, v), nil
}
