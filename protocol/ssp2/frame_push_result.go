package ssp2

// FramePushResult is the type byte of PUSH_RESULT.
const FramePushResult FrameType = 0x11

func init() {
	registerFrame(&frameSpec{typ: FramePushResult, name: "PUSH_RESULT", kind: KindResponse,
		decode: decodePushResult, parse: parsePushResult, order: orderPushResult})
}

// CommitStatus is the status of a PUSH_RESULT.
type CommitStatus uint8

// Push result statuses.
const (
	CommitApplied  CommitStatus = 1
	CommitCached   CommitStatus = 2
	CommitRejected CommitStatus = 3
)

// OpStatus is the status of one operation result record.
type OpStatus uint8

// Operation result statuses.
const (
	OpApplied  OpStatus = 1
	OpConflict OpStatus = 2
	OpError    OpStatus = 3
)

// OpResult is one result record of a PUSH_RESULT.
type OpResult struct {
	OpIndex int32
	Status  OpStatus
	// Code and Message are set for conflict and error records.
	Code    string
	Message string
	// ServerVersion and ServerRow are set for conflict records.
	ServerVersion int64
	ServerRow     []byte
	// ConflictColumns is set for conflict records: the contended columns
	// in the presence-bitmap layout (SPEC §6.2, §6.3), carried as bytes
	// (u32 length + bytes) after ServerRow. Only wire version 3 carries
	// it: a v3 decode sets it (non-nil, aliasing the input, possibly
	// empty); v1 and v2 encoders leave it out silently (a server answers
	// an older client without it) and their decoders leave it nil. The
	// codec does not check it against a table's width: the envelope does
	// not name the table.
	ConflictColumns ColumnSet
	// Retryable is set for error records.
	Retryable bool
}

// PushResult is PUSH_RESULT (0x11).
type PushResult struct {
	ClientCommitID string
	Status         CommitStatus
	CommitSeq      *int64 // present iff applied or cached
	Results        []OpResult
}

var _ frameCodec = (*PushResult)(nil)

// FrameType reports FramePushResult.
func (*PushResult) FrameType() FrameType { return FramePushResult }

func decodePushResult(d *dec, r *rd) Frame {
	p := &PushResult{}
	p.ClientCommitID = r.str("clientCommitId")
	start := r.off
	switch s := CommitStatus(r.u8("status")); s {
	case CommitApplied, CommitCached, CommitRejected:
		p.Status = s
	default:
		if r.err == nil {
			r.off = start
			r.fail("PUSH_RESULT status %d", s)
		}
	}
	seqStart := r.off
	if r.opt("commitSeq") {
		v := r.i64("commitSeq")
		p.CommitSeq = &v
	}
	if r.err == nil && (p.CommitSeq != nil) != (p.Status != CommitRejected) {
		r.off = seqStart
		r.fail("commitSeq must be present iff status is applied or cached")
	}
	n := r.count("results", 5)
	if n > 0 {
		p.Results = make([]OpResult, n)
	}
	for i := 0; i < n && r.err == nil; i++ {
		o := &p.Results[i]
		o.OpIndex = r.i32("opIndex")
		st := r.off
		switch s := OpStatus(r.u8("result status")); s {
		case OpApplied:
			o.Status = s
		case OpConflict:
			o.Status = s
			o.Code = r.str("code")
			o.Message = r.str("message")
			o.ServerVersion = r.i64("serverVersion")
			o.ServerRow = r.rawBytes("serverRow")
			if d.version >= WireV3 {
				o.ConflictColumns = r.rawBytes("conflictColumns")
			}
		case OpError:
			o.Status = s
			o.Code = r.str("code")
			o.Message = r.str("message")
			o.Retryable = r.boolean("retryable")
		default:
			if r.err == nil {
				r.off = st
				r.fail("op result status %d", s)
			}
		}
	}
	return p
}

