package ssp2

import (
	"encoding/json"
	"testing"
)

func TestFrameSubEnd(t *testing.T) {
	checkFrame(t, "SUB_END",
		frameCase{name: "bootstrap to continue", at: 2, frames: []Frame{exRespHeader, exSubStart, &SubEnd{NextCursor: 99, BootstrapState: json.RawMessage(`{"page":3}`)}},
			payload: cat(i64(99), []byte{1}, s(`{"page":3}`)),
			json:    `{"type":"SUB_END","nextCursor":99,"bootstrapState":{"page":3}}`},
		frameCase{name: "complete", at: 2, frames: []Frame{exRespHeader, exSubStart, &SubEnd{NextCursor: 5}},
			payload: cat(i64(5), []byte{0}),
			json:    `{"type":"SUB_END","nextCursor":5}`},
	)
	checkRefusals(t,
		frameRefusal{name: "without SUB_START", kind: KindResponse, frames: []Frame{exRespHeader, exSubEnd}, want: "SUB_END without SUB_START"},
		frameRefusal{name: "cursor out of range", kind: KindResponse, frames: []Frame{exRespHeader, exSubStart, &SubEnd{NextCursor: MaxSafeInt + 1}},
			want: "nextCursor: i64 9007199254740992 outside"},
		frameRefusal{name: "state not JSON", kind: KindResponse, frames: []Frame{exRespHeader, exSubStart, &SubEnd{BootstrapState: json.RawMessage("{")}},
			want: "bootstrapState: not a JSON document"},
	)
}
