package ssp2

import (
	"encoding/json"
	"testing"
)

func TestFrameSubscription(t *testing.T) {
	checkFrame(t, "SUBSCRIPTION",
		frameCase{name: "scopes and params", at: 2, frames: []Frame{exReqHeader, exPull, &Subscription{ID: "sub-1", Table: "todos",
			Scopes: map[string][]string{"project": {"p1", "p2"}}, Params: json.RawMessage(`{"a":1}`), Cursor: 42}},
			payload: cat(s("sub-1"), s("todos"), u32(1), s("project"), u32(2), s("p1"), s("p2"), []byte{1}, s(`{"a":1}`), i64(42), []byte{0}),
			json:    `{"type":"SUBSCRIPTION","id":"sub-1","table":"todos","scopes":{"project":["p1","p2"]},"params":{"a":1},"cursor":42}`},
		frameCase{name: "bootstrap state", at: 2, frames: []Frame{exReqHeader, exPull, &Subscription{ID: "s2", Table: "t",
			Scopes: map[string][]string{}, BootstrapState: json.RawMessage(`{"page":2}`)}},
			payload: cat(s("s2"), s("t"), u32(0), []byte{0}, i64(0), []byte{1}, s(`{"page":2}`)),
			json:    `{"type":"SUBSCRIPTION","id":"s2","table":"t","scopes":{},"cursor":0,"bootstrapState":{"page":2}}`},
	)
	checkRefusals(t,
		frameRefusal{name: "params not JSON", kind: KindRequest, frames: []Frame{exReqHeader, exPull, &Subscription{ID: "s", Table: "t", Params: json.RawMessage(`{bad`)}},
			want: "subscription.params: not a JSON document"},
		frameRefusal{name: "cursor out of range", kind: KindRequest, frames: []Frame{exReqHeader, exPull, &Subscription{ID: "s", Table: "t", Cursor: MaxSafeInt + 1}},
			want: "subscription.cursor: i64 9007199254740992 outside"},
		frameRefusal{name: "without a pull", kind: KindRequest, frames: []Frame{exReqHeader, &Subscription{ID: "s", Table: "t"}}, want: "SUBSCRIPTION out of grammar order"},
	)
}
