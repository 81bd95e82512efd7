package realtime_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
)

// TestPresenceBurstOnABusyKey: a socket that gains a key already holding
// more presence documents than the send buffer has message slots (64)
// receives a join for each, and is not closed as not reading; so does a
// socket watching them arrive one by one.
func TestPresenceBurstOnABusyKey(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := ctxT(t)
	const present = 100
	observer := f.follow(ctx, "observer", "l1")
	for i := range present {
		c := f.follow(ctx, fmt.Sprintf("p%d", i), "l1")
		if err := c.Publish(ctx, "list:l1", json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for len(seen) < present { // every document is stored once the observer saw it
		p := nextPresence(t, ctx, observer)
		if p.Kind == ssp2.PresenceJoin {
			seen[p.ClientID] = true
		}
	}
	newcomer := f.follow(ctx, "newcomer", "l1")
	got := map[string]bool{}
	for len(got) < present {
		p := nextPresence(t, ctx, newcomer) // fails the test if the socket is closed
		if p.Kind != ssp2.PresenceJoin {
			t.Fatalf("newcomer got %+v, want the burst of joins", p)
		}
		got[p.ClientID] = true
	}
	if n := f.hub.Stats().Closed["slow"]; n != 0 {
		t.Errorf("%d sockets closed as not reading", n)
	}
}
