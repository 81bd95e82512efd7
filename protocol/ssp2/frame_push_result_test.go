package ssp2

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/syncerr"
)

func TestFramePushResult(t *testing.T) {
	seq, badSeq := int64(7), int64(8)
	checkFrame(t, "PUSH_RESULT",
		frameCase{name: "applied", at: 1, frames: []Frame{exRespHeader, &PushResult{ClientCommitID: "cc-1", Status: CommitApplied, CommitSeq: &seq,
			Results: []OpResult{{OpIndex: 0, Status: OpApplied}}}},
			payload: cat(s("cc-1"), []byte{1, 1}, i64(7), u32(1), i32(0), []byte{1}),
			json:    `{"type":"PUSH_RESULT","clientCommitId":"cc-1","status":"applied","commitSeq":7,"results":[{"opIndex":0,"status":"applied"}]}`},
		frameCase{name: "rejected", at: 1, frames: []Frame{exRespHeader, &PushResult{ClientCommitID: "cc-2", Status: CommitRejected, Results: []OpResult{
			{OpIndex: 0, Status: OpConflict, Code: "sync.conflict", Message: "m", ServerVersion: 4, ServerRow: []byte{1, 2}},
			{OpIndex: 1, Status: OpError, Code: "x.y", Message: "n", Retryable: true},
		}}},
			payload: cat(s("cc-2"), []byte{3, 0}, u32(2),
				i32(0), []byte{2}, s("sync.conflict"), s("m"), i64(4), appendBytes(nil, []byte{1, 2}),
				i32(1), []byte{3}, s("x.y"), s("n"), []byte{1}),
			json: `{"type":"PUSH_RESULT","clientCommitId":"cc-2","status":"rejected","results":[` +
				`{"opIndex":0,"status":"conflict","code":"sync.conflict","message":"m","serverVersion":4,"serverRow":"AQI="},` +
				`{"opIndex":1,"status":"error","code":"x.y","message":"n","retryable":true}]}`},
		// Wire v3 appends conflictColumns (bytes) to the conflict arm.
		frameCase{name: "v3 conflict", version: WireV3, at: 1, frames: []Frame{exRespHeader, &PushResult{ClientCommitID: "c-0002", Status: CommitRejected, Results: []OpResult{
			{OpIndex: 0, Status: OpConflict, Code: "sync.version_conflict", Message: "m", ServerVersion: 7, ServerRow: []byte{1, 2}, ConflictColumns: ColumnSet{0x02}},
		}}},
			payload: cat(s("c-0002"), []byte{3, 0}, u32(1),
				i32(0), []byte{2}, s("sync.version_conflict"), s("m"), i64(7), appendBytes(nil, []byte{1, 2}), appendBytes(nil, []byte{0x02})),
			json: `{"type":"PUSH_RESULT","clientCommitId":"c-0002","status":"rejected","results":[` +
				`{"opIndex":0,"status":"conflict","code":"sync.version_conflict","message":"m","serverVersion":7,"serverRow":"AQI=","conflictColumns":"Ag=="}]}`},
		frameCase{name: "v3 conflict of a 9-column table, no column marked", version: WireV3, at: 1, frames: []Frame{exRespHeader, &PushResult{ClientCommitID: "c", Status: CommitRejected, Results: []OpResult{
			{OpIndex: 2, Status: OpConflict, Code: "sync.version_conflict", Message: "", ServerVersion: 1, ServerRow: []byte{}, ConflictColumns: ColumnSet{0, 0}},
		}}},
			payload: cat(s("c"), []byte{3, 0}, u32(1),
				i32(2), []byte{2}, s("sync.version_conflict"), s(""), i64(1), u32(0), u32(2), []byte{0, 0}),
			json: `{"type":"PUSH_RESULT","clientCommitId":"c","status":"rejected","results":[` +
				`{"opIndex":2,"status":"conflict","code":"sync.version_conflict","message":"","serverVersion":1,"serverRow":"","conflictColumns":"AAA="}]}`},
		frameCase{name: "v3 applied and error arms unchanged", version: WireV3, at: 1, frames: []Frame{exRespHeader, &PushResult{ClientCommitID: "cc-3", Status: CommitRejected, Results: []OpResult{
			{OpIndex: 1, Status: OpError, Code: "sync.row_deleted", Message: "n", Retryable: false},
		}}},
			payload: cat(s("cc-3"), []byte{3, 0}, u32(1), i32(1), []byte{3}, s("sync.row_deleted"), s("n"), []byte{0}),
			json:    `{"type":"PUSH_RESULT","clientCommitId":"cc-3","status":"rejected","results":[{"opIndex":1,"status":"error","code":"sync.row_deleted","message":"n","retryable":false}]}`},
	)
	checkRefusals(t,
		frameRefusal{name: "rejected with commitSeq", kind: KindResponse, frames: []Frame{exRespHeader, &PushResult{ClientCommitID: "c", Status: CommitRejected, CommitSeq: &badSeq}},
			want: "commitSeq must be present iff status is applied or cached"},
		frameRefusal{name: "unknown status", kind: KindResponse, frames: []Frame{exRespHeader, &PushResult{ClientCommitID: "c", Status: 9}}, want: "PUSH_RESULT status 9"},
		frameRefusal{name: "unknown op status", kind: KindResponse, frames: []Frame{exRespHeader, &PushResult{ClientCommitID: "c", Status: CommitApplied, CommitSeq: &seq,
			Results: []OpResult{{Status: 7}}}}, want: "op result status 7"},
		frameRefusal{name: "after a section", kind: KindResponse, frames: []Frame{exRespHeader, exSubStart, exSubEnd, &PushResult{ClientCommitID: "c", Status: CommitApplied, CommitSeq: &seq}},
			want: "PUSH_RESULT after a subscription section"},
	)
}

