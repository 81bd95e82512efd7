package ssp2

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/syncerr"
)

// raw message builders for hand-crafted inputs.
func frm(t FrameType, payload []byte) []byte {
	b := []byte{byte(t)}
	b = appendU32(b, uint32(len(payload)))
	return append(b, payload...)
}

func rawMsg(version uint16, kind MsgKind, frames ...[]byte) []byte {
	b := appendHeader(nil, version, kind)
	for _, f := range frames {
		b = append(b, f...)
	}
	return append(b, 0, 0, 0, 0, 0)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
func s(v string) []byte          { return appendStr(nil, v) }
func u32(v uint32) []byte        { return appendU32(nil, v) }
func i64(v int64) []byte         { return appendI64(nil, v) }

var (
	reqHdrV1  = frm(FrameReqHeader, cat(s("client-a"), appendI32(nil, 1)))
	pullHdr3  = frm(FramePullHeader, cat(appendI32(nil, 0), appendI32(nil, 0), appendI32(nil, 0), []byte{3}))
	respHdrV1 = frm(FrameRespHeader, []byte{0, 0})
	subStart  = frm(FrameSubStart, cat(s("sub"), []byte{1}, s(""), u32(0), []byte{0}))
	subEnd    = frm(FrameSubEnd, cat(i64(5), []byte{0}))
)

func subFrame(scopes []byte, cursor []byte) []byte {
	return frm(FrameSubscription, cat(s("sub"), s("notes"), scopes, []byte{0}, cursor, []byte{0}))
}

func mustDecodeOK(t *testing.T, b []byte) *Message {
	t.Helper()
	m, err := Decode(b)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	re, err := Encode(m)
	if err != nil {
		t.Fatalf("re-encode: %v", err)
	}
	if !bytes.Equal(re, b) {
		t.Fatalf("re-encode differs\n got %x\nwant %x", re, b)
	}
	return m
}

func TestDecodeRules(t *testing.T) {
	scopes1 := cat(u32(1), s("project"), u32(1), s("p1"))
	commitPayload := func(tableIdx uint16, op byte, rowVersion, row []byte) []byte {
		return cat(i64(1), i64(2), s("actor"), u32(1), s("notes"), u32(1),
			appendU16(nil, tableIdx), s("r1"), []byte{op}, rowVersion, u32(0), row)
	}
	okUpsert := commitPayload(0, 1, cat([]byte{1}, i64(1)), cat([]byte{1}, appendBytes(nil, []byte{0})))
	cases := []struct {
		name string
		in   []byte
		ok   bool
		code syncerr.Code
	}{
		{"valid pull", rawMsg(1, KindRequest, reqHdrV1, pullHdr3, subFrame(scopes1, i64(42))), true, ""},
		{"i64 max safe", rawMsg(1, KindRequest, reqHdrV1, pullHdr3, subFrame(scopes1, i64(MaxSafeInt))), true, ""},
		{"i64 min safe", rawMsg(1, KindRequest, reqHdrV1, pullHdr3, subFrame(scopes1, i64(-MaxSafeInt))), true, ""},
		{"i64 above 2^53-1", rawMsg(1, KindRequest, reqHdrV1, pullHdr3, subFrame(scopes1, i64(MaxSafeInt+1))), false, syncerr.InvalidRequest},
		{"i64 below -(2^53-1)", rawMsg(1, KindRequest, reqHdrV1, pullHdr3, subFrame(scopes1, i64(-MaxSafeInt-1))), false, syncerr.InvalidRequest},
		{"bad UTF-8 clientId", rawMsg(1, KindRequest, frm(FrameReqHeader, cat(s("\xff\xfe"), appendI32(nil, 1))), pullHdr3), false, syncerr.InvalidRequest},
		{"empty clientId", rawMsg(1, KindRequest, frm(FrameReqHeader, cat(s(""), appendI32(nil, 1))), pullHdr3), false, syncerr.InvalidRequest},
		{"schemaVersion 0", rawMsg(1, KindRequest, frm(FrameReqHeader, cat(s("c"), appendI32(nil, 0))), pullHdr3), false, syncerr.InvalidRequest},
		{"unsorted map keys", rawMsg(1, KindRequest, reqHdrV1, pullHdr3, subFrame(cat(u32(2), s("team"), u32(0), s("project"), u32(0)), i64(1))), false, syncerr.InvalidRequest},
		{"duplicate map keys", rawMsg(1, KindRequest, reqHdrV1, pullHdr3, subFrame(cat(u32(2), s("team"), u32(0), s("team"), u32(0)), i64(1))), false, syncerr.InvalidRequest},
		{"UTF-16 order astral before U+E000", rawMsg(1, KindRequest, reqHdrV1, pullHdr3, subFrame(cat(u32(2), s("\U00010000"), u32(0), s("\uE000"), u32(0)), i64(1))), true, ""},
		{"UTF-8 byte order rejected", rawMsg(1, KindRequest, reqHdrV1, pullHdr3, subFrame(cat(u32(2), s("\uE000"), u32(0), s("\U00010000"), u32(0)), i64(1))), false, syncerr.InvalidRequest},
		{"map count larger than input", rawMsg(1, KindRequest, reqHdrV1, pullHdr3, subFrame(u32(0xFFFFFFFF), i64(1))), false, syncerr.InvalidRequest},
		{"accept high bits", rawMsg(1, KindRequest, reqHdrV1, frm(FramePullHeader, cat(appendI32(nil, 0), appendI32(nil, 0), appendI32(nil, 0), []byte{0x13}))), false, syncerr.InvalidRequest},
		{"accept 15", rawMsg(1, KindRequest, reqHdrV1, frm(FramePullHeader, cat(appendI32(nil, 0), appendI32(nil, 0), appendI32(nil, 0), []byte{15}))), true, ""},
		{"END with nonzero length", cat(appendHeader(nil, 1, KindRequest), reqHdrV1, pullHdr3, []byte{0, 1, 0, 0, 0, 9}), false, syncerr.InvalidRequest},
		{"bytes after END", append(rawMsg(1, KindRequest, reqHdrV1, pullHdr3), 0), false, syncerr.InvalidRequest},
		{"overlong frame length", cat(appendHeader(nil, 1, KindRequest), []byte{1}, u32(1000), s("c")), false, syncerr.InvalidRequest},
		{"unknown frame first", rawMsg(1, KindRequest, frm(0x17, []byte{1}), reqHdrV1, pullHdr3), false, syncerr.InvalidRequest},
		{"unknown frame in place", rawMsg(1, KindRequest, reqHdrV1, frm(0x2a, []byte{1, 2, 3}), pullHdr3), true, ""},
		{"response frame in request", rawMsg(1, KindRequest, reqHdrV1, pullHdr3, subEnd), false, syncerr.InvalidRequest},
		{"request frame in response", rawMsg(1, KindResponse, respHdrV1, pullHdr3), false, syncerr.InvalidRequest},
		{"v1 header with logEpoch bytes", rawMsg(1, KindRequest, frm(FrameReqHeader, cat(s("c"), appendI32(nil, 1), []byte{1}, s("e"))), pullHdr3), false, syncerr.InvalidRequest},
		{"v2 header with logEpoch", rawMsg(2, KindRequest, frm(FrameReqHeader, cat(s("c"), appendI32(nil, 1), []byte{1}, s("e"))), pullHdr3), true, ""},
		{"v2 header with empty logEpoch", rawMsg(2, KindRequest, frm(FrameReqHeader, cat(s("c"), appendI32(nil, 1), []byte{1}, s(""))), pullHdr3), false, syncerr.InvalidRequest},
		{"v2 header missing logEpoch byte", rawMsg(2, KindRequest, reqHdrV1, pullHdr3), false, syncerr.InvalidRequest},
		{"opt presence byte 2", rawMsg(2, KindRequest, frm(FrameReqHeader, cat(s("c"), appendI32(nil, 1), []byte{2})), pullHdr3), false, syncerr.InvalidRequest},
		{"no push no pull", rawMsg(1, KindRequest, reqHdrV1), false, syncerr.InvalidRequest},
		{"push only", rawMsg(1, KindRequest, reqHdrV1, frm(FramePushCommit, cat(s("c1"), u32(1), s("notes"), s("r"), []byte{2, 0, 0}))), true, ""},
		{"delete keeps baseVersion", rawMsg(1, KindRequest, reqHdrV1, frm(FramePushCommit, cat(s("c1"), u32(1), s("notes"), s("r"), []byte{2, 1}, i64(3), []byte{0}))), true, ""},
		{"empty commit", rawMsg(1, KindRequest, reqHdrV1, frm(FramePushCommit, cat(s("c1"), u32(0)))), false, syncerr.EmptyCommit},
		{"empty clientCommitId", rawMsg(1, KindRequest, reqHdrV1, frm(FramePushCommit, cat(s(""), u32(1), s("notes"), s("r"), []byte{2, 0, 0}))), false, syncerr.InvalidRequest},
		{"delete with payload", rawMsg(1, KindRequest, reqHdrV1, frm(FramePushCommit, cat(s("c1"), u32(1), s("notes"), s("r"), []byte{2, 0, 1}, appendBytes(nil, []byte{0})))), false, syncerr.InvalidRequest},
		{"pull before push", rawMsg(1, KindRequest, reqHdrV1, pullHdr3, frm(FramePushCommit, cat(s("c1"), u32(1), s("notes"), s("r"), []byte{2, 0, 0}))), false, syncerr.InvalidRequest},
		{"two pull headers", rawMsg(1, KindRequest, reqHdrV1, pullHdr3, pullHdr3), false, syncerr.InvalidRequest},
		{"trailing bytes in frame", rawMsg(1, KindRequest, reqHdrV1, frm(FramePullHeader, cat(appendI32(nil, 0), appendI32(nil, 0), appendI32(nil, 0), []byte{3, 0}))), false, syncerr.InvalidRequest},
		{"bad params json", rawMsg(1, KindRequest, reqHdrV1, pullHdr3, frm(FrameSubscription, cat(s("sub"), s("notes"), u32(0), []byte{1}, s("{nope"), i64(1), []byte{0}))), false, syncerr.InvalidRequest},
		{"scalar params json", rawMsg(1, KindRequest, reqHdrV1, pullHdr3, frm(FrameSubscription, cat(s("sub"), s("notes"), u32(0), []byte{1}, s(" 7"), i64(1), []byte{0}))), true, ""},
		// responses
		{"commit ok", rawMsg(1, KindResponse, respHdrV1, subStart, frm(FrameCommit, okUpsert), subEnd), true, ""},
		{"tableIndex out of range", rawMsg(1, KindResponse, respHdrV1, subStart, frm(FrameCommit, commitPayload(1, 1, cat([]byte{1}, i64(1)), cat([]byte{1}, appendBytes(nil, []byte{0})))), subEnd), false, syncerr.InvalidRequest},
		{"delete with rowVersion", rawMsg(1, KindResponse, respHdrV1, subStart, frm(FrameCommit, commitPayload(0, 2, cat([]byte{1}, i64(1)), []byte{0})), subEnd), false, syncerr.InvalidRequest},
		{"upsert without row", rawMsg(1, KindResponse, respHdrV1, subStart, frm(FrameCommit, commitPayload(0, 1, cat([]byte{1}, i64(1)), []byte{0})), subEnd), false, syncerr.InvalidRequest},
		{"rejected with commitSeq", rawMsg(1, KindResponse, respHdrV1, frm(FramePushResult, cat(s("c1"), []byte{3, 1}, i64(5), u32(0)))), false, syncerr.InvalidRequest},
		{"applied without commitSeq", rawMsg(1, KindResponse, respHdrV1, frm(FramePushResult, cat(s("c1"), []byte{1, 0}, u32(0)))), false, syncerr.InvalidRequest},
		{"section not closed", rawMsg(1, KindResponse, respHdrV1, subStart), false, syncerr.InvalidRequest},
		{"ERROR cuts section", rawMsg(1, KindResponse, respHdrV1, subStart, frm(FrameError, cat(s("sync.missing_scopes"), s("m"), s("internal"), []byte{0}, s("inspectServer"), []byte{0}))), true, ""},
		{"frame after ERROR", rawMsg(1, KindResponse, respHdrV1, frm(FrameError, cat(s("c"), s("m"), s("x"), []byte{0}, s("y"), []byte{0})), subStart, subEnd), false, syncerr.InvalidRequest},
		{"unknown after ERROR", rawMsg(1, KindResponse, respHdrV1, frm(FrameError, cat(s("c"), s("m"), s("x"), []byte{0}, s("y"), []byte{0})), frm(0x17, nil)), false, syncerr.InvalidRequest},
		{"lease after header", rawMsg(1, KindResponse, respHdrV1, frm(FrameLease, cat(s("l1"), i64(9))), subStart, subEnd), true, ""},
		{"lease twice", rawMsg(1, KindResponse, respHdrV1, frm(FrameLease, cat(s("l1"), i64(9))), frm(FrameLease, cat(s("l1"), i64(9)))), false, syncerr.InvalidRequest},
		{"lease after section", rawMsg(1, KindResponse, respHdrV1, subStart, subEnd, frm(FrameLease, cat(s("l1"), i64(9)))), false, syncerr.InvalidRequest},
		{"push result after section", rawMsg(1, KindResponse, respHdrV1, subStart, subEnd, frm(FramePushResult, cat(s("c1"), []byte{1, 1}, i64(5), u32(0)))), false, syncerr.InvalidRequest},
		{"details after rejected", rawMsg(1, KindResponse, respHdrV1, frm(FramePushResult, cat(s("c1"), []byte{3, 0}, u32(0))), frm(FramePushResultDetails, cat(s("c1"), u32(1), appendI32(nil, 0), s(`{"reason":"too-long"}`)))), true, ""},
		{"details after applied", rawMsg(1, KindResponse, respHdrV1, frm(FramePushResult, cat(s("c1"), []byte{1, 1}, i64(5), u32(0))), frm(FramePushResultDetails, cat(s("c1"), u32(1), appendI32(nil, 0), s(`{"reason":"x"}`)))), false, syncerr.InvalidRequest},
		{"details bad member", rawMsg(1, KindResponse, respHdrV1, frm(FramePushResult, cat(s("c1"), []byte{3, 0}, u32(0))), frm(FramePushResultDetails, cat(s("c1"), u32(1), appendI32(nil, 0), s(`{"other":"x"}`)))), false, syncerr.InvalidRequest},
		{"details bad token", rawMsg(1, KindResponse, respHdrV1, frm(FramePushResult, cat(s("c1"), []byte{3, 0}, u32(0))), frm(FramePushResultDetails, cat(s("c1"), u32(1), appendI32(nil, 0), s(`{"reason":"Bad Token"}`)))), false, syncerr.InvalidRequest},
		{"details duplicate opIndex", rawMsg(1, KindResponse, respHdrV1, frm(FramePushResult, cat(s("c1"), []byte{3, 0}, u32(0))), frm(FramePushResultDetails, cat(s("c1"), u32(2), appendI32(nil, 0), s(`{"reason":"a"}`), appendI32(nil, 0), s(`{"reason":"b"}`)))), false, syncerr.InvalidRequest},
		{"details zero entries", rawMsg(1, KindResponse, respHdrV1, frm(FramePushResult, cat(s("c1"), []byte{3, 0}, u32(0))), frm(FramePushResultDetails, cat(s("c1"), u32(0)))), false, syncerr.InvalidRequest},
		{"url without expiry", rawMsg(1, KindResponse, respHdrV1, subStart, frm(FrameSegmentRef, cat(s("sha256:x"), []byte{2}, s("notes"), i64(1), i64(1), i64(1), s("d"), []byte{0, 0, 1}, s("https://x"), []byte{0})), subEnd), false, syncerr.InvalidRequest},
		{"expiry without url", rawMsg(1, KindResponse, respHdrV1, subStart, frm(FrameSegmentRef, cat(s("sha256:x"), []byte{2}, s("notes"), i64(1), i64(1), i64(1), s("d"), []byte{0, 0, 0, 1}, i64(5))), subEnd), false, syncerr.InvalidRequest},
		{"bad inline segment", rawMsg(1, KindResponse, respHdrV1, subStart, frm(FrameSegmentInline, []byte("SSG2\x01\x00\x00\x00")), subEnd), false, syncerr.InvalidRequest},
		{"commit and segment mixed", rawMsg(1, KindResponse, respHdrV1, subStart, frm(FrameCommit, okUpsert), frm(FrameSegmentRef, cat(s("sha256:x"), []byte{1}, s("notes"), i64(1), i64(1), i64(1), s("d"), []byte{0, 0, 0, 0})), subEnd), false, syncerr.InvalidRequest},
		{"commit outside section", rawMsg(1, KindResponse, respHdrV1, frm(FrameCommit, okUpsert)), false, syncerr.InvalidRequest},
		{"v2 resp header empty epoch", rawMsg(2, KindResponse, frm(FrameRespHeader, cat([]byte{0, 0}, s(""), []byte{0}))), false, syncerr.InvalidRequest},
		{"msgKind 3", cat([]byte("SSP2\x01\x00\x03\x00"), []byte{0, 0, 0, 0, 0}), false, syncerr.InvalidRequest},
		{"short header", []byte("SSP2\x01"), false, syncerr.InvalidRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.ok {
				mustDecodeOK(t, c.in)
				return
			}
			_, err := Decode(c.in)
			wantCode(t, err, string(c.code))
		})
	}
}

