package ssp2

import "testing"

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
