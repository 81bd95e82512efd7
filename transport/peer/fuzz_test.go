package peer

import (
	"encoding/json"
	"testing"

	"github.com/synclane/synclane/engine"
)

// The member-route decoders never panic on any input, and an identity
// that decodes re-encodes to one that decodes equal.
func FuzzDecodeIdentity(f *testing.F) {
	s, _ := encodeIdentity(engine.Identity{ActorID: "a", Partition: "p", Grants: map[string][]string{"v": {"1"}}})
	f.Add(s)
	f.Add("")
	f.Add("!!")
	f.Fuzz(func(t *testing.T, in string) {
		id, err := decodeIdentity(in)
		if err != nil {
			return
		}
		again, err := encodeIdentity(id)
		if err != nil {
			t.Fatal(err)
		}
		id2, err := decodeIdentity(again)
		if err != nil || id2.ActorID != id.ActorID || id2.Partition != id.Partition || len(id2.Grants) != len(id.Grants) {
			t.Fatalf("round trip: %+v vs %+v (%v)", id, id2, err)
		}
	})
}

func FuzzDecodeDeltas(f *testing.F) {
	f.Add([]byte(`{"logEpoch":"e","upTo":3,"groups":[{"commits":0}]}`))
	f.Add([]byte(`{"groups":[{"frames":"U1NQMgIAAgA="}]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var a deltasAnswer
		if json.Unmarshal(in, &a) != nil {
			return
		}
		_, _ = decodeDeltas(&a) // an error is fine; a panic is not
	})
}
