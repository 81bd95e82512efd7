package ssp2

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
)

// obj appends one JSON object member by member, in call order.
type obj struct {
	b *[]byte
	n int
}

func openObj(b *[]byte) *obj { *b = append(*b, '{'); return &obj{b: b} }

func (o *obj) key(k string) {
	if o.n > 0 {
		*o.b = append(*o.b, ',')
	}
	o.n++
	*o.b = appendJSONString(*o.b, k)
	*o.b = append(*o.b, ':')
}
func (o *obj) str(k, v string) { o.key(k); *o.b = appendJSONString(*o.b, v) }
func (o *obj) num(k string, v int64) {
	o.key(k)
	*o.b = strconv.AppendInt(*o.b, v, 10)
}
func (o *obj) boolean(k string, v bool) { o.key(k); *o.b = strconv.AppendBool(*o.b, v) }
func (o *obj) b64(k string, v []byte) {
	o.key(k)
	*o.b = append(*o.b, '"')
	*o.b = base64.StdEncoding.AppendEncode(*o.b, v)
	*o.b = append(*o.b, '"')
}
func (o *obj) raw(k string, v []byte) { o.key(k); *o.b = append(*o.b, v...) }
func (o *obj) close()                 { *o.b = append(*o.b, '}') }

func appendStrList(b []byte, l []string) []byte {
	b = append(b, '[')
	for i, s := range l {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

func renderListMap(b []byte, m map[string][]string) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sortKeysUTF16(keys)
	o := openObj(&b)
	for _, k := range keys {
		o.key(k)
		b = appendStrList(b, m[k])
	}
	o.close()
	return b
}

func renderStrMap(b []byte, m map[string]string) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sortKeysUTF16(keys)
	o := openObj(&b)
	for _, k := range keys {
		o.str(k, m[k])
	}
	o.close()
	return b
}

var (
	opNames       = map[OpKind]string{OpUpsert: "upsert", OpDelete: "delete"}
	commitStNames = map[CommitStatus]string{CommitApplied: "applied", CommitCached: "cached", CommitRejected: "rejected"}
	opStNames     = map[OpStatus]string{OpApplied: "applied", OpConflict: "conflict", OpError: "error"}
	subStNames    = map[SubStatus]string{SubActive: "active", SubRevoked: "revoked", SubReset: "reset"}
	mediaNames    = map[MediaType]string{MediaRows: "rows", MediaSQLite: "sqlite"}
)

// RenderJSON renders m as its canonical §11.1 JSON debug rendering: frames
// in wire order with fields in layout order, absent opts omitted, binary
// fields standard base64, enums by name, json-typed fields embedded
// verbatim (so parsed as JSON), unknown frames as
// {"type":"UNKNOWN","frameType":n,"payload":b64}. The message is not
// validated beyond what rendering needs.
func RenderJSON(m *Message) ([]byte, error) {
	if m == nil {
		return nil, encFail("nil message")
	}
	if err := checkEnvelope(m.WireVersion, m.Kind); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 512)
	top := openObj(&b)
	top.str("magic", Magic)
	top.num("wireVersion", int64(m.WireVersion))
	top.str("msgKind", kindName(m.Kind))
	top.key("frames")
	b = append(b, '[')
	for i, f := range m.Frames {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = renderFrame(b, f, m.WireVersion); err != nil {
			return nil, err
		}
	}
	b = append(b, ']')
	top.close()
	return b, nil
}

func renderJSONField(o *obj, k string, v json.RawMessage) error {
	if !json.Valid(v) {
		return encFail("%s is not valid JSON", k)
	}
	o.raw(k, v)
	return nil
}

