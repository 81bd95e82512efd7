package ssp2

import "github.com/synclane/synclane/protocol/syncerr"

// FramePushCommit is the type byte of PUSH_COMMIT.
const FramePushCommit FrameType = 0x02

func init() {
	registerFrame(&frameSpec{typ: FramePushCommit, name: "PUSH_COMMIT", kind: KindRequest,
		decode: decodePushCommit, parse: parsePushCommit, order: orderPushCommit})
}

// Operation is one push operation inside a PUSH_COMMIT.
type Operation struct {
	Table       string
	RowID       string
	Op          OpKind
	BaseVersion *int64 // nil: last-write-wins
	Payload     []byte // row codec bytes; non-nil iff Op == OpUpsert
}

// PushCommit is PUSH_COMMIT (0x02).
type PushCommit struct {
	ClientCommitID string
	Operations     []Operation
}

var _ frameCodec = (*PushCommit)(nil)

// FrameType reports FramePushCommit.
func (*PushCommit) FrameType() FrameType { return FramePushCommit }

func decodePushCommit(d *dec, r *rd) Frame {
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

func (c *PushCommit) appendPayload(b []byte, _ uint16) ([]byte, error) {
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

func (c *PushCommit) renderFields(o *obj, _ uint16) error {
	o.str("clientCommitId", c.ClientCommitID)
	o.objects("operations", len(c.Operations), func(e *obj, i int) {
		op := &c.Operations[i]
		e.str("table", op.Table)
		e.str("rowId", op.RowID)
		e.str("op", enumName(opNames, int(op.Op)))
		if op.BaseVersion != nil {
			e.num("baseVersion", *op.BaseVersion)
		}
		if op.Payload != nil {
			e.b64("payload", op.Payload)
		}
	})
	return nil
}

func parsePushCommit(f *fields) Frame {
	c := &PushCommit{ClientCommitID: f.str("clientCommitId")}
	for _, o := range subObjects(f, "operations") {
		c.Operations = append(c.Operations, Operation{
			Table: o.str("table"), RowID: o.str("rowId"), Op: OpKind(o.enum("op", opNames)),
			BaseVersion: o.optI64("baseVersion"), Payload: o.b64("payload", false),
		})
		finishSub(f, o)
	}
	return c
}

// orderPushCommit: PUSH_COMMITs follow REQ_HEADER, before any PULL_HEADER.
func orderPushCommit(g *grammar, _ Frame) string {
	if g.phase == phaseHeader || g.phase == phasePushes {
		g.phase = phasePushes
		g.sawPush = true
		return ""
	}
	return outOfOrder(FramePushCommit)
}