// TestPushResultConflictColumnsByVersion: conflictColumns exists at wire v3
// only. A v1 or v2 encoder leaves it out silently (the same bytes as a
// record without it) and the decoders of those versions leave it nil; the
// v3 decoder requires it, and the renderings carry it at v3 only.
func TestPushResultConflictColumnsByVersion(t *testing.T) {
	conflict := func(cols ColumnSet) *PushResult {
		return &PushResult{ClientCommitID: "c", Status: CommitRejected, Results: []OpResult{
			{OpIndex: 0, Status: OpConflict, Code: "sync.version_conflict", Message: "m", ServerVersion: 4, ServerRow: []byte{9}, ConflictColumns: cols}}}
	}
	record := cat(s("c"), []byte{3, 0}, u32(1), i32(0), []byte{2}, s("sync.version_conflict"), s("m"), i64(4), appendBytes(nil, []byte{9}))
	for _, v := range []uint16{WireV1, WireV2} {
		hdr := &RespHeader{}
		if v >= WireV2 {
			hdr.LogEpoch = "e"
		}
		with, err := Encode(&Message{WireVersion: v, Kind: KindResponse, Frames: []Frame{hdr, conflict(ColumnSet{0x06})}})
		if err != nil {
			t.Fatal(err)
		}
		without, err := Encode(&Message{WireVersion: v, Kind: KindResponse, Frames: []Frame{hdr, conflict(nil)}})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(with, without) || !bytes.Equal(framePayload(t, with, 1), record) {
			t.Fatalf("v%d: conflictColumns changes the bytes:\n with    %x\n without %x", v, with, without)
		}
		m, err := DecodeResponse(with)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Frames[1].(*PushResult).Results[0]; got.ConflictColumns != nil || !reflect.DeepEqual(got, conflict(nil).Results[0]) {
			t.Fatalf("v%d: decoded %#v", v, got)
		}
		r, err := RenderJSON(m)
		if err != nil || bytes.Contains(r, []byte("conflictColumns")) {
			t.Fatalf("v%d: rendering %s (%v)", v, r, err)
		}
		// A v1/v2 rendering carrying conflictColumns is refused, not
		// silently dropped.
		bad := bytes.Replace(r, []byte(`"serverRow":"CQ=="`), []byte(`"serverRow":"CQ==","conflictColumns":"Bg=="`), 1)
		if _, err := ParseJSON(bad); err == nil || !strings.Contains(err.Error(), "unexpected field(s) conflictColumns") {
			t.Fatalf("v%d: ParseJSON of a rendering with conflictColumns: %v", v, err)
		}
		// The v3 bytes of the record read at this version: trailing bytes.
		hb := framePayload(t, with, 0)
		v3rec := cat(record, appendBytes(nil, []byte{0x06}))
		_, err = DecodeResponse(rawMsg(v, KindResponse, frm(FrameRespHeader, hb), frm(FramePushResult, v3rec)))
		wantDecodeErr(t, err, "trailing bytes in PUSH_RESULT frame")
	}
	// At v3 the record without conflictColumns is truncated, and a
	// rendering without it is incomplete.
	hb := cat([]byte{0, 0}, s("e"), []byte{0})
	_, err := DecodeResponse(rawMsg(WireV3, KindResponse, frm(FrameRespHeader, hb), frm(FramePushResult, record)))
	wantDecodeErr(t, err, "truncated conflictColumns")
	_, err = DecodeResponse(rawMsg(WireV3, KindResponse, frm(FrameRespHeader, hb), frm(FramePushResult, cat(record, u32(3), []byte{1}))))
	wantDecodeErr(t, err, "conflictColumns: length 3 exceeds remaining 1 bytes")
	_, err = ParseJSON([]byte(`{"magic":"SSP2","wireVersion":3,"msgKind":"response","frames":[{"type":"RESP_HEADER","logEpoch":"e","resetRequired":false},` +
		`{"type":"PUSH_RESULT","clientCommitId":"c","status":"rejected","results":[{"opIndex":0,"status":"conflict","code":"x","message":"m","serverVersion":4,"serverRow":"CQ=="}]}]}`))
	if err == nil || !strings.Contains(err.Error(), `missing "conflictColumns"`) {
		t.Fatalf("v3 rendering without conflictColumns: %v", err)
	}
}

// wantDecodeErr checks err is sync.invalid_request wrapping a *DecodeError
// whose reason holds reason.
func wantDecodeErr(t *testing.T, err error, reason string) {
	t.Helper()
	var de *DecodeError
	if syncerr.CodeOf(err) != syncerr.InvalidRequest || !errors.As(err, &de) || !strings.Contains(de.Reason, reason) {
		t.Fatalf("error %v, want sync.invalid_request wrapping a *DecodeError with %q", err, reason)
	}
}
