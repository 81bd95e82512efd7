package ssp2

import "testing"

func TestFrameReqHeader(t *testing.T) {
	epoch := "ep-1"
	checkFrame(t, "REQ_HEADER",
		frameCase{name: "v2 acquiring an epoch", frames: []Frame{&ReqHeader{ClientID: "client-1", SchemaVersion: 3}, exPull},
			payload: cat(s("client-1"), i32(3), []byte{0}),
			json:    `{"type":"REQ_HEADER","clientId":"client-1","schemaVersion":3}`},
		frameCase{name: "v2 with epoch", frames: []Frame{&ReqHeader{ClientID: "client-1", SchemaVersion: 3, LogEpoch: &epoch}, exPull},
			payload: cat(s("client-1"), i32(3), []byte{1}, s("ep-1")),
			json:    `{"type":"REQ_HEADER","clientId":"client-1","schemaVersion":3,"logEpoch":"ep-1"}`},
		frameCase{name: "v3 with epoch (the v2 layout)", version: WireV3, frames: []Frame{&ReqHeader{ClientID: "client-1", SchemaVersion: 3, LogEpoch: &epoch}, exPull},
			payload: cat(s("client-1"), i32(3), []byte{1}, s("ep-1")),
			json:    `{"type":"REQ_HEADER","clientId":"client-1","schemaVersion":3,"logEpoch":"ep-1"}`},
		frameCase{name: "v3 acquiring an epoch", version: WireV3, frames: []Frame{&ReqHeader{ClientID: "client-1", SchemaVersion: 3}, exPull},
			payload: cat(s("client-1"), i32(3), []byte{0}),
			json:    `{"type":"REQ_HEADER","clientId":"client-1","schemaVersion":3}`},
		frameCase{name: "v1", version: WireV1, frames: []Frame{&ReqHeader{ClientID: "client-1", SchemaVersion: 3}, exPull},
			payload: cat(s("client-1"), i32(3)),
			json:    `{"type":"REQ_HEADER","clientId":"client-1","schemaVersion":3}`},
	)
	empty := ""
	checkRefusals(t,
		frameRefusal{name: "empty clientId", kind: KindRequest, frames: []Frame{&ReqHeader{SchemaVersion: 1}, exPull}, want: "REQ_HEADER.clientId must be non-empty"},
		frameRefusal{name: "schemaVersion 0", kind: KindRequest, frames: []Frame{&ReqHeader{ClientID: "c"}, exPull}, want: "REQ_HEADER.schemaVersion 0 < 1"},
		frameRefusal{name: "empty epoch", kind: KindRequest, frames: []Frame{&ReqHeader{ClientID: "c", SchemaVersion: 1, LogEpoch: &empty}, exPull}, want: "logEpoch must be non-empty when present"},
		frameRefusal{name: "epoch in v1", version: WireV1, kind: KindRequest, frames: []Frame{&ReqHeader{ClientID: "c", SchemaVersion: 1, LogEpoch: &epoch}, exPull}, want: "not representable in wire v1"},
		frameRefusal{name: "twice", kind: KindRequest, frames: []Frame{exReqHeader, exReqHeader, exPull}, want: "REQ_HEADER out of grammar order"},
		frameRefusal{name: "missing", kind: KindRequest, frames: []Frame{exPull}, want: "PULL_HEADER before REQ_HEADER"},
		frameRefusal{name: "in a response", kind: KindResponse, frames: []Frame{exRespHeader, exReqHeader}, want: "REQ_HEADER frame in a response"},
	)
}