func TestUnknownFramePreservedInPlace(t *testing.T) {
	in := rawMsg(1, KindResponse, respHdrV1, subStart, frm(0x17, []byte{9, 8, 7}), subEnd, frm(0x2f, nil))
	m := mustDecodeOK(t, in)
	u, ok := m.Frames[2].(*UnknownFrame)
	if !ok || u.Type != 0x17 || !bytes.Equal(u.Payload, []byte{9, 8, 7}) {
		t.Fatalf("frame 2 = %#v", m.Frames[2])
	}
	if u2, ok := m.Frames[4].(*UnknownFrame); !ok || u2.Type != 0x2f || len(u2.Payload) != 0 {
		t.Fatalf("frame 4 = %#v", m.Frames[4])
	}
	r, err := RenderJSON(m)
	if err != nil || !strings.Contains(string(r), `{"type":"UNKNOWN","frameType":23,"payload":"CQgH"}`) {
		t.Fatalf("rendering %s (%v)", r, err)
	}
	// Registered types may not travel as UnknownFrame.
	m.Frames[2] = &UnknownFrame{Type: FrameCommit, Payload: []byte{1}}
	if _, err := Encode(m); err == nil {
		t.Fatal("Encode accepted an unknown frame under a registered type")
	}
	enc := NewEncoder(&bytes.Buffer{}, 1, KindResponse)
	if err := enc.WriteFrame(&RespHeader{}); err != nil {
		t.Fatal(err)
	}
	if err := enc.WriteFrame(&UnknownFrame{Type: FrameEnd}); err == nil {
		t.Fatal("Encoder accepted an unknown frame typed END")
	}
}

