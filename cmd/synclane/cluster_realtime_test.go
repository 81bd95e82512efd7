package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
	"github.com/synclane/synclane/transport/realtime"
)

// realtimeSocket registers clientID's subscription to list through member
// m (a pull: the socket's scope keys come from its registrations) and
// connects its realtime socket there.
func realtimeSocket(ctx context.Context, t *testing.T, m *clusterMember, partition, actor, clientID, list string) *realtime.Client {
	t.Helper()
	h := http.Header{"X-Actor": {actor}, "X-Partition": {partition}}
	r := httpsynctest.NewReplica(&httpsync.Client{URL: m.base + "/sync", ClientID: clientID, Header: h}, schema.MustDemo())
	r.Subscribe("todos-"+list, "todos", map[string][]string{"list_id": {list}})
	if err := r.CatchUp(ctx); err != nil {
		t.Fatalf("%s: pull through %s: %v", clientID, m.name, err)
	}
	c, err := realtime.Dial(ctx, m.base+"/realtime", clientID, realtime.DialOptions{Header: h})
	if err != nil {
		t.Fatalf("%s: realtime connect to %s: %v", clientID, m.name, err)
	}
	t.Cleanup(c.CloseNow)
	return c
}

// nextEvent returns the next event of c that is not a heartbeat.
func nextEvent(ctx context.Context, t *testing.T, c *realtime.Client, who string) any {
	t.Helper()
	for {
		ev, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("%s: waiting for an event: %v", who, err)
		}
		if _, ok := ev.(*ssp2.Heartbeat); !ok {
			return ev
		}
	}
}

// nextPresence returns the next presence fan-out c gets, skipping
// heartbeats, wake-ups and deltas (which a registration may bring).
func nextPresence(ctx context.Context, t *testing.T, c *realtime.Client, who string) *ssp2.PresenceFanout {
	t.Helper()
	for {
		switch ev := nextEvent(ctx, t, c, who).(type) {
		case *ssp2.PresenceFanout:
			return ev
		case *ssp2.PresenceError:
			t.Fatalf("%s: presence error %+v", who, ev)
		}
	}
}

