package ssp2

import "testing"

func TestFrameRespHeader(t *testing.T) {
	required, latest := int32(2), int32(5)
	checkFrame(t, "RESP_HEADER",
		frameCase{name: "v2", frames: []Frame{&RespHeader{RequiredSchemaVersion: &required, LatestSchemaVersion: &latest, LogEpoch: "ep-1", ResetRequired: true}},
			payload: cat([]byte{1}, i32(2), []byte{1}, i32(5), s("ep-1"), []byte{1}),
			json:    `{"type":"RESP_HEADER","requiredSchemaVersion":2,"latestSchemaVersion":5,"logEpoch":"ep-1","resetRequired":true}`},
		frameCase{name: "v3 (the v2 layout)", version: WireV3, frames: []Frame{&RespHeader{LogEpoch: "epoch-2026-07-02-a"}},
			payload: cat([]byte{0, 0}, s("epoch-2026-07-02-a"), []byte{0}),
			json:    `{"type":"RESP_HEADER","logEpoch":"epoch-2026-07-02-a","resetRequired":false}`},
		frameCase{name: "v1", version: WireV1, frames: []Frame{&RespHeader{}},
			payload: []byte{0, 0},
			json:    `{"type":"RESP_HEADER"}`},
	)
	checkRefusals(t,
		frameRefusal{name: "v2 without epoch", kind: KindResponse, frames: []Frame{&RespHeader{}}, want: "RESP_HEADER.logEpoch must be non-empty in wire v2"},
		frameRefusal{name: "v3 without epoch", version: WireV3, kind: KindResponse, frames: []Frame{&RespHeader{}}, want: "RESP_HEADER.logEpoch must be non-empty in wire v3"},
		frameRefusal{name: "epoch in v1", version: WireV1, kind: KindResponse, frames: []Frame{&RespHeader{LogEpoch: "e"}}, want: "not representable in wire v1"},
		frameRefusal{name: "twice", kind: KindResponse, frames: []Frame{exRespHeader, exRespHeader}, want: "second RESP_HEADER"},
		frameRefusal{name: "missing", kind: KindResponse, frames: []Frame{&Lease{LeaseID: "l"}}, want: "LEASE before RESP_HEADER"},
	)
}