func (p *PushResult) appendPayload(b []byte, version uint16) ([]byte, error) {
	if err := checkStr("clientCommitId", p.ClientCommitID); err != nil {
		return b, err
	}
	switch p.Status {
	case CommitApplied, CommitCached, CommitRejected:
	default:
		return b, encFail("PUSH_RESULT status %d", p.Status)
	}
	if (p.CommitSeq != nil) != (p.Status != CommitRejected) {
		return b, encFail("commitSeq must be present iff status is applied or cached")
	}
	b = appendStr(b, p.ClientCommitID)
	b = append(b, byte(p.Status))
	if p.CommitSeq == nil {
		b = append(b, 0)
	} else {
		if err := checkI64("commitSeq", *p.CommitSeq); err != nil {
			return b, err
		}
		b = append(b, 1)
		b = appendI64(b, *p.CommitSeq)
	}
	b = appendU32(b, uint32(len(p.Results)))
	for i := range p.Results {
		o := &p.Results[i]
		b = appendI32(b, o.OpIndex)
		b = append(b, byte(o.Status))
		switch o.Status {
		case OpApplied:
		case OpConflict, OpError:
			if err := checkStr("code", o.Code); err != nil {
				return b, err
			}
			if err := checkStr("message", o.Message); err != nil {
				return b, err
			}
			b = appendStr(b, o.Code)
			b = appendStr(b, o.Message)
			if o.Status == OpConflict {
				if err := checkI64("serverVersion", o.ServerVersion); err != nil {
					return b, err
				}
				b = appendI64(b, o.ServerVersion)
				b = appendBytes(b, o.ServerRow)
				if version >= WireV3 {
					b = appendBytes(b, o.ConflictColumns)
				}
			} else {
				b = appendBool(b, o.Retryable)
			}
		default:
			return b, encFail("op result status %d", o.Status)
		}
	}
	return b, nil
}

var (
	commitStatusNames = []string{"", "applied", "cached", "rejected"}
	opStatusNames     = []string{"", "applied", "conflict", "error"}
)

func (p *PushResult) renderFields(o *obj, version uint16) error {
	o.str("clientCommitId", p.ClientCommitID)
	o.str("status", enumName(commitStatusNames, int(p.Status)))
	if p.CommitSeq != nil {
		o.num("commitSeq", *p.CommitSeq)
	}
	o.objects("results", len(p.Results), func(e *obj, i int) {
		r := &p.Results[i]
		e.num("opIndex", int64(r.OpIndex))
		e.str("status", enumName(opStatusNames, int(r.Status)))
		if r.Status == OpConflict || r.Status == OpError {
			e.str("code", r.Code)
			e.str("message", r.Message)
		}
		if r.Status == OpConflict {
			e.num("serverVersion", r.ServerVersion)
			e.b64("serverRow", r.ServerRow)
			if version >= WireV3 {
				e.b64("conflictColumns", r.ConflictColumns)
			}
		}
		if r.Status == OpError {
			e.boolean("retryable", r.Retryable)
		}
	})
	return nil
}

func parsePushResult(f *fields) Frame {
	p := &PushResult{ClientCommitID: f.str("clientCommitId"), Status: CommitStatus(f.enum("status", commitStatusNames)), CommitSeq: f.optI64("commitSeq")}
	for _, o := range subObjects(f, "results") {
		r := OpResult{OpIndex: o.i32("opIndex"), Status: OpStatus(o.enum("status", opStatusNames))}
		if r.Status == OpConflict || r.Status == OpError {
			r.Code = o.str("code")
			r.Message = o.str("message")
		}
		if r.Status == OpConflict {
			r.ServerVersion = o.i64("serverVersion")
			r.ServerRow = o.b64("serverRow", true)
			if o.version >= WireV3 {
				r.ConflictColumns = o.b64("conflictColumns", true)
			}
		}
		if r.Status == OpError {
			r.Retryable = o.boolean("retryable")
		}
		p.Results = append(p.Results, r)
		finishSub(f, o)
	}
	return p
}

// orderPushResult: PUSH_RESULTs follow RESP_HEADER (and LEASE), before any
// section. A rejected one may be followed by its PUSH_RESULT_DETAILS.
func orderPushResult(g *grammar, f Frame) string {
	if g.phase == phaseHeader || g.phase == phasePushes {
		g.phase = phasePushes
		p, ok := f.(*PushResult)
		g.rejected = ok && p.Status == CommitRejected
		return ""
	}
	return "PUSH_RESULT after a subscription section"
}
