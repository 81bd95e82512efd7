package ssp2

import "testing"

func TestFramePushResultDetails(t *testing.T) {
	rejected := &PushResult{ClientCommitID: "cc-2", Status: CommitRejected, Results: []OpResult{{OpIndex: 0, Status: OpError, Code: "c", Message: "m"}}}
	details := `{"reason":"too_long","fieldPaths":["title"]}`
	checkFrame(t, "PUSH_RESULT_DETAILS",
		frameCase{name: "after a rejected result", at: 2, frames: []Frame{exRespHeader, rejected,
			&PushResultDetails{ClientCommitID: "cc-2", Entries: []PushResultDetail{{OpIndex: 0, DetailsJSON: details}}}},
			payload: cat(s("cc-2"), u32(1), i32(0), s(details)),
			json:    `{"type":"PUSH_RESULT_DETAILS","clientCommitId":"cc-2","entries":[{"opIndex":0,"detailsJson":"{\"reason\":\"too_long\",\"fieldPaths\":[\"title\"]}"}]}`},
	)
	seq := int64(1)
	applied := &PushResult{ClientCommitID: "cc-1", Status: CommitApplied, CommitSeq: &seq}
	entry := []PushResultDetail{{OpIndex: 0, DetailsJSON: `{"reason":"r"}`}}
	checkRefusals(t,
		frameRefusal{name: "no entries", kind: KindResponse, frames: []Frame{exRespHeader, rejected, &PushResultDetails{ClientCommitID: "cc-2"}}, want: "needs at least one entry"},
		frameRefusal{name: "duplicate opIndex", kind: KindResponse, frames: []Frame{exRespHeader, rejected,
			&PushResultDetails{ClientCommitID: "cc-2", Entries: append(entry, entry...)}}, want: "duplicate opIndex 0"},
		frameRefusal{name: "unknown member", kind: KindResponse, frames: []Frame{exRespHeader, rejected,
			&PushResultDetails{ClientCommitID: "cc-2", Entries: []PushResultDetail{{DetailsJSON: `{"nope":1}`}}}}, want: "detailsJson: unknown member nope"},
		frameRefusal{name: "after an applied result", kind: KindResponse, frames: []Frame{exRespHeader, applied, &PushResultDetails{ClientCommitID: "cc-1", Entries: entry}},
			want: "PUSH_RESULT_DETAILS not directly after a rejected PUSH_RESULT"},
		frameRefusal{name: "twice", kind: KindResponse, frames: []Frame{exRespHeader, rejected,
			&PushResultDetails{ClientCommitID: "cc-2", Entries: entry}, &PushResultDetails{ClientCommitID: "cc-2", Entries: entry}},
			want: "PUSH_RESULT_DETAILS not directly after a rejected PUSH_RESULT"},
	)
}
