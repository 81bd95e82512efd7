package realtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
	"github.com/synclane/synclane/transport/realtime"
)

// keysOf returns the scope keys the hub has clientID's socket registered on.
func (f *fixture) keysOf(clientID string) []string {
	for _, s := range f.hub.Sessions(auth.DefaultPartition) {
		if s.ClientID == clientID {
			return s.Keys
		}
	}
	return nil
}

// TestRefreshScopesNarrowsAndRevokes (SPEC §8.7, refreshScopes): after the
// host narrows an actor's grants, RefreshScopes re-resolves that actor's
// sockets at once: a subscription left without an effective scope stops
// getting deltas and its key (and the presence on it) goes, the socket is
// told to catch up, and another actor's socket is left as it was.
func TestRefreshScopesNarrowsAndRevokes(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := ctxT(t)
	f.grant("bob", map[string][]string{"list_id": {"groceries", "hardware"}})
	b := f.replica("bob", "b", "groceries", "hardware")
	c := f.replica("cy", "c", "groceries")
	for _, r := range []interface{ CatchUp(context.Context) error }{b, c} {
		if err := r.CatchUp(ctx); err != nil {
			t.Fatal(err)
		}
	}
	bs := f.mustDial(ctx, "bob", "b")
	cs := f.mustDial(ctx, "cy", "c")
	f.waitLive(t, "b")
	f.waitLive(t, "c")
	if err := bs.Publish(ctx, "list:groceries", json.RawMessage(`{"at":"aisle 3"}`)); err != nil {
		t.Fatal(err)
	}
	expectPresence(t, nextPresence(t, ctx, cs), ssp2.PresenceJoin, "list:groceries", "b", `{"at":"aisle 3"}`)

	// Unchanged grants: nothing changes, nobody is woken.
	if rep, err := f.hub.RefreshScopes(ctx, auth.DefaultPartition, "bob"); err != nil || rep != (realtime.RefreshReport{Sessions: 1}) {
		t.Fatalf("a refresh with unchanged grants: %+v, %v; want one socket, nothing changed", rep, err)
	}

	f.grant("bob", map[string][]string{"list_id": {"hardware"}}) // bob leaves groceries
	rep, err := f.hub.RefreshScopes(ctx, auth.DefaultPartition, "bob")
	if err != nil || rep != (realtime.RefreshReport{Sessions: 1, Changed: 1}) {
		t.Fatalf("the refresh after narrowing: %+v, %v; want one socket changed", rep, err)
	}
	if keys := f.keysOf("b"); !slices.Equal(keys, []string{"list:hardware"}) {
		t.Fatalf("bob's socket is registered on %v, want only list:hardware", keys)
	}
	if keys := f.keysOf("c"); !slices.Equal(keys, []string{"list:groceries"}) {
		t.Fatalf("cy's socket is registered on %v, want list:groceries as before", keys)
	}
	expectPresence(t, nextPresence(t, ctx, cs), ssp2.PresenceLeave, "list:groceries", "b", "")
	if wk := nextWake(t, ctx, bs); wk.Reason != ssp2.WakeCatchupRequired {
		t.Fatalf("bob's socket after the refresh: %+v, want catchup-required", wk)
	}

	w := f.httpClient("ada", "w")
	g := push(t, ctx, w, "g1", "groceries", "milk")
	h := push(t, ctx, w, "h1", "hardware", "nails")
	d := nextDelta(t, ctx, bs)
	if cm := commits(d.Message); len(cm) != 1 || cm[0].CommitSeq != h {
		t.Fatalf("bob's next delta: %+v; want only the hardware commit %d (not groceries %d)", cm, h, g)
	}
	for _, fr := range d.Message.Frames {
		if st, ok := fr.(*ssp2.SubStart); ok && st.ID == "sub-groceries" {
			t.Fatalf("bob's delta still has a section of the revoked subscription: %+v", st)
		}
	}
	if d := nextDelta(t, ctx, cs); len(commits(d.Message)) != 1 || commits(d.Message)[0].CommitSeq != g {
		t.Fatalf("cy's delta: %+v, want the groceries commit %d", commits(d.Message), g)
	}
	// The client's round then answers the revoked subscription as revoked.
	if err := b.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(b.Subs, func(s *httpsynctest.ReplicaSub) bool { return s.ID == "sub-groceries" })
	if i < 0 || b.Subs[i].Status != ssp2.SubRevoked {
		t.Fatalf("bob's groceries subscription after the round: %+v, want revoked", b.Subs)
	}
}

