package ssp2

func (d *dec) respHeader(r *rd) *RespHeader {
	h := &RespHeader{}
	if r.opt("requiredSchemaVersion") {
		v := r.i32("requiredSchemaVersion")
		h.RequiredSchemaVersion = &v
	}
	if r.opt("latestSchemaVersion") {
		v := r.i32("latestSchemaVersion")
		h.LatestSchemaVersion = &v
	}
	if d.version >= WireV2 {
		h.LogEpoch = r.strNonEmpty("logEpoch")
		h.ResetRequired = r.boolean("resetRequired")
	}
	return h
}

func appendRespHeader(b []byte, h *RespHeader, version uint16) ([]byte, error) {
	b = appendOptI32(b, h.RequiredSchemaVersion)
	b = appendOptI32(b, h.LatestSchemaVersion)
	if version >= WireV2 {
		if h.LogEpoch == "" {
			return b, encFail("RESP_HEADER.logEpoch must be non-empty in wire v2")
		}
		if err := checkStr("logEpoch", h.LogEpoch); err != nil {
			return b, err
		}
		b = appendStr(b, h.LogEpoch)
		b = appendBool(b, h.ResetRequired)
	} else if h.LogEpoch != "" || h.ResetRequired {
		return b, encFail("RESP_HEADER.logEpoch/resetRequired are not representable in wire v1")
	}
	return b, nil
}

func appendOptI32(b []byte, v *int32) []byte {
	if v == nil {
		return append(b, 0)
	}
	b = append(b, 1)
	return appendI32(b, *v)
}

func appendOptStr(b []byte, what string, v *string) ([]byte, error) {
	if v == nil {
		return append(b, 0), nil
	}
	if err := checkStr(what, *v); err != nil {
		return b, err
	}
	b = append(b, 1)
	return appendStr(b, *v), nil
}

func (d *dec) pushResult(r *rd) *PushResult {
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

func appendPushResult(b []byte, p *PushResult) ([]byte, error) {
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
			} else {
				b = appendBool(b, o.Retryable)
			}
		default:
			return b, encFail("op result status %d", o.Status)
		}
	}
	return b, nil
}

func (d *dec) pushResultDetails(r *rd) *PushResultDetails {
	p := &PushResultDetails{}
	p.ClientCommitID = r.str("clientCommitId")
	start := r.off
	n := r.count("entries", 8)
	if r.err == nil && n == 0 {
		r.off = start
		r.fail("PUSH_RESULT_DETAILS needs at least one entry")
	}
	if r.err != nil {
		return p
	}
	p.Entries = make([]PushResultDetail, n)
	for i := 0; i < n && r.err == nil; i++ {
		e := &p.Entries[i]
		st := r.off
		e.OpIndex = r.i32("opIndex")
		for j := 0; j < i && r.err == nil; j++ {
			if p.Entries[j].OpIndex == e.OpIndex {
				r.off = st
				r.fail("duplicate opIndex %d in PUSH_RESULT_DETAILS", e.OpIndex)
			}
		}
		st = r.off
		e.DetailsJSON = r.str("detailsJson")
		if r.err == nil {
			if why := checkDetailsJSON(e.DetailsJSON); why != "" {
				r.off = st
				r.fail("detailsJson: %s", why)
			}
		}
	}
	return p
}

func appendPushResultDetails(b []byte, p *PushResultDetails) ([]byte, error) {
	if err := checkStr("clientCommitId", p.ClientCommitID); err != nil {
		return b, err
	}
	if len(p.Entries) == 0 {
		return b, encFail("PUSH_RESULT_DETAILS needs at least one entry")
	}
	b = appendStr(b, p.ClientCommitID)
	b = appendU32(b, uint32(len(p.Entries)))
	for i, e := range p.Entries {
		for j := 0; j < i; j++ {
			if p.Entries[j].OpIndex == e.OpIndex {
				return b, encFail("duplicate opIndex %d in PUSH_RESULT_DETAILS", e.OpIndex)
			}
		}
		if why := checkDetailsJSON(e.DetailsJSON); why != "" {
			return b, encFail("detailsJson: %s", why)
		}
		b = appendI32(b, e.OpIndex)
		b = appendStr(b, e.DetailsJSON)
	}
	return b, nil
}

func (d *dec) subStart(r *rd) *SubStart {
	s := &SubStart{}
	s.ID = r.str("SUB_START.id")
	st := r.off
	switch v := SubStatus(r.u8("SUB_START.status")); v {
	case SubActive, SubRevoked, SubReset:
		s.Status = v
	default:
		if r.err == nil {
			r.off = st
			r.fail("SUB_START status %d", v)
		}
	}
	s.ReasonCode = d.intern(r.strBytes("SUB_START.reasonCode"))
	s.EffectiveScopes = d.listMap(r, "effectiveScopes")
	s.Bootstrap = r.boolean("SUB_START.bootstrap")
	return s
}