func renderFrame(b []byte, f Frame, version uint16) ([]byte, error) {
	if f == nil {
		return b, encFail("nil frame")
	}
	o := openObj(&b)
	var err error
	switch f := f.(type) {
	case *UnknownFrame:
		o.str("type", "UNKNOWN")
		o.num("frameType", int64(f.Type))
		o.b64("payload", f.Payload)
	case *ReqHeader:
		o.str("type", "REQ_HEADER")
		o.str("clientId", f.ClientID)
		o.num("schemaVersion", int64(f.SchemaVersion))
		if f.LogEpoch != nil {
			o.str("logEpoch", *f.LogEpoch)
		}
	case *PushCommit:
		o.str("type", "PUSH_COMMIT")
		o.str("clientCommitId", f.ClientCommitID)
		o.key("operations")
		b = append(b, '[')
		for i, op := range f.Operations {
			if i > 0 {
				b = append(b, ',')
			}
			oo := openObj(&b)
			oo.str("table", op.Table)
			oo.str("rowId", op.RowID)
			oo.str("op", opNames[op.Op])
			if op.BaseVersion != nil {
				oo.num("baseVersion", *op.BaseVersion)
			}
			if op.Payload != nil {
				oo.b64("payload", op.Payload)
			}
			oo.close()
		}
		b = append(b, ']')
	case *PullHeader:
		o.str("type", "PULL_HEADER")
		o.num("limitCommits", int64(f.LimitCommits))
		o.num("limitSnapshotRows", int64(f.LimitSnapshotRows))
		o.num("maxSnapshotPages", int64(f.MaxSnapshotPages))
		o.num("accept", int64(f.Accept))
	case *Subscription:
		o.str("type", "SUBSCRIPTION")
		o.str("id", f.ID)
		o.str("table", f.Table)
		o.key("scopes")
		b = renderListMap(b, f.Scopes)
		if f.Params != nil {
			err = renderJSONField(o, "params", f.Params)
		}
		o.num("cursor", f.Cursor)
		if f.BootstrapState != nil && err == nil {
			err = renderJSONField(o, "bootstrapState", f.BootstrapState)
		}
	case *RespHeader:
		o.str("type", "RESP_HEADER")
		if f.RequiredSchemaVersion != nil {
			o.num("requiredSchemaVersion", int64(*f.RequiredSchemaVersion))
		}
		if f.LatestSchemaVersion != nil {
			o.num("latestSchemaVersion", int64(*f.LatestSchemaVersion))
		}
		if version >= WireV2 {
			o.str("logEpoch", f.LogEpoch)
			o.boolean("resetRequired", f.ResetRequired)
		}
	case *PushResult:
		o.str("type", "PUSH_RESULT")
		o.str("clientCommitId", f.ClientCommitID)
		o.str("status", commitStNames[f.Status])
		if f.CommitSeq != nil {
			o.num("commitSeq", *f.CommitSeq)
		}
		o.key("results")
		b = append(b, '[')
		for i, r := range f.Results {
			if i > 0 {
				b = append(b, ',')
			}
			ro := openObj(&b)
			ro.num("opIndex", int64(r.OpIndex))
			ro.str("status", opStNames[r.Status])
			if r.Status == OpConflict || r.Status == OpError {
				ro.str("code", r.Code)
				ro.str("message", r.Message)
			}
			if r.Status == OpConflict {
				ro.num("serverVersion", r.ServerVersion)
				ro.b64("serverRow", r.ServerRow)
			}
			if r.Status == OpError {
				ro.boolean("retryable", r.Retryable)
			}
			ro.close()
		}
		b = append(b, ']')
	case *PushResultDetails:
		o.str("type", "PUSH_RESULT_DETAILS")
		o.str("clientCommitId", f.ClientCommitID)
		o.key("entries")
		b = append(b, '[')
		for i, e := range f.Entries {
			if i > 0 {
				b = append(b, ',')
			}
			eo := openObj(&b)
			eo.num("opIndex", int64(e.OpIndex))
			eo.str("detailsJson", e.DetailsJSON)
			eo.close()
		}
		b = append(b, ']')
	case *SubStart:
		o.str("type", "SUB_START")
		o.str("id", f.ID)
		o.str("status", subStNames[f.Status])
		o.str("reasonCode", f.ReasonCode)
		o.key("effectiveScopes")
		b = renderListMap(b, f.EffectiveScopes)
		o.boolean("bootstrap", f.Bootstrap)
	case *Commit:
		o.str("type", "COMMIT")
		o.num("commitSeq", f.CommitSeq)
		o.num("createdAtMs", f.CreatedAtMs)
		o.str("actorId", f.ActorID)
		o.key("tables")
		b = appendStrList(b, f.Tables)
		o.key("changes")
		b = append(b, '[')
		for i, c := range f.Changes {
			if i > 0 {
				b = append(b, ',')
			}
			co := openObj(&b)
			co.num("tableIndex", int64(c.TableIndex))
			co.str("rowId", c.RowID)
			co.str("op", opNames[c.Op])
			if c.RowVersion != nil {
				co.num("rowVersion", *c.RowVersion)
			}
			co.key("scopes")
			b = renderStrMap(b, c.Scopes)
			if c.Row != nil {
				co.b64("row", c.Row)
			}
			co.close()
		}
		b = append(b, ']')
	case *SegmentRef:
		o.str("type", "SEGMENT_REF")
		o.str("segmentId", f.SegmentID)
		o.str("mediaType", mediaNames[f.MediaType])
		o.str("table", f.Table)
		o.num("byteLength", f.ByteLength)
		o.num("rowCount", f.RowCount)
		o.num("asOfCommitSeq", f.AsOfCommitSeq)
		o.str("scopeDigest", f.ScopeDigest)
		if f.RowCursor != nil {
			o.str("rowCursor", *f.RowCursor)
		}
		if f.NextRowCursor != nil {
			o.str("nextRowCursor", *f.NextRowCursor)
		}
		if f.URL != nil {
			o.str("url", *f.URL)
		}
		if f.URLExpiresAtMs != nil {
			o.num("urlExpiresAtMs", *f.URLExpiresAtMs)
		}
	case *SegmentInline:
		o.str("type", "SEGMENT_INLINE")
		o.b64("payload", f.Payload)
	case *SubEnd:
		o.str("type", "SUB_END")
		o.num("nextCursor", f.NextCursor)
		if f.BootstrapState != nil {
			err = renderJSONField(o, "bootstrapState", f.BootstrapState)
		}
	case *Lease:
		o.str("type", "LEASE")
		o.str("leaseId", f.LeaseID)
		o.num("expiresAtMs", f.ExpiresAtMs)
	case *ErrorFrame:
		o.str("type", "ERROR")
		o.str("code", f.Code)
		o.str("message", f.Message)
		o.str("category", f.Category)
		o.boolean("retryable", f.Retryable)
		o.str("recommendedAction", f.RecommendedAction)
		if f.Details != nil {
			err = renderJSONField(o, "details", f.Details)
		}
	default:
		return b, encFail("unsupported frame implementation %T", f)
	}
	if err != nil {
		return b, err
	}
	o.close()
	return b, nil
}

