package ssp2

import "math"

// FrameCommit is the type byte of COMMIT.
const FrameCommit FrameType = 0x13

func init() {
	registerFrame(&frameSpec{typ: FrameCommit, name: "COMMIT", kind: KindResponse,
		decode: decodeCommit, parse: parseCommit, order: orderCommit})
}

// Change is one change inside a COMMIT frame.
type Change struct {
	TableIndex uint16
	RowID      string
	Op         OpKind
	RowVersion *int64 // present iff upsert
	Scopes     map[string]string
	Row        []byte // present (non-nil) iff upsert
}

// Commit is COMMIT (0x13).
type Commit struct {
	CommitSeq   int64
	CreatedAtMs int64
	ActorID     string
	Tables      []string
	Changes     []Change
}

var _ frameCodec = (*Commit)(nil)

// FrameType reports FrameCommit.
func (*Commit) FrameType() FrameType { return FrameCommit }

func decodeCommit(d *dec, r *rd) Frame {
	c := &Commit{}
	c.CommitSeq = r.i64("commitSeq")
	c.CreatedAtMs = r.i64("createdAtMs")
	c.ActorID = d.intern(r.strBytes("actorId"))
	nt := r.count("tables", 4)
	if r.err != nil {
		return c
	}
	c.Tables = make([]string, nt)
	for i := 0; i < nt && r.err == nil; i++ {
		c.Tables[i] = d.intern(r.strBytes("table"))
	}
	// Each change: tableIndex(2) rowId(4) op(1) rowVersion(1) scopes(4) row(1).
	n := r.count("changes", 13)
	if r.err != nil {
		return c
	}
	c.Changes = make([]Change, n)
	for i := 0; i < n && r.err == nil; i++ {
		ch := &c.Changes[i]
		st := r.off
		ch.TableIndex = r.u16("tableIndex")
		if r.err == nil && int(ch.TableIndex) >= nt {
			r.off = st
			r.fail("tableIndex %d out of range (%d tables)", ch.TableIndex, nt)
			break
		}
		ch.RowID = r.str("rowId")
		st = r.off
		switch k := OpKind(r.u8("change op")); k {
		case OpUpsert, OpDelete:
			ch.Op = k
		default:
			if r.err == nil {
				r.off = st
				r.fail("change op byte %d", k)
			}
		}
		st = r.off
		if r.opt("rowVersion") {
			v := r.i64("rowVersion")
			ch.RowVersion = &v
		}
		if r.err == nil && (ch.RowVersion != nil) != (ch.Op == OpUpsert) {
			r.off = st
			r.fail("change rowVersion must be present iff the op is an upsert")
		}
		ch.Scopes = d.strMap(r, "change scopes")
		st = r.off
		if r.opt("row") {
			ch.Row = r.rawBytes("row")
		}
		if r.err == nil && (ch.Row != nil) != (ch.Op == OpUpsert) {
			r.off = st
			r.fail("change row must be present iff the op is an upsert")
		}
	}
	return c
}

// appendPayload encodes a COMMIT payload. It allocates nothing per change
// beyond growth of b.
func (c *Commit) appendPayload(b []byte, _ uint16) ([]byte, error) {
	if err := checkI64("commitSeq", c.CommitSeq); err != nil {
		return b, err
	}
	if err := checkI64("createdAtMs", c.CreatedAtMs); err != nil {
		return b, err
	}
	if err := checkStr("actorId", c.ActorID); err != nil {
		return b, err
	}
	if len(c.Tables) > 1<<16 {
		return b, encFail("COMMIT has %d tables; tableIndex is a u16", len(c.Tables))
	}
	b = appendI64(b, c.CommitSeq)
	b = appendI64(b, c.CreatedAtMs)
	b = appendStr(b, c.ActorID)
	b = appendU32(b, uint32(len(c.Tables)))
	for _, t := range c.Tables {
		if err := checkStr("table", t); err != nil {
			return b, err
		}
		b = appendStr(b, t)
	}
	b = appendU32(b, uint32(len(c.Changes)))
	var err error
	for i := range c.Changes {
		ch := &c.Changes[i]
		if int(ch.TableIndex) >= len(c.Tables) {
			return b, encFail("tableIndex %d out of range (%d tables)", ch.TableIndex, len(c.Tables))
		}
		if ch.Op != OpUpsert && ch.Op != OpDelete {
			return b, encFail("change op %d", ch.Op)
		}
		up := ch.Op == OpUpsert
		if (ch.RowVersion != nil) != up || (ch.Row != nil) != up {
			return b, encFail("change rowVersion and row must be present iff the op is an upsert")
		}
		if err := checkStr("rowId", ch.RowID); err != nil {
			return b, err
		}
		b = appendU16(b, ch.TableIndex)
		b = appendStr(b, ch.RowID)
		b = append(b, byte(ch.Op))
		if up {
			if !safeInt(*ch.RowVersion) {
				return b, checkI64("rowVersion", *ch.RowVersion)
			}
			b = append(b, 1)
			b = appendI64(b, *ch.RowVersion)
		} else {
			b = append(b, 0)
		}
		if b, err = appendStrMap(b, ch.Scopes); err != nil {
			return b, err
		}
		if up {
			b = append(b, 1)
			b = appendBytes(b, ch.Row)
		} else {
			b = append(b, 0)
		}
	}
	return b, nil
}

func (c *Commit) renderFields(o *obj, _ uint16) error {
	o.num("commitSeq", c.CommitSeq)
	o.num("createdAtMs", c.CreatedAtMs)
	o.str("actorId", c.ActorID)
	o.strList("tables", c.Tables)
	o.objects("changes", len(c.Changes), func(e *obj, i int) {
		ch := &c.Changes[i]
		e.num("tableIndex", int64(ch.TableIndex))
		e.str("rowId", ch.RowID)
		e.str("op", enumName(opNames, int(ch.Op)))
		if ch.RowVersion != nil {
			e.num("rowVersion", *ch.RowVersion)
		}
		e.strMap("scopes", ch.Scopes)
		if ch.Row != nil {
			e.b64("row", ch.Row)
		}
	})
	return nil
}

func parseCommit(f *fields) Frame {
	c := &Commit{CommitSeq: f.i64("commitSeq"), CreatedAtMs: f.i64("createdAtMs"), ActorID: f.str("actorId"), Tables: f.strList("tables")}
	for _, o := range subObjects(f, "changes") {
		c.Changes = append(c.Changes, Change{
			TableIndex: uint16(o.int("tableIndex", 0, math.MaxUint16)), RowID: o.str("rowId"), Op: OpKind(o.enum("op", opNames)),
			RowVersion: o.optI64("rowVersion"), Scopes: o.strMap("scopes"), Row: o.b64("row", false),
		})
		finishSub(f, o)
	}
	return c
}

// orderCommit: COMMITs are section data, not mixed with segments.
func orderCommit(g *grammar, _ Frame) string { return g.sectionFrame(FrameCommit, sectionCommits) }