func appendSubStart(b []byte, s *SubStart) ([]byte, error) {
	if err := checkStr("SUB_START.id", s.ID); err != nil {
		return b, err
	}
	if err := checkStr("SUB_START.reasonCode", s.ReasonCode); err != nil {
		return b, err
	}
	switch s.Status {
	case SubActive, SubRevoked, SubReset:
	default:
		return b, encFail("SUB_START status %d", s.Status)
	}
	b = appendStr(b, s.ID)
	b = append(b, byte(s.Status))
	b = appendStr(b, s.ReasonCode)
	b, err := appendListMap(b, s.EffectiveScopes)
	if err != nil {
		return b, err
	}
	return appendBool(b, s.Bootstrap), nil
}

func (d *dec) commit(r *rd) *Commit {
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

// appendCommit encodes a COMMIT payload. It allocates nothing per change
// beyond growth of b.
func appendCommit(b []byte, c *Commit) ([]byte, error) {
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

func (d *dec) segmentRef(r *rd) *SegmentRef {
	s := &SegmentRef{}
	s.SegmentID = r.str("segmentId")
	st := r.off
	switch m := MediaType(r.u8("mediaType")); m {
	case MediaRows, MediaSQLite:
		s.MediaType = m
	default:
		if r.err == nil {
			r.off = st
			r.fail("mediaType %d", m)
		}
	}
	s.Table = r.str("table")
	s.ByteLength = r.i64("byteLength")
	s.RowCount = r.i64("rowCount")
	s.AsOfCommitSeq = r.i64("asOfCommitSeq")
	s.ScopeDigest = r.str("scopeDigest")
	if r.opt("rowCursor") {
		v := r.str("rowCursor")
		s.RowCursor = &v
	}
	if r.opt("nextRowCursor") {
		v := r.str("nextRowCursor")
		s.NextRowCursor = &v
	}
	if r.opt("url") {
		v := r.str("url")
		s.URL = &v
	}
	st = r.off
	if r.opt("urlExpiresAtMs") {
		v := r.i64("urlExpiresAtMs")
		s.URLExpiresAtMs = &v
	}
	if r.err == nil && (s.URL != nil) != (s.URLExpiresAtMs != nil) {
		r.off = st
		r.fail("urlExpiresAtMs must be present iff url is")
	}
	return s
}

func appendSegmentRef(b []byte, s *SegmentRef) ([]byte, error) {
	for _, f := range [...]struct {
		n string
		v string
	}{{"segmentId", s.SegmentID}, {"table", s.Table}, {"scopeDigest", s.ScopeDigest}} {
		if err := checkStr(f.n, f.v); err != nil {
			return b, err
		}
	}
	if s.MediaType != MediaRows && s.MediaType != MediaSQLite {
		return b, encFail("mediaType %d", s.MediaType)
	}
	if (s.URL != nil) != (s.URLExpiresAtMs != nil) {
		return b, encFail("urlExpiresAtMs must be present iff url is")
	}
	for _, f := range [...]struct {
		n string
		v int64
	}{{"byteLength", s.ByteLength}, {"rowCount", s.RowCount}, {"asOfCommitSeq", s.AsOfCommitSeq}} {
		if err := checkI64(f.n, f.v); err != nil {
			return b, err
		}
	}
	b = appendStr(b, s.SegmentID)
	b = append(b, byte(s.MediaType))
	b = appendStr(b, s.Table)
	b = appendI64(b, s.ByteLength)
	b = appendI64(b, s.RowCount)
	b = appendI64(b, s.AsOfCommitSeq)
	b = appendStr(b, s.ScopeDigest)
	var err error
	if b, err = appendOptStr(b, "rowCursor", s.RowCursor); err != nil {
		return b, err
	}
	if b, err = appendOptStr(b, "nextRowCursor", s.NextRowCursor); err != nil {
		return b, err
	}
	if b, err = appendOptStr(b, "url", s.URL); err != nil {
		return b, err
	}
	if s.URLExpiresAtMs == nil {
		return append(b, 0), nil
	}
	if err := checkI64("urlExpiresAtMs", *s.URLExpiresAtMs); err != nil {
		return b, err
	}
	b = append(b, 1)
	return appendI64(b, *s.URLExpiresAtMs), nil
}

func (d *dec) subEnd(r *rd) *SubEnd {
	s := &SubEnd{}
	s.NextCursor = r.i64("nextCursor")
	if r.opt("bootstrapState") {
		s.BootstrapState = r.jsonText("bootstrapState")
	}
	return s
}

func appendSubEnd(b []byte, s *SubEnd) ([]byte, error) {
	if err := checkI64("nextCursor", s.NextCursor); err != nil {
		return b, err
	}
	b = appendI64(b, s.NextCursor)
	return appendOptJSON(b, "bootstrapState", s.BootstrapState)
}

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