// RenderSegmentJSON renders s as its §11.1 rule-8 JSON: columns with type
// names, blocks of {"serverVersion","values":{name: value}}; NULL as null,
// bytes and crdt as base64, json values embedded verbatim, blob_ref values
// as strings, non-finite floats as null.
func RenderSegmentJSON(s *Segment) ([]byte, error) {
	if s == nil {
		return nil, encFail("nil segment")
	}
	b := make([]byte, 0, 512)
	top := openObj(&b)
	top.str("magic", SegmentMagic)
	top.num("formatVersion", int64(s.FormatVersion))
	top.str("table", s.Table)
	top.num("schemaVersion", int64(s.SchemaVersion))
	top.key("columns")
	b = append(b, '[')
	for i, c := range s.Columns {
		if i > 0 {
			b = append(b, ',')
		}
		co := openObj(&b)
		co.str("name", c.Name)
		co.str("type", ColumnTypeName(c.Type))
		co.boolean("nullable", c.Nullable)
		co.close()
	}
	b = append(b, ']')
	top.key("blocks")
	b = append(b, '[')
	for i, block := range s.Blocks {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		for j, row := range block {
			if j > 0 {
				b = append(b, ',')
			}
			ro := openObj(&b)
			ro.num("serverVersion", row.ServerVersion)
			ro.key("values")
			var err error
			if b, err = renderRowValues(b, s.Columns, row.Values); err != nil {
				return nil, err
			}
			ro.close()
		}
		b = append(b, ']')
	}
	b = append(b, ']')
	top.close()
	return b, nil
}

func renderRowValues(b []byte, cols []Column, row Row) ([]byte, error) {
	if len(row) != len(cols) {
		return b, encFail("row has %d values for %d columns", len(row), len(cols))
	}
	o := openObj(&b)
	for i, c := range cols {
		o.key(c.Name)
		switch v := row[i].(type) {
		case nil:
			b = append(b, "null"...)
		case string:
			b = appendJSONString(b, v)
		case int64:
			b = strconv.AppendInt(b, v, 10)
		case float64:
			b = appendJSONFloat(b, v)
		case bool:
			b = strconv.AppendBool(b, v)
		case json.RawMessage:
			if !json.Valid(v) {
				return b, encFail("column %q: invalid JSON", c.Name)
			}
			b = append(b, v...)
		case []byte:
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, v)
			b = append(b, '"')
		default:
			return b, encFail("column %q: unsupported value type %T", c.Name, v)
		}
	}
	o.close()
	return b, nil
}
