package ssp2

import (
	"encoding/json"
	"testing"
)

func TestFrameError(t *testing.T) {
	checkFrame(t, "ERROR",
		frameCase{name: "cutting a section", at: 2, frames: []Frame{exRespHeader, exSubStart, &ErrorFrame{Code: "sync.internal", Message: "boom", Category: "internal",
			Retryable: true, RecommendedAction: "retry", Details: json.RawMessage(`{"id":"x"}`)}},
			payload: cat(s("sync.internal"), s("boom"), s("internal"), []byte{1}, s("retry"), []byte{1}, s(`{"id":"x"}`)),
			json:    `{"type":"ERROR","code":"sync.internal","message":"boom","category":"internal","retryable":true,"recommendedAction":"retry","details":{"id":"x"}}`},
	)
	checkRefusals(t,
		frameRefusal{name: "a frame after it", kind: KindResponse, frames: []Frame{exRespHeader, &ErrorFrame{}, &Lease{LeaseID: "l"}}, want: "LEASE after ERROR (only END may follow)"},
		frameRefusal{name: "an unknown frame after it", kind: KindResponse, frames: []Frame{exRespHeader, &ErrorFrame{}, &UnknownFrame{Type: 0x2a}}, want: "frame type 0x2a after ERROR"},
		frameRefusal{name: "details not JSON", kind: KindResponse, frames: []Frame{exRespHeader, &ErrorFrame{Details: json.RawMessage("{")}}, want: "details: not a JSON document"},
		frameRefusal{name: "invalid UTF-8", kind: KindResponse, frames: []Frame{exRespHeader, &ErrorFrame{Code: "\xff"}}, want: "ERROR field: invalid UTF-8"},
	)
}
