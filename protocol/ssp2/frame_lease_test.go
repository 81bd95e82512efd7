package ssp2

import "testing"

func TestFrameLease(t *testing.T) {
	checkFrame(t, "LEASE",
		frameCase{name: "after the header", at: 1, frames: []Frame{exRespHeader, &Lease{LeaseID: "lease-1", ExpiresAtMs: 1700000030000}},
			payload: cat(s("lease-1"), i64(1700000030000)),
			json:    `{"type":"LEASE","leaseId":"lease-1","expiresAtMs":1700000030000}`},
	)
	seq := int64(1)
	checkRefusals(t,
		frameRefusal{name: "empty id", kind: KindResponse, frames: []Frame{exRespHeader, &Lease{}}, want: "LEASE.leaseId must be non-empty"},
		frameRefusal{name: "after a push result", kind: KindResponse, frames: []Frame{exRespHeader, &PushResult{ClientCommitID: "c", Status: CommitApplied, CommitSeq: &seq}, &Lease{LeaseID: "l"}},
			want: "LEASE must come directly after RESP_HEADER, at most once"},
		frameRefusal{name: "twice", kind: KindResponse, frames: []Frame{exRespHeader, &Lease{LeaseID: "l"}, &Lease{LeaseID: "l"}},
			want: "LEASE must come directly after RESP_HEADER, at most once"},
	)
}
