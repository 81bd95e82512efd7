package ssp2

// FrameSegmentRef is the type byte of SEGMENT_REF.
const FrameSegmentRef FrameType = 0x14

func init() {
	registerFrame(&frameSpec{typ: FrameSegmentRef, name: "SEGMENT_REF", kind: KindResponse,
		decode: decodeSegmentRef, parse: parseSegmentRef, order: orderSegmentRef})
}

// MediaType is the media type of a segment.
type MediaType uint8

// Segment media types.
const (
	MediaRows   MediaType = 1
	MediaSQLite MediaType = 2
)

// SegmentRef is SEGMENT_REF (0x14).
type SegmentRef struct {
	SegmentID      string
	MediaType      MediaType
	Table          string
	ByteLength     int64
	RowCount       int64
	AsOfCommitSeq  int64
	ScopeDigest    string
	RowCursor      *string
	NextRowCursor  *string
	URL            *string
	URLExpiresAtMs *int64 // present iff URL is
}

var _ frameCodec = (*SegmentRef)(nil)

// FrameType reports FrameSegmentRef.
func (*SegmentRef) FrameType() FrameType { return FrameSegmentRef }

func decodeSegmentRef(d *dec, r *rd) Frame {
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

func (s *SegmentRef) appendPayload(b []byte, _ uint16) ([]byte, error) {
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

var mediaTypeNames = []string{"", "rows", "sqlite"}

func (s *SegmentRef) renderFields(o *obj, _ uint16) error {
	o.str("segmentId", s.SegmentID)
	o.str("mediaType", enumName(mediaTypeNames, int(s.MediaType)))
	o.str("table", s.Table)
	o.num("byteLength", s.ByteLength)
	o.num("rowCount", s.RowCount)
	o.num("asOfCommitSeq", s.AsOfCommitSeq)
	o.str("scopeDigest", s.ScopeDigest)
	if s.RowCursor != nil {
		o.str("rowCursor", *s.RowCursor)
	}
	if s.NextRowCursor != nil {
		o.str("nextRowCursor", *s.NextRowCursor)
	}
	if s.URL != nil {
		o.str("url", *s.URL)
	}
	if s.URLExpiresAtMs != nil {
		o.num("urlExpiresAtMs", *s.URLExpiresAtMs)
	}
	return nil
}

func parseSegmentRef(f *fields) Frame {
	return &SegmentRef{SegmentID: f.str("segmentId"), MediaType: MediaType(f.enum("mediaType", mediaTypeNames)), Table: f.str("table"),
		ByteLength: f.i64("byteLength"), RowCount: f.i64("rowCount"), AsOfCommitSeq: f.i64("asOfCommitSeq"), ScopeDigest: f.str("scopeDigest"),
		RowCursor: f.optStr("rowCursor"), NextRowCursor: f.optStr("nextRowCursor"), URL: f.optStr("url"), URLExpiresAtMs: f.optI64("urlExpiresAtMs")}
}

// orderSegmentRef: segment frames are section data, not mixed with COMMITs.
func orderSegmentRef(g *grammar, _ Frame) string {
	return g.sectionFrame(FrameSegmentRef, sectionSegments)
}