// Presence between sockets on two members: neither owns the partition, so
// every document travels through the owner. A join, an update and a leave
// reach the other socket as they would on one server; a socket that
// connects later (on the owner) gets a join for the document already
// there; a socket that closes leaves.
func TestClusterPresenceAcrossMembers(t *testing.T) {
	c := startCluster(t, clusterOptions{leaseTTL: 2 * time.Second})
	a, b, owner := c.members[0], c.members[1], c.members[2]
	p := c.ownedPartition(t, owner, "presence-")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const key = "list:L"

	x := realtimeSocket(ctx, t, a, p, "ada", "cx", "L")
	y := realtimeSocket(ctx, t, b, p, "bob", "cy", "L")
	// Presence needs the relay's follow to be in place at the owner; the
	// first publish may race it, so publish until y hears it.
	want := func(got *ssp2.PresenceFanout, kind, client, doc string) {
		t.Helper()
		if got.ScopeKey != key || got.Kind != kind || got.ClientID != client || (doc != "" && string(got.Doc) != doc) {
			t.Fatalf("presence %+v (doc %s), want %s of %s on %s with %s", got, got.Doc, kind, client, key, doc)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	var first *ssp2.PresenceFanout
	for first == nil {
		if err := x.Publish(ctx, key, json.RawMessage(`{"cursor":1}`)); err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		ev, err := y.Next(wctx)
		wcancel()
		if fo, ok := ev.(*ssp2.PresenceFanout); err == nil && ok {
			first = fo
		} else if time.Now().After(deadline) {
			t.Fatalf("y on %s never heard x's presence published on %s (last: %v %v)", b.name, a.name, ev, err)
		}
	}
	if first.Kind != ssp2.PresenceJoin && first.Kind != ssp2.PresenceUpdate {
		t.Fatalf("first presence %+v", first)
	}
	want(first, first.Kind, "cx", `{"cursor":1}`)
	// From here on, one publish is one fan-out.
	if err := x.Publish(ctx, key, json.RawMessage(`{"cursor":2}`)); err != nil {
		t.Fatal(err)
	}
	for {
		got := nextPresence(ctx, t, y, "y")
		if string(got.Doc) == `{"cursor":1}` {
			continue // a repeat of the first publish
		}
		want(got, ssp2.PresenceUpdate, "cx", `{"cursor":2}`)
		break
	}
	if err := y.Publish(ctx, key, json.RawMessage(`{"y":true}`)); err != nil {
		t.Fatal(err)
	}
	want(nextPresence(ctx, t, x, "x"), ssp2.PresenceJoin, "cy", `{"y":true}`)

	// A late socket on the owner gets a join for each document there.
	z := realtimeSocket(ctx, t, owner, p, "cat", "cz", "L")
	seen := map[string]string{}
	for len(seen) < 2 {
		got := nextPresence(ctx, t, z, "z")
		if got.Kind != ssp2.PresenceJoin {
			t.Fatalf("z: %+v, want joins", got)
		}
		seen[got.ClientID] = string(got.Doc)
	}
	if seen["cx"] != `{"cursor":2}` || seen["cy"] != `{"y":true}` {
		t.Fatalf("z's burst: %v", seen)
	}

	// x closes: y and z hear it leave.
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		c    *realtime.Client
		name string
	}{{y, "y"}, {z, "z"}} {
		got := nextPresence(ctx, t, s.c, s.name)
		want(got, ssp2.PresenceLeave, "cx", "")
	}
}

// A delta reaches a socket on a member that does not own the partition:
// the owner relays its commits to the member, whose socket then gets the
// delta built on the owner. Pushed through a third member (forwarded to
// the owner), each commit arrives as one delta with that commit.
func TestClusterDeltaToSocketOnNonOwner(t *testing.T) {
	c := startCluster(t, clusterOptions{leaseTTL: 2 * time.Second})
	a, b, owner := c.members[0], c.members[1], c.members[2]
	p := c.ownedPartition(t, owner, "delta-")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	s := realtimeSocket(ctx, t, a, p, "ada", "sock", "L")
	waitUntil(t, 10*time.Second, "the socket's member follows the partition at its owner", func() (bool, string) {
		v, err := owner.view("")
		if err != nil {
			return false, err.Error()
		}
		return v.self().Served["clientState"] > 0, fmt.Sprintf("owner served %v", v.self().Served)
	})
	writer := newClusterClient(nil, "bob", "writer", p)
	for i := range 3 {
		commit := todoCommit(fmt.Sprintf("delta-%d", i), fmt.Sprintf("todo-%d", i), "L")
		res, ans, err := writer.push(ctx, b, commit)
		if ans != answered || res.Status != ssp2.CommitApplied {
			t.Fatalf("push %d through %s: %s %+v %v", i, b.name, ans, res, err)
		}
		seq := *res.CommitSeq
		var d *realtime.Delta
		for d == nil {
			switch ev := nextEvent(ctx, t, s, "socket").(type) {
			case *realtime.Delta:
				d = ev
			case *ssp2.Wake:
				t.Fatalf("commit %d: a wake-up instead of a delta (%+v)", seq, ev)
			}
		}
		var seqs []int64
		for _, f := range d.Message.Frames {
			if cm, ok := f.(*ssp2.Commit); ok {
				seqs = append(seqs, cm.CommitSeq)
			}
		}
		if d.Cursor() != seq || len(seqs) != 1 || seqs[0] != seq {
			t.Fatalf("delta up to %d with commits %v, want commit %d", d.Cursor(), seqs, seq)
		}
		if err := s.Ack(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	// The member with the socket fetched its deltas from the owner.
	if v := a.mustView(t, ""); v.self().Forwarded["deltas"] == 0 {
		t.Fatalf("%s forwarded no delta build: %v", a.name, v.self().Forwarded)
	}
}
