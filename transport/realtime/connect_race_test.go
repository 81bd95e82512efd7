package realtime_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/realtime"
)

// dialHeldInResolver starts a dial of (actor, clientID) and returns once
// the socket's connect waits in the scope resolver (registered, not yet
// upgraded); release lets it go on, done yields the dial's outcome.
func dialHeldInResolver(t *testing.T, ctx context.Context, f *fixture, actor, clientID string) (release func(), done <-chan dialResult) {
	t.Helper()
	gate, entered := make(chan struct{}), make(chan struct{}, 1)
	f.mu.Lock()
	f.gate, f.entered = gate, entered
	f.mu.Unlock()
	out := make(chan dialResult, 1)
	go func() {
		c, err := f.dial(ctx, actor, clientID)
		out <- dialResult{c, err}
	}()
	select {
	case <-entered:
	case r := <-out:
		t.Fatalf("the dial finished without resolving scopes: %v", r.err)
	}
	f.mu.Lock()
	f.gate, f.entered = nil, nil // later resolutions pass
	f.mu.Unlock()
	return func() { close(gate) }, out
}

type dialResult struct {
	c   *realtime.Client
	err error
}

// TestRegistrationWhileConnecting: a pull of the socket's client served
// while the socket connects is the registration the socket follows once
// up (not the client record it read before), and a presence burst for the
// keys it gains waits for the upgrade (it used to be written to a socket
// with no connection yet, crashing the process).
func TestRegistrationWhileConnecting(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := ctxT(t)
	w := f.httpClient("writer", "w")
	push(t, ctx, w, "seed", "l2", "seed")
	// Bob is present on list:l2; carl, on l2 too, sees bob join, so the
	// presence is stored before ada's pull below.
	bob, carl := f.follow(ctx, "bob", "l2"), f.follow(ctx, "carl", "l2")
	if err := bob.Publish(ctx, "list:l2", json.RawMessage(`{"name":"Bob"}`)); err != nil {
		t.Fatal(err)
	}
	expectPresence(t, nextPresence(t, ctx, carl), ssp2.PresenceJoin, "list:l2", "bob", `{"name":"Bob"}`)

	if err := f.replica("ada", "c", "l1").CatchUp(ctx); err != nil { // ada's record: list l1
		t.Fatal(err)
	}
	release, done := dialHeldInResolver(t, ctx, f, "ada", "c")
	if err := f.replica("ada", "c", "l2").CatchUp(ctx); err != nil { // now l2 only, while the socket connects
		t.Fatal(err)
	}
	release()
	d := <-done
	if d.err != nil {
		t.Fatal(d.err)
	}
	c := d.c
	t.Cleanup(func() { c.CloseNow() })
	if h := c.Hello(); h.ClientID != "c" {
		t.Fatalf("hello %+v", h)
	}
	// The first events: bob's presence on l2 (after hello), then the
	// commits of l2 only — nothing of l1, which the last pull dropped.
	expectPresence(t, nextPresence(t, ctx, c), ssp2.PresenceJoin, "list:l2", "bob", `{"name":"Bob"}`)
	push(t, ctx, w, "x1", "l1", "not yours any more")
	push(t, ctx, w, "x2", "l2", "yours")
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		ev, err := c.Next(tctx)
		if err != nil {
			t.Fatalf("no delta or wake-up for l2: %v", err)
		}
		switch e := ev.(type) {
		case *realtime.Delta:
			for _, fr := range e.Message.Frames {
				if st, ok := fr.(*ssp2.SubStart); ok && st.ID == "sub-l1" {
					t.Fatalf("a delta for sub-l1, which the client's last pull dropped (effective %v)", st.EffectiveScopes)
				}
			}
			if len(commits(e.Message)) > 0 {
				return
			}
		case *ssp2.Wake:
			return // the pull's answer may still be on its way: wake-ups until an ack
		}
	}
}