func TestEncoderRefusals(t *testing.T) {
	var buf bytes.Buffer
	enc := NewEncoder(&buf, 1, KindRequest)
	if err := enc.WriteFrame(&SubEnd{}); err == nil {
		t.Fatal("request encoder accepted a response frame")
	}
	enc = NewEncoder(&buf, 1, KindRequest)
	if err := enc.WriteFrame(&ReqHeader{ClientID: "c", SchemaVersion: 1}); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err == nil {
		t.Fatal("Close accepted a request with neither push nor pull")
	}
	enc = NewEncoder(&buf, 1, KindResponse)
	for _, f := range []Frame{&RespHeader{}, &SubStart{ID: "s", Status: SubActive}} {
		if err := enc.WriteFrame(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := enc.Close(); err == nil {
		t.Fatal("Close accepted an open section")
	}
	// ERROR may cut the section.
	buf.Reset()
	enc = NewEncoder(&buf, 1, KindResponse)
	for _, f := range []Frame{&RespHeader{}, &SubStart{ID: "s", Status: SubActive}, &ErrorFrame{Code: "sync.internal_error"}} {
		if err := enc.WriteFrame(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeResponse(buf.Bytes()); err != nil {
		t.Fatalf("encoder output does not decode: %v", err)
	}
	// Field validation.
	bad := []*Message{
		{WireVersion: 1, Kind: KindResponse, Frames: []Frame{&RespHeader{}, &SubStart{ID: "s", Status: SubActive}, &SubEnd{NextCursor: MaxSafeInt + 1}}},
		{WireVersion: 1, Kind: KindRequest, Frames: []Frame{&ReqHeader{ClientID: "c", SchemaVersion: 1, LogEpoch: new(string)}, &PullHeader{Accept: 3}}},
		{WireVersion: 1, Kind: KindRequest, Frames: []Frame{&ReqHeader{ClientID: "\xff", SchemaVersion: 1}, &PullHeader{Accept: 3}}},
		{WireVersion: 1, Kind: KindRequest, Frames: []Frame{&ReqHeader{ClientID: "c", SchemaVersion: 1}, &PullHeader{Accept: 0x80}}},
		{WireVersion: 1, Kind: KindResponse, Frames: []Frame{&RespHeader{}, &PushResult{ClientCommitID: "c", Status: CommitApplied}}},
		{WireVersion: 1, Kind: KindRequest, Frames: []Frame{&ReqHeader{ClientID: "c", SchemaVersion: 1}, &PushCommit{ClientCommitID: "x"}}},
		{WireVersion: 4, Kind: KindRequest, Frames: []Frame{&ReqHeader{ClientID: "c", SchemaVersion: 1}, &PullHeader{Accept: 3}}},
	}
	for i, m := range bad {
		if _, err := Encode(m); err == nil {
			t.Errorf("bad message %d encoded", i)
		}
	}
}

func TestEncodeSortsKeysUTF16(t *testing.T) {
	astral, bmp := "\U0001F600", "\uFF5E"
	if CompareUTF16(astral, bmp) >= 0 || CompareUTF16(bmp, astral) <= 0 {
		t.Fatal("CompareUTF16 must order surrogates (D83D) before U+FF5E")
	}
	if strings.Compare(astral, bmp) <= 0 {
		t.Fatal("test premise: byte order is the opposite")
	}
	for _, c := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"a", "", 1}, {"", "a", -1}, {"ab", "abc", -1}, {"é", "e", 1}, {"\U00010000", "\U00010001", -1}, {"x\U0010FFFF", "x\uE000", -1}, {"same", "same", 0}} {
		if got := CompareUTF16(c.a, c.b); got != c.want {
			t.Errorf("CompareUTF16(%q,%q)=%d want %d", c.a, c.b, got, c.want)
		}
	}
	m := &Message{WireVersion: 1, Kind: KindRequest, Frames: []Frame{
		&ReqHeader{ClientID: "c", SchemaVersion: 1}, &PullHeader{Accept: 3},
		&Subscription{ID: "s", Table: "t", Scopes: map[string][]string{bmp: {"1"}, astral: {"2"}, "a": {}}},
	}}
	b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	ia, ib, ic := bytes.Index(b, []byte("a")), bytes.Index(b, []byte(astral)), bytes.Index(b, []byte(bmp))
	if !(ia < ib && ib < ic) {
		t.Fatalf("keys not in UTF-16 order: a@%d astral@%d bmp@%d", ia, ib, ic)
	}
	mustDecodeOK(t, b)
}

func TestRowCodecRules(t *testing.T) {
	cols := []Column{{Name: "id", Type: TypeString}, {Name: "n", Type: TypeInteger, Nullable: true}, {Name: "ref", Type: TypeBlobRef, Nullable: true}}
	c := NewRowCodec(cols)
	hash := strings.Repeat("ab", 32)
	good := `{"blobId":"sha256:` + hash + `","byteLength":12,"mediaType":"image/png","name":"a \"b\".png"}`
	b, err := c.Append(nil, Row{"r1", int64(-5), good})
	if err != nil {
		t.Fatal(err)
	}
	row, err := c.Decode(b)
	if err != nil || row[0] != "r1" || row[1] != int64(-5) || row[2] != good {
		t.Fatalf("decode %v %v", row, err)
	}
	if err := c.Validate(b); err != nil {
		t.Fatal(err)
	}
	// padding bit 7 set (3 columns).
	p := append([]byte{}, b...)
	p[0] |= 0x80
	_, err = c.Decode(p)
	wantCode(t, err, "sync.invalid_request")
	wantCode(t, c.Validate(p), "sync.invalid_request")
	// null on non-nullable
	_, err = c.Decode(cat([]byte{1}, i64(1), []byte{}))
	wantCode(t, err, "sync.invalid_request")
	// trailing byte
	_, err = c.Decode(append(append([]byte{}, b...), 0))
	wantCode(t, err, "sync.invalid_request")
	// NULLs
	b2, err := c.Append(nil, Row{"x", nil, nil})
	if err != nil || b2[0] != 0x06 {
		t.Fatalf("null bitmap %x %v", b2, err)
	}
	badRefs := []string{
		`{"blobId":"sha256:` + hash + `"}`,
		`{"blobId":"sha256:` + strings.ToUpper(hash) + `","byteLength":1}`,
		`{"byteLength":1,"blobId":"sha256:` + hash + `"}`,
		`{"blobId": "sha256:` + hash + `","byteLength":1}`,
		`{"blobId":"sha256:` + hash + `","byteLength":-1}`,
		`{"blobId":"sha256:` + hash + `","byteLength":01}`,
		`{"blobId":"sha256:` + hash + `","byteLength":1.5}`,
		`{"blobId":"sha256:` + hash + `","byteLength":1,"name":"x","mediaType":"y"}`,
		`{"blobId":"sha256:` + hash + `","byteLength":1,"extra":"x"}`,
		`{"blobId":"sha256:` + hash + `","byteLength":1,"name":"\u0041"}`,
	}
	for _, r := range badRefs {
		if _, err := c.Append(nil, Row{"x", nil, r}); err == nil {
			t.Errorf("Append accepted blob_ref %s", r)
		}
		raw := cat([]byte{2}, s("x"), s(r))
		_, err := c.Decode(raw)
		wantCode(t, err, "sync.invalid_request")
	}
	okRefs := []string{`{"blobId":"sha256:` + hash + `","byteLength":0}`, `{"blobId":"sha256:` + hash + `","byteLength":5,"name":"n"}`}
	for _, r := range okRefs {
		if _, err := c.Decode(cat([]byte{2}, s("x"), s(r))); err != nil {
			t.Errorf("rejected blob_ref %s: %v", r, err)
		}
	}
	// Go type checks.
	for _, r := range []Row{{1, nil, nil}, {"x", 5, nil}, {"x", int64(MaxSafeInt + 1), nil}, {nil, nil, nil}, {"x", nil}} {
		if _, err := c.Append(nil, r); err == nil {
			t.Errorf("Append accepted %#v", r)
		}
	}
	jc := NewRowCodec([]Column{{Name: "j", Type: TypeJSON}, {Name: "f", Type: TypeFloat}, {Name: "b", Type: TypeBoolean}, {Name: "by", Type: TypeBytes}, {Name: "c", Type: TypeCRDT}})
	jb, err := jc.Append(nil, Row{json.RawMessage(`{ "a" : 1 }`), 1.5, true, []byte{}, []byte{1}})
	if err != nil || !bytes.Contains(jb, []byte(`{ "a" : 1 }`)) {
		t.Fatalf("json not verbatim: %v", err)
	}
	if _, err := jc.Append(nil, Row{json.RawMessage(`{bad`), 1.5, true, []byte{}, []byte{1}}); err == nil {
		t.Fatal("Append accepted invalid JSON")
	}
	bad := append([]byte{}, jb...)
	bad[len(bad)-1-4-4-1] = 2 // bool byte
	if _, err := jc.Decode(bad); err == nil {
		t.Fatal("bool byte 2 accepted")
	}
}

func TestSegmentBuilder(t *testing.T) {
	cols := []Column{{Name: "id", Type: TypeString}, {Name: "v", Type: TypeInteger, Nullable: true}}
	sb := NewSegmentBuilder("t", 2, cols)
	codec := NewRowCodec(cols)
	for i := 0; i < 2500; i++ {
		if i%2 == 0 {
			if err := sb.AddRow(int64(i+1), Row{"r", int64(i)}); err != nil {
				t.Fatal(err)
			}
		} else {
			rb, err := codec.Append(nil, Row{"r", nil})
			if err != nil {
				t.Fatal(err)
			}
			sb.AddEncodedRow(int64(i+1), rb)
		}
	}
	if err := sb.AddRow(0, Row{"r", nil}); err == nil {
		t.Fatal("serverVersion 0 accepted")
	}
	if err := sb.AddRow(1, Row{nil, nil}); err == nil {
		t.Fatal("NULL in non-nullable accepted")
	}
	if sb.Rows() != 2500 {
		t.Fatalf("Rows = %d", sb.Rows())
	}
	seg, err := DecodeSegment(sb.Finish())
	if err != nil {
		t.Fatal(err)
	}
	if len(seg.Blocks) != 3 || len(seg.Blocks[0]) != 1000 || len(seg.Blocks[2]) != 500 || seg.SchemaVersion != 2 || seg.Table != "t" {
		t.Fatalf("blocks %d", len(seg.Blocks))
	}
	if seg.Blocks[2][499].ServerVersion != 2500 || seg.Blocks[0][0].Values[1] != int64(0) || seg.Blocks[0][1].Values[1] != nil {
		t.Fatal("row contents wrong")
	}
	empty := NewSegmentBuilder("t", 1, cols).Finish()
	es, err := DecodeSegment(empty)
	if err != nil || len(es.Blocks) != 0 || !bytes.HasSuffix(empty, []byte{0, 0, 0, 0}) {
		t.Fatalf("empty segment: %v", err)
	}
	// serverVersion 0 and truncated / trailing segments.
	zero := cat(empty[:len(empty)-4], u32(1), u32(8+1+4+1), i64(0), []byte{0}, s("r"), u32(0))
	_, err = DecodeSegment(zero)
	wantCode(t, err, "sync.invalid_request")
	one := cat(empty[:len(empty)-4], u32(1), u32(8+1+4+1), i64(1), []byte{2}, s("r"), u32(0))
	if _, err := DecodeSegment(one); err != nil {
		t.Fatal(err)
	}
	_, err = DecodeSegment(append(append([]byte{}, one...), 0))
	wantCode(t, err, "sync.invalid_request")
	mismatch := cat(empty[:len(empty)-4], u32(1), u32(8+1+4+2), i64(1), []byte{2}, s("r"), []byte{0}, u32(0))
	_, err = DecodeSegment(mismatch)
	wantCode(t, err, "sync.invalid_request")
}

func TestDigestClampReadRequest(t *testing.T) {
	if got := ScopeDigest(map[string][]string{"project": {"p1"}}); got != "5a993aa4d503af6f5dc77acc12ad399ff2e9d933c393f4de6af5f6aef4fa2977" {
		t.Fatalf("digest %s", got)
	}
	if got := string(CanonicalScopesJSON(map[string][]string{"b": {"y", "x", "y"}, "a": {}})); got != `{"a":[],"b":["x","y"]}` {
		t.Fatalf("canonical %s", got)
	}
	if ScopeDigest(map[string][]string{"project": {"p1", "p1"}}) != ScopeDigest(map[string][]string{"project": {"p1"}}) {
		t.Fatal("dedupe not applied")
	}
	p := PullHeader{LimitCommits: 0, LimitSnapshotRows: 999999, MaxSnapshotPages: -3, Accept: 7}.Clamped()
	if p != (PullHeader{LimitCommits: 1000, LimitSnapshotRows: 50000, MaxSnapshotPages: 1, Accept: 7}) {
		t.Fatalf("clamped %+v", p)
	}
	p = PullHeader{LimitCommits: 20, LimitSnapshotRows: 0, MaxSnapshotPages: 0}.Clamped()
	if p.LimitCommits != 20 || p.LimitSnapshotRows != 1000 || p.MaxSnapshotPages != 4 {
		t.Fatalf("clamped %+v", p)
	}
	body := rawMsg(1, KindRequest, reqHdrV1, pullHdr3, subFrame(cat(u32(0)), i64(1)))
	m, err := ReadRequest(bytes.NewReader(body), int64(len(body)))
	if err != nil {
		t.Fatal(err)
	}
	req, err := m.Request()
	if err != nil || req.Pull == nil || len(req.Subscriptions) != 1 || req.Header.ClientID != "client-a" || len(req.Commits) != 0 {
		t.Fatalf("request view %+v %v", req, err)
	}
	_, err = ReadRequest(bytes.NewReader(body), int64(len(body)-1))
	if !errors.Is(err, ErrTooLarge) || syncerr.CodeOf(err) != syncerr.InvalidRequest || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("too large: %v", err)
	}
	if _, err := (&Message{Kind: KindResponse}).Request(); err == nil {
		t.Fatal("Request() on a response")
	}
}
