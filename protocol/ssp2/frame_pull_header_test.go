package ssp2

import "testing"

func TestFramePullHeader(t *testing.T) {
	checkFrame(t, "PULL_HEADER",
		frameCase{name: "limits and accept bits", at: 1, frames: []Frame{exReqHeader,
			&PullHeader{LimitCommits: 100, LimitSnapshotRows: 500, MaxSnapshotPages: 2, Accept: AcceptInlineRows | AcceptRefRows}},
			payload: cat(i32(100), i32(500), i32(2), []byte{3}),
			json:    `{"type":"PULL_HEADER","limitCommits":100,"limitSnapshotRows":500,"maxSnapshotPages":2,"accept":3}`},
	)
	checkRefusals(t,
		frameRefusal{name: "accept bit 4", kind: KindRequest, frames: []Frame{exReqHeader, &PullHeader{Accept: 0x10}}, want: "accept bits 4-7 must be zero"},
		frameRefusal{name: "twice", kind: KindRequest, frames: []Frame{exReqHeader, exPull, exPull}, want: "PULL_HEADER out of grammar order"},
	)
}