// TestRefreshScopesFailsClosed: when the resolver fails for the actor
// during a refresh, the socket loses every registration (no delta, no
// presence) until a round of its client registers it again; a refresh of
// a partition with no socket, or before Start, is answered plainly.
func TestRefreshScopesFailsClosed(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := ctxT(t)
	b := f.replica("bob", "b", "groceries")
	c := f.replica("cy", "c", "groceries")
	for _, r := range []interface{ CatchUp(context.Context) error }{b, c} {
		if err := r.CatchUp(ctx); err != nil {
			t.Fatal(err)
		}
	}
	bs := f.mustDial(ctx, "bob", "b")
	cs := f.mustDial(ctx, "cy", "c")
	f.waitLive(t, "b")
	if err := bs.Publish(ctx, "list:groceries", json.RawMessage(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	expectPresence(t, nextPresence(t, ctx, cs), ssp2.PresenceJoin, "list:groceries", "b", `{"x":1}`)

	f.fail("bob", true)
	rep, err := f.hub.RefreshScopes(ctx, auth.DefaultPartition, "") // every socket of the partition
	if err != nil || rep != (realtime.RefreshReport{Sessions: 2, FailedClosed: 1}) {
		t.Fatalf("a refresh with bob's resolver down: %+v, %v; want two sockets, bob's failed closed", rep, err)
	}
	if keys := f.keysOf("b"); len(keys) != 0 {
		t.Fatalf("bob's socket after failing closed is registered on %v, want nothing", keys)
	}
	expectPresence(t, nextPresence(t, ctx, cs), ssp2.PresenceLeave, "list:groceries", "b", "")
	if wk := nextWake(t, ctx, bs); wk.Reason != ssp2.WakeCatchupRequired {
		t.Fatalf("bob's socket after failing closed: %+v, want catchup-required", wk)
	}
	w := f.httpClient("ada", "w")
	g1 := push(t, ctx, w, "g1", "groceries", "milk")
	if d := nextDelta(t, ctx, cs); commits(d.Message)[0].CommitSeq != g1 {
		t.Fatalf("cy's delta: %+v", commits(d.Message))
	}
	if err := bs.Publish(ctx, "list:groceries", json.RawMessage(`{"x":2}`)); err != nil {
		t.Fatal(err)
	}
	if pe := nextPresenceError(t, ctx, bs); pe.Error != "presence.forbidden" {
		t.Fatalf("bob publishing after failing closed: %+v, want presence.forbidden", pe)
	}

	// The resolver is back and bob's client runs a round: registered again.
	f.fail("bob", false)
	if err := b.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if err := bs.Ack(ctx, b.Cursor()); err != nil {
		t.Fatal(err)
	}
	f.waitLive(t, "b")
	if keys := f.keysOf("b"); !slices.Equal(keys, []string{"list:groceries"}) {
		t.Fatalf("bob's socket after its round: %v, want list:groceries", keys)
	}
	g2 := push(t, ctx, w, "g2", "groceries", "eggs")
	for {
		ev := next(t, ctx, bs)
		if d, ok := ev.(*realtime.Delta); ok {
			if cm := commits(d.Message); len(cm) != 1 || cm[0].CommitSeq != g2 {
				t.Fatalf("bob's delta after re-registering: %+v, want %d", cm, g2)
			}
			break
		}
		if wk, ok := ev.(*ssp2.Wake); !ok || wk.Cursor > g1 {
			t.Fatalf("before bob's delta: %s", describe(ev))
		}
	}

	if rep, err := f.hub.RefreshScopes(ctx, "no-sockets-here", ""); err != nil || rep != (realtime.RefreshReport{}) {
		t.Fatalf("a partition without sockets: %+v, %v", rep, err)
	}
	if _, err := realtime.New(realtime.Options{Auth: auth.DevAuth{}}).RefreshScopes(ctx, auth.DefaultPartition, ""); !errors.Is(err, realtime.ErrHubNotStarted) {
		t.Fatalf("a hub never started: %v, want ErrHubNotStarted", err)
	}
}

// TestRefreshWhileConnectingFailsClosed: a socket whose connect resolved
// its scopes before a RefreshScopes call and registers after it cannot
// know whether the refresh revoked them: it registers nothing and is told
// to catch up.
func TestRefreshWhileConnectingFailsClosed(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := ctxT(t)
	for _, id := range []string{"b1", "b2"} {
		if err := f.replica("bob", id, "groceries").CatchUp(ctx); err != nil {
			t.Fatal(err)
		}
	}
	f.mustDial(ctx, "bob", "b1")
	f.waitLive(t, "b1")
	gate, entered := make(chan struct{}), make(chan struct{}, 2)
	f.mu.Lock()
	f.gate, f.entered = gate, entered
	f.mu.Unlock()
	dialed := make(chan *realtime.Client, 1)
	go func() {
		c, err := f.dial(ctx, "bob", "b2")
		if err != nil {
			t.Error(err)
		}
		dialed <- c
	}()
	<-entered // b2's connect is resolving its scopes
	refreshed := make(chan error, 1)
	go func() {
		_, err := f.hub.RefreshScopes(ctx, auth.DefaultPartition, "")
		refreshed <- err
	}()
	<-entered // the refresh is resolving b1's (it counted itself first)
	f.mu.Lock()
	f.gate, f.entered = nil, nil
	f.mu.Unlock()
	close(gate)
	if err := <-refreshed; err != nil {
		t.Fatal(err)
	}
	b2 := <-dialed
	if b2 == nil {
		t.Fatal("b2 did not connect")
	}
	t.Cleanup(func() { b2.CloseNow() })
	// (Its hello came: the hub has it started and registered.)
	if keys, live := f.keysOf("b2"), f.keysOf("b1"); len(keys) != 0 || !slices.Equal(live, []string{"list:groceries"}) {
		t.Fatalf("the socket connecting during the refresh is registered on %v (the other on %v), want nothing", keys, live)
	}
	if wk := nextWake(t, ctx, b2); wk.Reason != ssp2.WakeCatchupRequired {
		t.Fatalf("the socket connecting during the refresh: %+v, want catchup-required", wk)
	}
}
