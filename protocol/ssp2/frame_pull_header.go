package ssp2

// FramePullHeader is the type byte of PULL_HEADER.
const FramePullHeader FrameType = 0x03

func init() {
	registerFrame(&frameSpec{typ: FramePullHeader, name: "PULL_HEADER", kind: KindRequest,
		decode: decodePullHeader, parse: parsePullHeader, order: orderPullHeader})
}

// Accept bits of PULL_HEADER.
const (
	AcceptInlineRows uint8 = 1 << 0
	AcceptRefRows    uint8 = 1 << 1
	AcceptSQLite     uint8 = 1 << 2
	AcceptSignedURLs uint8 = 1 << 3
)

// PullHeader is PULL_HEADER (0x03). Values are as sent; clamping is the
// server's job (see Clamped).
type PullHeader struct {
	LimitCommits      int32
	LimitSnapshotRows int32
	MaxSnapshotPages  int32
	Accept            uint8
}

var _ frameCodec = (*PullHeader)(nil)

// FrameType reports FramePullHeader.
func (*PullHeader) FrameType() FrameType { return FramePullHeader }

func decodePullHeader(d *dec, r *rd) Frame {
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

func (p *PullHeader) appendPayload(b []byte, _ uint16) ([]byte, error) {
	if p.Accept&0xF0 != 0 {
		return b, encFail("PULL_HEADER.accept bits 4-7 must be zero")
	}
	b = appendI32(b, p.LimitCommits)
	b = appendI32(b, p.LimitSnapshotRows)
	b = appendI32(b, p.MaxSnapshotPages)
	return append(b, p.Accept), nil
}

func (p *PullHeader) renderFields(o *obj, _ uint16) error {
	o.num("limitCommits", int64(p.LimitCommits))
	o.num("limitSnapshotRows", int64(p.LimitSnapshotRows))
	o.num("maxSnapshotPages", int64(p.MaxSnapshotPages))
	o.num("accept", int64(p.Accept))
	return nil
}

func parsePullHeader(f *fields) Frame {
	return &PullHeader{LimitCommits: f.i32("limitCommits"), LimitSnapshotRows: f.i32("limitSnapshotRows"),
		MaxSnapshotPages: f.i32("maxSnapshotPages"), Accept: uint8(f.int("accept", 0, 255))}
}

// orderPullHeader: one PULL_HEADER, after REQ_HEADER and the PUSH_COMMITs.
func orderPullHeader(g *grammar, _ Frame) string {
	if g.phase == phaseHeader || g.phase == phasePushes {
		g.phase = phasePull
		g.sawPull = true
		return ""
	}
	return outOfOrder(FramePullHeader)
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
