package realtime_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/realtime"
)

// recRelay records what a hub tells its cluster relay.
type recRelay struct {
	mu       sync.Mutex
	calls    []string // "follow P" / "unfollow P", in call order
	presence []realtime.PresenceEvent
}

func (r *recRelay) Follow(p string) {
	r.mu.Lock()
	r.calls = append(r.calls, "follow "+p)
	r.mu.Unlock()
}

func (r *recRelay) Unfollow(p string) {
	r.mu.Lock()
	r.calls = append(r.calls, "unfollow "+p)
	r.mu.Unlock()
}

func (r *recRelay) Presence(p string, ev realtime.PresenceEvent) {
	r.mu.Lock()
	r.presence = append(r.presence, ev)
	r.mu.Unlock()
}

func (r *recRelay) snapshot() ([]string, []realtime.PresenceEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...), append([]realtime.PresenceEvent(nil), r.presence...)
}

// The hub tells its relay Follow when it gets its first socket of a
// partition and Unfollow when the last one left, alternating (also under
// sockets connecting and closing concurrently), and reports every change
// of a local socket's presence with the socket's session id.
func TestClusterRelayFollowAndPresence(t *testing.T) {
	rec := &recRelay{}
	f := newFixture(t, fixtureOpts{hub: realtime.Options{Cluster: rec}})
	ctx := ctxT(t)
	a := f.follow(ctx, "a", "l1")
	if calls, _ := rec.snapshot(); len(calls) != 1 || calls[0] != "follow "+auth.DefaultPartition {
		t.Fatalf("after the first socket: %v, want one follow", calls)
	}
	sid := a.Hello().SessionID
	docs := []string{`{"n":1}`, `{"n":2}`, ""}
	for _, d := range docs {
		var doc json.RawMessage
		if d != "" {
			doc = json.RawMessage(d)
		}
		if err := a.Publish(ctx, "list:l1", doc); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Publish(ctx, "list:l1", json.RawMessage(`{"n":3}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "four presence reports", 5*time.Second, func() bool { _, p := rec.snapshot(); return len(p) == 4 })
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the partition unfollowed", 5*time.Second, func() bool {
		calls, _ := rec.snapshot()
		return len(calls) == 2
	})
	calls, pres := rec.snapshot()
	if calls[1] != "unfollow "+auth.DefaultPartition {
		t.Fatalf("calls %v", calls)
	}
	want := []struct{ kind, doc string }{{ssp2.PresenceJoin, `{"n":1}`}, {ssp2.PresenceUpdate, `{"n":2}`}, {ssp2.PresenceLeave, ""},
		{ssp2.PresenceJoin, `{"n":3}`}, {ssp2.PresenceLeave, ""}}
	if len(pres) != len(want) {
		t.Fatalf("presence reports %+v, want %d", pres, len(want))
	}
	for i, w := range want {
		p := pres[i]
		if p.Kind != w.kind || string(p.Doc) != w.doc || p.Key != "list:l1" || p.ActorID != "a" || p.ClientID != "a" || p.Socket != sid {
			t.Fatalf("report %d: %+v, want %s %s by a on socket %s", i, p, w.kind, w.doc, sid)
		}
	}

	// Sockets connecting and closing concurrently: Follow and Unfollow
	// still alternate, and end with Unfollow once no socket is left.
	if err := f.replica("b", "b", "l1").CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				c, err := f.dial(ctx, "b", "b")
				if err != nil {
					t.Error(err)
					return
				}
				c.CloseNow()
			}
		}()
	}
	wg.Wait()
	waitFor(t, "no partition left", 5*time.Second, func() bool { return f.hub.Stats().Partitions == 0 })
	calls, _ = rec.snapshot()
	for i, c := range calls {
		want := "follow "
		if i%2 == 1 {
			want = "unfollow "
		}
		if c != want+auth.DefaultPartition {
			t.Fatalf("call %d is %q: Follow and Unfollow do not alternate: %v", i, c, calls)
		}
	}
	if len(calls)%2 != 0 {
		t.Fatalf("calls end followed with no socket: %v", calls)
	}
}

// A remote socket's presence (RemotePresence) reaches the local sockets
// on its key as a local socket's would (join, update, leave; actor,
// client, doc; the burst of a socket that registers later), only on its
// key; DropRemotePresence sends leaves for one origin's entries; a
// document over the cap is ignored; LocalPresence lists the local
// sockets' documents.
func TestRemotePresence(t *testing.T) {
	f := newFixture(t, fixtureOpts{hub: realtime.Options{Cluster: &recRelay{}}})
	ctx := ctxT(t)
	part := auth.DefaultPartition
	a := f.follow(ctx, "a", "l1")
	b := f.follow(ctx, "b", "l1")
	c2 := f.follow(ctx, "c2", "l2")

	// The local reference: b's publish as a hears it.
	if err := b.Publish(ctx, "list:l1", json.RawMessage(`{"who":"b"}`)); err != nil {
		t.Fatal(err)
	}
	local := nextPresence(t, ctx, a)

	remote := func(socket, kind, key, doc string) realtime.PresenceEvent {
		ev := realtime.PresenceEvent{Key: key, Kind: kind, ActorID: "rx-" + socket, ClientID: "rc-" + socket, Socket: socket}
		if doc != "" {
			ev.Doc = json.RawMessage(doc)
		}
		return ev
	}
	f.hub.RemotePresence(part, "m2", remote("s1", ssp2.PresenceJoin, "list:l1", `{"who":"s1"}`))
	for _, o := range []*realtime.Client{a, b} {
		got := nextPresence(t, ctx, o)
		expectPresence(t, got, ssp2.PresenceJoin, "list:l1", "rc-s1", `{"who":"s1"}`)
		if got.ActorID != "rx-s1" || got.ScopeKey != local.ScopeKey {
			t.Fatalf("remote fanout %+v (local one: %+v)", got, local)
		}
	}
	// The hub decides join or update by what it holds.
	f.hub.RemotePresence(part, "m2", remote("s1", ssp2.PresenceJoin, "list:l1", `{"who":"s1","n":2}`))
	expectPresence(t, nextPresence(t, ctx, a), ssp2.PresenceUpdate, "list:l1", "rc-s1", `{"who":"s1","n":2}`)
	expectPresence(t, nextPresence(t, ctx, b), ssp2.PresenceUpdate, "list:l1", "rc-s1", `{"who":"s1","n":2}`)
	// Another key: only its sockets hear it.
	f.hub.RemotePresence(part, "m3", remote("s2", ssp2.PresenceJoin, "list:l2", `{"who":"s2"}`))
	expectPresence(t, nextPresence(t, ctx, c2), ssp2.PresenceJoin, "list:l2", "rc-s2", `{"who":"s2"}`)
	// Over the cap: ignored.
	f.hub.RemotePresence(part, "m3", remote("s3", ssp2.PresenceJoin, "list:l1", `{"pad":"`+strings.Repeat("x", 16<<10)+`"}`))
	f.hub.RemotePresence(part, "m3", remote("s4", ssp2.PresenceJoin, "list:l1", `{"who":"s4"}`))
	expectPresence(t, nextPresence(t, ctx, a), ssp2.PresenceJoin, "list:l1", "rc-s4", `{"who":"s4"}`)
	expectPresence(t, nextPresence(t, ctx, b), ssp2.PresenceJoin, "list:l1", "rc-s4", `{"who":"s4"}`)

	// A late socket gets the local and the remote documents of its key.
	late := f.follow(ctx, "late", "l1")
	got := map[string]string{}
	for range 3 {
		p := nextPresence(t, ctx, late)
		if p.Kind != ssp2.PresenceJoin || p.ScopeKey != "list:l1" {
			t.Fatalf("late burst: %s", describe(p))
		}
		got[p.ActorID+"/"+p.ClientID] = string(p.Doc)
	}
	wantBurst := map[string]string{"b/b": `{"who":"b"}`, "rx-s1/rc-s1": `{"who":"s1","n":2}`, "rx-s4/rc-s4": `{"who":"s4"}`}
	if fmt.Sprint(got) != fmt.Sprint(wantBurst) {
		t.Fatalf("late burst %v, want %v", got, wantBurst)
	}

	// A leave of one entry; then dropping m3's entries: a leave each, on
	// their keys only.
	f.hub.RemotePresence(part, "m2", remote("s1", ssp2.PresenceLeave, "list:l1", ""))
	for _, o := range []*realtime.Client{a, b, late} {
		expectPresence(t, nextPresence(t, ctx, o), ssp2.PresenceLeave, "list:l1", "rc-s1", "")
	}
	f.hub.DropRemotePresence(part, "m9") // no entry of m9: nothing
	f.hub.DropRemotePresence(part, "m3")
	for _, o := range []*realtime.Client{a, b, late} {
		lv := nextPresence(t, ctx, o)
		expectPresence(t, lv, ssp2.PresenceLeave, "list:l1", "rc-s4", "")
		if lv.ActorID != "rx-s4" {
			t.Fatalf("leave of %q, want rx-s4", lv.ActorID)
		}
	}
	expectPresence(t, nextPresence(t, ctx, c2), ssp2.PresenceLeave, "list:l2", "rc-s2", "")

	// Nothing left: a local publish is the next thing a hears.
	if err := late.Publish(ctx, "list:l1", json.RawMessage(`{"who":"late"}`)); err != nil {
		t.Fatal(err)
	}
	expectPresence(t, nextPresence(t, ctx, a), ssp2.PresenceJoin, "list:l1", "late", `{"who":"late"}`)
	expectPresence(t, nextPresence(t, ctx, b), ssp2.PresenceJoin, "list:l1", "late", `{"who":"late"}`)

	lp := f.hub.LocalPresence(part)
	if len(lp) != 2 {
		t.Fatalf("LocalPresence %+v, want b's and late's", lp)
	}
	bySocket := map[string]realtime.PresenceEvent{}
	for _, ev := range lp {
		bySocket[ev.Socket] = ev
	}
	if ev := bySocket[b.Hello().SessionID]; ev.ClientID != "b" || string(ev.Doc) != `{"who":"b"}` || ev.Key != "list:l1" || ev.Kind != ssp2.PresenceJoin {
		t.Fatalf("LocalPresence of b: %+v", ev)
	}
	if ev := bySocket[late.Hello().SessionID]; ev.ClientID != "late" || string(ev.Doc) != `{"who":"late"}` {
		t.Fatalf("LocalPresence of late: %+v", ev)
	}
	if got := f.hub.LocalPresence("no-such-partition"); got != nil {
		t.Fatalf("LocalPresence of a partition without sockets: %+v", got)
	}
}
