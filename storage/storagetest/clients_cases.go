package storagetest

import (
	"bytes"
	"encoding/json"

	"github.com/synclane/synclane/storage"
)

func (e *env) wantClient(what, partition, id string, want *storage.ClientRecord) {
	e.t.Helper()
	got, err := e.s.GetClient(e.ctx, partition, id)
	if err != nil {
		e.t.Fatalf("%s: GetClient: %v", what, err)
	}
	if want == nil {
		if got != nil {
			e.t.Fatalf("%s: got %+v, want nil", what, got)
		}
		return
	}
	if got == nil || got.ClientID != want.ClientID || got.ActorID != want.ActorID || !bytes.Equal(got.Subscriptions, want.Subscriptions) ||
		got.Cursor != want.Cursor || got.WireVersion != want.WireVersion || got.UpdatedAtMs != want.UpdatedAtMs {
		e.t.Fatalf("%s: got %+v, want %+v", what, got, want)
	}
}

var clientTests = []test{
	{name: "PutGetReplace", fn: func(e *env) {
		e.touch("p")
		e.wantClient("absent", "p", "c1", nil)
		c1 := storage.ClientRecord{ClientID: "c1", ActorID: "actor😀", Subscriptions: json.RawMessage(` [ {"id": "s1",  "cursor":-1} ] `),
			Cursor: -1, WireVersion: 2, UpdatedAtMs: 1_700_000_000_123}
		c2 := storage.ClientRecord{ClientID: "c2", ActorID: "a2", Subscriptions: json.RawMessage(`[]`), Cursor: 1 << 40, WireVersion: 1, UpdatedAtMs: 5}
		for _, c := range []storage.ClientRecord{c1, c2} {
			if err := e.s.PutClient(e.ctx, "p", c); err != nil {
				e.t.Fatal(err)
			}
		}
		e.wantClient("c1", "p", "c1", &c1)
		e.wantClient("c2", "p", "c2", &c2)
		c1b := storage.ClientRecord{ClientID: "c1", ActorID: "actor2", Subscriptions: json.RawMessage(`{"x":1}`), Cursor: 17, WireVersion: 1, UpdatedAtMs: 9}
		if err := e.s.PutClient(e.ctx, "p", c1b); err != nil {
			e.t.Fatal(err)
		}
		e.wantClient("c1 replaced", "p", "c1", &c1b)
		e.wantClient("c2 untouched", "p", "c2", &c2)
		e.wantClient("other partition", "q", "c1", nil)
	}},
}
