package ssp2

import "testing"

func TestFrameSubStart(t *testing.T) {
	checkFrame(t, "SUB_START",
		frameCase{name: "reset with scopes", at: 1, frames: []Frame{exRespHeader,
			&SubStart{ID: "sub-1", Status: SubReset, ReasonCode: "sync.cursor_reset", EffectiveScopes: map[string][]string{"project": {"p1"}}, Bootstrap: true}, exSubEnd},
			payload: cat(s("sub-1"), []byte{3}, s("sync.cursor_reset"), u32(1), s("project"), u32(1), s("p1"), []byte{1}),
			json:    `{"type":"SUB_START","id":"sub-1","status":"reset","reasonCode":"sync.cursor_reset","effectiveScopes":{"project":["p1"]},"bootstrap":true}`},
	)
	checkRefusals(t,
		frameRefusal{name: "no status", kind: KindResponse, frames: []Frame{exRespHeader, &SubStart{ID: "s"}, exSubEnd}, want: "SUB_START status 0"},
		frameRefusal{name: "inside a section", kind: KindResponse, frames: []Frame{exRespHeader, exSubStart, exSubStart}, want: "SUB_START inside an open section"},
		frameRefusal{name: "not closed", kind: KindResponse, frames: []Frame{exRespHeader, exSubStart}, want: "section not closed by SUB_END"},
	)
}
