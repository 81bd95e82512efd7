package realtime_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/realtime"
)

func nextPresence(t *testing.T, ctx context.Context, c *realtime.Client) *ssp2.PresenceFanout {
	t.Helper()
	ev := next(t, ctx, c)
	p, ok := ev.(*ssp2.PresenceFanout)
	if !ok {
		t.Fatalf("want presence, got %s", describe(ev))
	}
	return p
}

func nextPresenceError(t *testing.T, ctx context.Context, c *realtime.Client) *ssp2.PresenceError {
	t.Helper()
	ev := next(t, ctx, c)
	p, ok := ev.(*ssp2.PresenceError)
	if !ok {
		t.Fatalf("want a presence error, got %s", describe(ev))
	}
	return p
}

func expectPresence(t *testing.T, got *ssp2.PresenceFanout, kind, key, client, doc string) {
	t.Helper()
	if got.Kind != kind || got.ScopeKey != key || got.ClientID != client || (doc == "" && got.Doc != nil) || (doc != "" && string(got.Doc) != doc) {
		t.Fatalf("presence %s %s %s %s, want %s %s %s %s", got.Kind, got.ScopeKey, got.ClientID, got.Doc, kind, key, client, doc)
	}
}

// Presence: join, update, leave, leave on disconnect, a late joiner gets
// the current set, no self-echo, only registered keys (isolation,
// presence.forbidden), the size cap (presence.too_large), and presence
// survives a socket round.
func TestPresence(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := ctxT(t)
	connect := func(actor, id, list string) *realtime.Client {
		r := f.replica(actor, id, list)
		if err := r.CatchUp(ctx); err != nil {
			t.Fatal(err)
		}
		return f.mustDial(ctx, actor, id)
	}
	a := connect("ada", "a", "l1")
	b := connect("bob", "b", "l1")
	c := connect("cy", "c", "l2")

	if err := a.Publish(ctx, "list:l1", json.RawMessage(`{"name":"Ada"}`)); err != nil {
		t.Fatal(err)
	}
	expectPresence(t, nextPresence(t, ctx, b), ssp2.PresenceJoin, "list:l1", "a", `{"name":"Ada"}`)
	if err := a.Publish(ctx, "list:l1", json.RawMessage(`{"name":"Ada","cursor":3}`)); err != nil {
		t.Fatal(err)
	}
	up := nextPresence(t, ctx, b)
	expectPresence(t, up, ssp2.PresenceUpdate, "list:l1", "a", `{"name":"Ada","cursor":3}`)
	if up.ActorID != "ada" {
		t.Fatalf("fanout actor %q", up.ActorID)
	}
	if err := b.Publish(ctx, "list:l1", json.RawMessage(`{"name":"Bob"}`)); err != nil {
		t.Fatal(err)
	}
	expectPresence(t, nextPresence(t, ctx, a), ssp2.PresenceJoin, "list:l1", "b", `{"name":"Bob"}`)

	// Only registered keys; the cap.
	if err := a.Publish(ctx, "list:l2", json.RawMessage(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	if pe := nextPresenceError(t, ctx, a); pe.Error != ssp2.PresenceForbidden || pe.ScopeKey != "list:l2" {
		t.Fatalf("publish on an unregistered key: %+v", pe)
	}
	big := json.RawMessage(`{"pad":"` + strings.Repeat("x", 16<<10) + `"}`)
	if err := a.Publish(ctx, "list:l1", big); err != nil {
		t.Fatal(err)
	}
	if pe := nextPresenceError(t, ctx, a); pe.Error != ssp2.PresenceTooLarge {
		t.Fatalf("publish over 16 KiB: %+v", pe)
	}

	// A late joiner gets the current set.
	d := connect("dee", "d", "l1")
	got := map[string]string{}
	for range 2 {
		p := nextPresence(t, ctx, d)
		if p.Kind != ssp2.PresenceJoin || p.ScopeKey != "list:l1" {
			t.Fatalf("late join burst: %+v", p)
		}
		got[p.ClientID] = string(p.Doc)
	}
	if got["a"] != `{"name":"Ada","cursor":3}` || got["b"] != `{"name":"Bob"}` {
		t.Fatalf("late join burst: %v", got)
	}

	// Presence survives a socket round (a pull that keeps the key).
	ra := f.replica("ada", "a", "l1")
	ra.Client.Rounds = a
	if err := ra.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	e := connect("eve", "e", "l1")
	got = map[string]string{}
	for range 2 {
		p := nextPresence(t, ctx, e)
		got[p.ClientID] = string(p.Doc)
	}
	if got["a"] != `{"name":"Ada","cursor":3}` {
		t.Fatalf("after A's round, a late joiner sees %v", got)
	}

	// Leave (null doc), leave on disconnect.
	if err := a.Publish(ctx, "list:l1", nil); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*realtime.Client{b, d, e} {
		expectPresence(t, nextPresence(t, ctx, o), ssp2.PresenceLeave, "list:l1", "a", "")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*realtime.Client{a, d, e} {
		expectPresence(t, nextPresence(t, ctx, o), ssp2.PresenceLeave, "list:l1", "b", "")
	}

	// Isolation: C (on l2) heard none of it; its first event is l2's.
	g := connect("gus", "g", "l2")
	if err := g.Publish(ctx, "list:l2", json.RawMessage(`{"name":"Gus"}`)); err != nil {
		t.Fatal(err)
	}
	expectPresence(t, nextPresence(t, ctx, c), ssp2.PresenceJoin, "list:l2", "g", `{"name":"Gus"}`)
	// No self-echo: A's own next event is D's publish, not its own.
	if err := a.Publish(ctx, "list:l1", json.RawMessage(`{"again":true}`)); err != nil {
		t.Fatal(err)
	}
	if err := d.Publish(ctx, "list:l1", json.RawMessage(`{"name":"Dee"}`)); err != nil {
		t.Fatal(err)
	}
	expectPresence(t, nextPresence(t, ctx, a), ssp2.PresenceJoin, "list:l1", "d", `{"name":"Dee"}`)
}
