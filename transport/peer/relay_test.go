package peer_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/cluster"
	"github.com/synclane/synclane/internal/promtext"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/peer"
	"github.com/synclane/synclane/transport/realtime"
)

// The follow link answers 401 to a call not signed with the cluster
// secret, before anything else; a signed one is upgraded and speaks the
// wire format: hello, then a follow answered with followed and the
// newest seq. A hello of another version is refused (1008).
func TestFollowLinkSignature(t *testing.T) {
	ms := newMembership()
	a := newSinkMember(t, ms, memberOpts{maxSeq: 41})
	ms.set(a.id)
	ctx := ctxT(t)
	url := a.id + peer.FollowPath
	other, _ := peer.NewSecret([]byte("another secret"))
	sec := testSecret(t)
	cases := []struct {
		name string
		sign func(*http.Request)
	}{
		{"unsigned", func(*http.Request) {}},
		{"other secret", func(r *http.Request) { other.Sign(r, "http://tester", time.Now()) }},
		{"signed for another path", func(r *http.Request) {
			r2, _ := http.NewRequest(http.MethodGet, a.id+"/_cluster/v1/sync", nil)
			sec.Sign(r2, "http://tester", time.Now())
			r.Header = r2.Header
		}},
		{"signed for another method", func(r *http.Request) {
			r2, _ := http.NewRequest(http.MethodPost, url, nil)
			sec.Sign(r2, "http://tester", time.Now())
			r.Header = r2.Header
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			c.sign(req)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("status %d, want 401", resp.StatusCode)
			}
			// The same as a WebSocket upgrade.
			req2, _ := http.NewRequest(http.MethodGet, url, nil)
			c.sign(req2)
			conn, resp2, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: req2.Header})
			if err == nil {
				_ = conn.CloseNow()
				t.Fatal("upgrade accepted")
			}
			if resp2 == nil || resp2.StatusCode != http.StatusUnauthorized {
				t.Fatalf("upgrade answered %v, want 401", resp2)
			}
		})
	}
	if st := a.relay.Stats(); st.InLinks != 0 || st.Received != 0 {
		t.Fatalf("refused calls reached the relay: %+v", st)
	}

	dial := func() *websocket.Conn {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		sec.Sign(req, "http://tester", time.Now())
		conn, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: req.Header})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.CloseNow() })
		return conn
	}
	send := func(conn *websocket.Conn, m string) {
		if err := conn.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	read := func(conn *websocket.Conn) map[string]any {
		_, b, err := conn.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	conn := dial()
	send(conn, `{"op":"hello","v":1,"member":"http://tester"}`)
	if h := read(conn); h["op"] != "hello" || h["v"] != float64(1) || h["member"] != a.id {
		t.Fatalf("hello %v", h)
	}
	send(conn, `{"op":"follow","p":"px","id":7}`)
	if m := read(conn); m["op"] != "followed" || m["p"] != "px" || m["id"] != float64(7) {
		t.Fatalf("answer %v", m)
	}
	if m := read(conn); m["op"] != "commit" || m["p"] != "px" || m["seq"] != float64(41) {
		t.Fatalf("newest seq %v", m)
	}

	old := dial()
	send(old, `{"op":"hello","v":2,"member":"http://tester"}`)
	read(old) // the owner's hello
	_, _, err := old.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("a v2 hello: %v, want a 1008 close", err)
	}
}

// A follower gets, in order, what the owner's commit hooks report for
// the partitions it follows there (keys, outcome, commit, registration),
// after the follow answer (remote presence dropped, undecided commits
// settled, the newest seq); nothing of partitions it does not follow;
// nothing once it unfollowed. The hooks still call the ones set before.
func TestRelayCommitEvents(t *testing.T) {
	ms := newMembership()
	a := newSinkMember(t, ms, memberOpts{maxSeq: 41})
	b := newSinkMember(t, ms, memberOpts{maxSeq: 99})
	ms.set(a.id, b.id)
	v := view(a.id, b.id)
	p := ownedBy(t, []cluster.View{v}, []string{a.id})
	q := ownedBy(t, []cluster.View{v}, []string{a.id}, p)
	b.relay.Follow(p)
	at := b.sink.waitEvent(t, 0, "commit "+p+" 41")
	got := b.sink.snapshot()[:at+1]
	want := []string{"drop " + p + ` ""`, "outcome " + p + " false", "commit " + p + " 41"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("follow answer: %q, want %q", got, want)
	}
	waitFor(t, "the follow counted", 10*time.Second, func() bool { return a.relay.Stats().Followers == 1 })

	h := &a.hooks
	h.OnCommitKeys(q, []engine.CommitKeys{{Seq: 5, Keys: []string{"list:x"}}}) // q is not followed
	h.OnCommitKeys(p, []engine.CommitKeys{{Seq: 42, Keys: []string{"list:l1", "list:l2"}}, {Seq: 43, Any: true}})
	h.OnCommitOutcome(p, true)
	h.OnCommit(p, 43)
	h.OnRegistration(p, engine.Registration{ClientID: "c1", ActorID: "ada", WireVersion: 2, LogEpoch: "e1", Pulled: true,
		Subscriptions: []engine.RegisteredSubscription{{ID: "s1", Table: "todos", Effective: map[string][]string{"list_id": {"l1"}}, Cursor: 43, Active: true, Ready: true}}})
	h.OnRegistration(p, engine.Registration{ClientID: "c2", ActorID: "bob", WireVersion: 1})
	last := b.sink.waitEvent(t, at+1, "reg "+p+" c2 bob w1  pulled=false []")
	got = b.sink.snapshot()[at+1 : last+1]
	want = []string{
		"keys " + p + " 42:list:l1,list:l2:false 43::true",
		"outcome " + p + " true",
		"commit " + p + " 43",
		"reg " + p + " c1 ada w2 e1 pulled=true [s1/todos/43/true/true/map[list_id:[l1]]]",
		"reg " + p + " c2 bob w1  pulled=false []",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("relayed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if st := b.relay.Stats(); st.OutLinks != 1 || st.Followed != 1 || st.FollowedRemote != 1 {
		t.Fatalf("follower stats %+v", st)
	}
	if st := a.relay.Stats(); st.InLinks != 1 || st.Followers != 1 {
		t.Fatalf("owner stats %+v", st)
	}
	metrics, err := promtext.Collect(a.relay)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"synclane_cluster_followers 1", `synclane_cluster_links{direction="in"} 1`} {
		if !promtext.Has(metrics, line) {
			t.Fatalf("metrics lack %q:\n%s", line, metrics)
		}
	}

	// Unfollowed: p's commits no longer come; q's (followed now) do, on
	// the same link, in order.
	b.relay.Unfollow(p)
	waitFor(t, "the unfollow", 10*time.Second, func() bool { return a.relay.Stats().Followers == 0 })
	b.relay.Follow(q)
	at = b.sink.waitEvent(t, last+1, "commit "+q+" 41")
	h.OnCommit(p, 44)
	h.OnCommit(q, 45)
	end := b.sink.waitEvent(t, at+1, "commit "+q+" 45")
	if b.sink.has(last+1, "commit "+p) || end != at+1 {
		t.Fatalf("after the unfollow: %q", b.sink.snapshot()[last+1:])
	}

	// The hooks keep the ones set before.
	var called []string
	cfg := engine.Config{
		OnCommit:        func(p string, seq int64) { called = append(called, fmt.Sprint("commit ", seq)) },
		OnCommitKeys:    func(string, []engine.CommitKeys) { called = append(called, "keys") },
		OnCommitOutcome: func(string, bool) { called = append(called, "outcome") },
		OnRegistration:  func(string, engine.Registration) { called = append(called, "reg") },
	}
	a.relay.Hooks(&cfg)
	cfg.OnCommitKeys("x", nil)
	cfg.OnCommitOutcome("x", true)
	cfg.OnCommit("x", 3)
	cfg.OnRegistration("x", engine.Registration{})
	if strings.Join(called, ",") != "keys,outcome,commit 3,reg" {
		t.Fatalf("previous hooks: %v", called)
	}
}

// Presence between sockets on two members, both ways: join, update,
// leave, the burst of a late socket (local and remote documents alike,
// the same fanout as a local one), the leave of a socket that closes, no
// echo of a socket's own; and when a member's link drops, a leave for
// each of its entries.
func TestRelayPresenceAcrossMembers(t *testing.T) {
	store := memory.New()
	t.Cleanup(func() { _ = store.Close() })
	ms := newMembership()
	m1 := newHubMember(t, ms, store)
	m2 := newHubMember(t, ms, store.Share())
	ms.set(m1.id, m2.id)
	owner, follower := m1, m2
	if o, _ := cluster.Owner(view(m1.id, m2.id), auth.DefaultPartition); o.ID == m2.id {
		owner, follower = m2, m1
	}
	ctx := ctxT(t)
	const key = "list:l1"
	a := owner.connect(ctx, "a", "l1")
	b := follower.connect(ctx, "b", "l1")
	publish := func(c *realtime.Client, doc string) {
		t.Helper()
		var d json.RawMessage
		if doc != "" {
			d = json.RawMessage(doc)
		}
		if err := c.Publish(ctx, key, d); err != nil {
			t.Fatal(err)
		}
	}

	publish(a, `{"who":"a"}`) // owner → follower
	expectPresence(t, nextPresence(t, ctx, b), ssp2.PresenceJoin, key, "a", `{"who":"a"}`)
	publish(b, `{"who":"b"}`) // follower → owner
	expectPresence(t, nextPresence(t, ctx, a), ssp2.PresenceJoin, key, "b", `{"who":"b"}`)
	publish(a, `{"who":"a","n":2}`)
	// b's next event is a's update, not an echo of its own join.
	expectPresence(t, nextPresence(t, ctx, b), ssp2.PresenceUpdate, key, "a", `{"who":"a","n":2}`)

	// Late sockets on both members get every document of the key.
	burst := func(c *realtime.Client, n int) map[string]*ssp2.PresenceFanout {
		t.Helper()
		got := map[string]*ssp2.PresenceFanout{}
		for range n {
			p := nextPresence(t, ctx, c)
			if p.Kind != ssp2.PresenceJoin || p.ScopeKey != key {
				t.Fatalf("burst: %+v", p)
			}
			got[p.ClientID] = p
		}
		return got
	}
	c := follower.connect(ctx, "c", "l1")
	d := owner.connect(ctx, "d", "l1")
	bc, bd := burst(c, 2), burst(d, 2)
	for _, id := range []string{"a", "b"} {
		x, y := bc[id], bd[id] // one of them heard a remote entry, the other a local one
		if x == nil || y == nil || x.ActorID != id || y.ActorID != id || string(x.Doc) != string(y.Doc) || x.ScopeKey != y.ScopeKey || x.Kind != y.Kind {
			t.Fatalf("burst of %s: on the follower %+v, on the owner %+v", id, x, y)
		}
	}
	if string(bc["a"].Doc) != `{"who":"a","n":2}` || string(bc["b"].Doc) != `{"who":"b"}` {
		t.Fatalf("burst docs: a %s, b %s", bc["a"].Doc, bc["b"].Doc)
	}

	// A leave (null doc) reaches every other socket, wherever it is.
	publish(b, "")
	for _, o := range []*realtime.Client{a, c, d} {
		expectPresence(t, nextPresence(t, ctx, o), ssp2.PresenceLeave, key, "b", "")
	}
	// A socket that closes leaves.
	publish(c, `{"who":"c"}`)
	for _, o := range []*realtime.Client{a, b, d} {
		expectPresence(t, nextPresence(t, ctx, o), ssp2.PresenceJoin, key, "c", `{"who":"c"}`)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*realtime.Client{a, b, d} {
		expectPresence(t, nextPresence(t, ctx, o), ssp2.PresenceLeave, key, "c", "")
	}

	// The follower's link drops (its relay stops): the owner's sockets
	// hear a leave for each of its entries.
	publish(b, `{"who":"b","back":true}`)
	e := follower.connect(ctx, "e", "l1")
	for _, n := range burst(e, 2) { // a's (remote) and b's (local)
		if n.ClientID != "a" && n.ClientID != "b" {
			t.Fatalf("e's burst: %+v", n)
		}
	}
	publish(e, `{"who":"e"}`)
	for _, o := range []*realtime.Client{a, d} {
		got := map[string]string{}
		for range 2 {
			p := nextPresence(t, ctx, o)
			got[p.Kind+" "+p.ClientID] = string(p.Doc)
		}
		if got["join b"] != `{"who":"b","back":true}` || got["join e"] != `{"who":"e"}` {
			t.Fatalf("the owner's socket heard %v", got)
		}
	}
	follower.relay.Close()
	for _, o := range []*realtime.Client{a, d} {
		left := map[string]bool{}
		for range 2 {
			p := nextPresence(t, ctx, o)
			if p.Kind != ssp2.PresenceLeave {
				t.Fatalf("after the link dropped: %+v", p)
			}
			left[p.ClientID] = true
		}
		if !left["b"] || !left["e"] {
			t.Fatalf("leaves after the link dropped: %v", left)
		}
	}
	waitFor(t, "the owner forgot the link", 10*time.Second, func() bool { return owner.relay.Stats().InLinks == 0 })
}

// A commit on the partition's owner wakes a socket on a follower: the
// owner relays its hooks, the follower's hub builds the delta.
func TestRelayCommitReachesFollowerSocket(t *testing.T) {
	store := memory.New()
	t.Cleanup(func() { _ = store.Close() })
	ms := newMembership()
	m1 := newHubMember(t, ms, store)
	m2 := newHubMember(t, ms, store.Share())
	ms.set(m1.id, m2.id)
	owner, follower := m1, m2
	if o, _ := cluster.Owner(view(m1.id, m2.id), auth.DefaultPartition); o.ID == m2.id {
		owner, follower = m2, m1
	}
	ctx := ctxT(t)
	b := follower.connect(ctx, "b", "l1")
	waitFor(t, "b live", 10*time.Second, func() bool {
		s := follower.hub.Sessions(auth.DefaultPartition)
		return len(s) == 1 && s[0].Live
	})
	ada := owner.httpClient("ada", "ada")
	for i := range 3 {
		seq := push(t, ctx, ada, fmt.Sprintf("t%d", i), "l1")
		ev := next(t, ctx, b)
		d, ok := ev.(*realtime.Delta)
		if !ok {
			t.Fatalf("commit %d: want a delta, got %T %+v", seq, ev, ev)
		}
		var seqs []int64
		for _, f := range d.Message.Frames {
			if c, ok := f.(*ssp2.Commit); ok {
				seqs = append(seqs, c.CommitSeq)
			}
		}
		if d.Cursor() != seq || len(seqs) != 1 || seqs[0] != seq {
			t.Fatalf("delta up to %d with commits %v, want commit %d", d.Cursor(), seqs, seq)
		}
		if err := b.Ack(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	if st := follower.relay.Stats(); st.FollowedRemote != 1 || st.Received == 0 {
		t.Fatalf("follower stats %+v", st)
	}
	if st := follower.eng.Metrics(); st.RemoteCommits != 0 {
		t.Fatalf("the follower's engine has a commit feed: %+v", st)
	}
}

// When ownership moves (a view change), every member re-follows at the
// new owner: the old owner's remote presence is dropped, local presence is
// published at the new owner (which relays it to the others), and the new
// owner's newest seq is delivered as a commit; a member that becomes the
// owner tells its hub the newest seq and feeds it the followers'
// presence.
func TestRelayOwnershipMove(t *testing.T) {
	ms := newMembership()
	A := newSinkMember(t, ms, memberOpts{maxSeq: 10})
	B := newSinkMember(t, ms, memberOpts{maxSeq: 20})
	C := newSinkMember(t, ms, memberOpts{maxSeq: 30})
	p := ownedBy(t, []cluster.View{view(A.id, B.id, C.id), view(B.id, C.id)}, []string{A.id, C.id})
	ms.set(A.id, B.id, C.id)
	for _, m := range []*sinkMember{A, B, C} {
		m.relay.Follow(p) // every hub holds sockets of p
	}
	B.relay.Presence(p, realtime.PresenceEvent{Key: "k", Kind: ssp2.PresenceJoin, ActorID: "ab", ClientID: "cb", Socket: "s1", Doc: json.RawMessage(`{"b":1}`)})
	A.relay.Presence(p, realtime.PresenceEvent{Key: "k", Kind: ssp2.PresenceJoin, ActorID: "aa", ClientID: "ca", Socket: "s9", Doc: json.RawMessage(`{"a":1}`)})
	bJoin := func(origin string) string {
		return fmt.Sprintf(`presence %s %s join k %s|s1 ab/cb {"b":1}`, p, origin, B.id)
	}
	aJoin := fmt.Sprintf(`presence %s %s join k %s|s9 aa/ca {"a":1}`, p, A.id, A.id)
	A.sink.waitEvent(t, 0, bJoin(B.id)) // the owner's hub
	C.sink.waitEvent(t, 0, bJoin(B.id)) // another follower, through the owner
	B.sink.waitEvent(t, 0, aJoin)
	C.sink.waitEvent(t, 0, aJoin)
	if B.sink.has(0, bJoin(B.id)) {
		t.Fatal("B heard its own socket")
	}
	waitFor(t, "A serving two followers", 10*time.Second, func() bool { return A.relay.Stats().Followers == 2 })

	// A leaves the view: C owns p.
	marks := map[*sinkMember]int{A: len(A.sink.snapshot()), B: len(B.sink.snapshot()), C: len(C.sink.snapshot())}
	ms.set(B.id, C.id)
	// B: the presence it had through A is dropped; C answers its follow
	// with the newest seq and relays A's socket, which A published again
	// at C.
	i := B.sink.waitEvent(t, marks[B], "drop "+p+` ""`)
	B.sink.waitEvent(t, i, "commit "+p+" 30")
	B.sink.waitEvent(t, i, aJoin)
	// C, the new owner: its hub gets the newest seq and the followers'
	// presence, published again at C.
	i = C.sink.waitEvent(t, marks[C], "drop "+p+` ""`)
	C.sink.waitEvent(t, i, "commit "+p+" 30")
	C.sink.waitEvent(t, i, bJoin(B.id))
	C.sink.waitEvent(t, i, aJoin)
	// A (still running, out of the view) follows at C too.
	i = A.sink.waitEvent(t, marks[A], "drop "+p+` ""`)
	A.sink.waitEvent(t, i, "commit "+p+" 30")
	A.sink.waitEvent(t, i, bJoin(B.id))
	waitFor(t, "A without followers, C with two", 10*time.Second, func() bool {
		return A.relay.Stats().Followers == 0 && C.relay.Stats().Followers == 2
	})

	// B alone in the view: it owns p now.
	marks = map[*sinkMember]int{B: len(B.sink.snapshot())}
	ms.set(B.id)
	i = B.sink.waitEvent(t, marks[B], "drop "+p+` ""`)
	B.sink.waitEvent(t, i, "commit "+p+" 20") // its own newest seq
	B.sink.waitEvent(t, i, aJoin)             // A re-published at B
	waitFor(t, "B serving A and C", 10*time.Second, func() bool { return B.relay.Stats().Followers == 2 })
	if st := B.relay.Stats(); st.FollowedRemote != 0 {
		t.Fatalf("B follows p remotely while owning it: %+v", st)
	}

	// A hub that releases its state of p and makes it again gets the
	// followers' presence again (from the owner's table).
	B.relay.Unfollow(p)
	mark := len(B.sink.snapshot())
	B.relay.Follow(p)
	B.sink.waitEvent(t, mark, aJoin)
}

// A follower that does not keep up has its link closed when the owner's
// send queue is full; it re-dials and starts over: the follow is
// answered again (remote presence dropped, the newest seq delivered).
func TestRelayOverflowResyncs(t *testing.T) {
	ms := newMembership()
	a := newSinkMember(t, ms, memberOpts{maxSeq: 41, limits: peer.RelayLimits{QueueMessages: 8, QueueBytes: 1 << 20}})
	b := newSinkMember(t, ms, memberOpts{limits: peer.RelayLimits{QueueMessages: 2}})
	ms.set(a.id, b.id)
	p := ownedBy(t, []cluster.View{view(a.id, b.id)}, []string{a.id})
	b.relay.Follow(p)
	first := b.sink.waitEvent(t, 0, "commit "+p+" 41")
	waitFor(t, "the follow counted", 10*time.Second, func() bool { return a.relay.Stats().Followers == 1 })

	// b's hub stops taking events: its relay stops reading the link.
	gate := make(chan struct{})
	b.sink.mu.Lock()
	b.sink.gate = gate
	b.sink.mu.Unlock()
	reg := engine.Registration{ClientID: "c", ActorID: "a", Pulled: true}
	for i := range 300 {
		reg.Subscriptions = append(reg.Subscriptions, engine.RegisteredSubscription{ID: fmt.Sprintf("sub-%03d-%s", i, strings.Repeat("x", 150)), Table: "todos"})
	}
	base := a.relay.Stats().Sent
	pushed := uint64(0)
	for a.relay.Stats().Overflows == 0 {
		if pushed > 100_000 {
			t.Fatal("the owner's send queue never overflowed")
		}
		a.hooks.OnRegistration(p, reg)
		pushed++
		// At most a queue's worth (and the one being written) in flight.
		waitFor(t, "the owner writing", 10*time.Second, func() bool {
			st := a.relay.Stats()
			return st.Overflows > 0 || st.Sent+10 >= base+pushed
		})
	}
	close(gate)
	// b re-dials; its follow is answered again.
	again := b.sink.waitEvent(t, first+1, "commit "+p+" 41")
	evs := b.sink.snapshot()[first+1 : again]
	if len(evs) < 2 || evs[len(evs)-1] != "outcome "+p+" false" || evs[len(evs)-2] != "drop "+p+` ""` {
		t.Fatalf("before the second answer: %q", evs[max(0, len(evs)-2):])
	}
	if st := b.relay.Stats(); st.Dials < 2 || st.FollowedRemote != 1 {
		t.Fatalf("follower stats %+v", st)
	}
	waitFor(t, "the owner serving the new link", 10*time.Second, func() bool {
		st := a.relay.Stats()
		return st.InLinks == 1 && st.Followers == 1
	})
	if st := a.relay.Stats(); st.Overflows != 1 || st.Dropped == 0 {
		t.Fatalf("owner stats %+v", st)
	}
}

// The bounds: a resync of many partitions does not overflow the small
// queues it goes through (its messages are not live traffic); a link
// follows at most FollowsPerLink partitions (the others are refused);
// the owner keeps at most PresencePerPartition follower entries of a
// partition and no document over PresenceBytes.
func TestRelayLimits(t *testing.T) {
	ms := newMembership()
	a := newSinkMember(t, ms, memberOpts{maxSeq: 7, limits: peer.RelayLimits{QueueMessages: 4, FollowsPerLink: 60, PresencePerPartition: 2, PresenceBytes: 64}})
	b := newSinkMember(t, ms, memberOpts{limits: peer.RelayLimits{QueueMessages: 8}})
	ms.set(a.id, b.id)
	v := []cluster.View{view(a.id, b.id)}
	var parts []string
	for range 80 {
		parts = append(parts, ownedBy(t, v, []string{a.id}, parts...))
	}
	for _, p := range parts {
		b.relay.Follow(p)
	}
	waitFor(t, "60 follows answered", 10*time.Second, func() bool { return b.relay.Stats().FollowedRemote == 60 })
	var answered []string // "commit P 7"
	waitFor(t, "the newest seq of each", 10*time.Second, func() bool {
		answered = answered[:0]
		for _, e := range b.sink.snapshot() {
			if strings.HasPrefix(e, "commit ") && strings.HasSuffix(e, " 7") {
				answered = append(answered, e)
			}
		}
		return len(answered) == 60
	})
	if st := a.relay.Stats(); st.Overflows != 0 || st.Followers != 60 || st.InLinks != 1 {
		t.Fatalf("owner stats %+v", st)
	}
	if st := b.relay.Stats(); st.Overflows != 0 || st.Dials != 1 {
		t.Fatalf("follower stats %+v", st)
	}

	p := strings.Fields(answered[0])[1] // a partition followed at a
	a.relay.Follow(p)                   // the owner's hub holds sockets of p: follower presence reaches it
	for i, doc := range []string{`{"n":1}`, `{"n":2,"pad":"` + strings.Repeat("x", 64) + `"}`, `{"n":3}`, `{"n":4}`} {
		b.relay.Presence(p, realtime.PresenceEvent{Key: "k", Kind: ssp2.PresenceJoin, ActorID: "x", ClientID: fmt.Sprint("c", i), Socket: fmt.Sprint("s", i), Doc: json.RawMessage(doc)})
	}
	b.relay.Presence(p, realtime.PresenceEvent{Key: "k", Kind: ssp2.PresenceUpdate, ActorID: "x", ClientID: "c0", Socket: "s0", Doc: json.RawMessage(`{"n":5}`)})
	join := func(i int, doc string) string {
		return fmt.Sprintf("presence %s %s join k %s|s%d x/c%d %s", p, b.id, b.id, i, i, doc)
	}
	at := a.sink.waitEvent(t, 0, fmt.Sprintf("presence %s %s update k %s|s0 x/c0 {\"n\":5}", p, b.id, b.id))
	var got []string
	for _, e := range a.sink.snapshot()[:at] {
		if strings.HasPrefix(e, "presence ") {
			got = append(got, e)
		}
	}
	// c1's document is over 64 bytes; c3's join is beyond two entries.
	if want := []string{join(0, `{"n":1}`), join(2, `{"n":3}`)}; strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the owner's hub got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if st := a.relay.Stats(); st.Dropped < 2 {
		t.Fatalf("owner stats %+v: two presence events dropped", st)
	}
	if st := b.relay.Stats(); st.Overflows != 0 || st.Dials != 1 {
		t.Fatalf("follower stats %+v", st)
	}
}

// With real hubs: when the partition's owner leaves the view, the members
// holding its sockets re-follow at the new owner, so presence keeps
// flowing between them (after a leave and a join of each remote document)
// and a commit on the new owner reaches the sockets of the others.
func TestRelayMoveWithSockets(t *testing.T) {
	store := memory.New()
	t.Cleanup(func() { _ = store.Close() })
	ms := newMembership()
	m := []*hubMember{newHubMember(t, ms, store), newHubMember(t, ms, store.Share()), newHubMember(t, ms, store.Share())}
	ids := []string{m[0].id, m[1].id, m[2].id}
	ms.set(ids...)
	old, _ := cluster.Owner(view(ids...), auth.DefaultPartition)
	var rest []*hubMember // the members left after the owner goes
	for _, x := range m {
		if x.id != old.ID {
			rest = append(rest, x)
		}
	}
	ctx := ctxT(t)
	const key = "list:l1"
	a := rest[0].connect(ctx, "a", "l1")
	b := rest[1].connect(ctx, "b", "l1")
	if err := a.Publish(ctx, key, json.RawMessage(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	expectPresence(t, nextPresence(t, ctx, b), ssp2.PresenceJoin, key, "a", `{"v":1}`)

	ms.set(rest[0].id, rest[1].id)
	newOwner, _ := cluster.Owner(view(rest[0].id, rest[1].id), auth.DefaultPartition)
	var owner, other *hubMember
	var onOther *realtime.Client
	if newOwner.ID == rest[0].id {
		owner, other, onOther = rest[0], rest[1], b
	} else {
		owner, other, onOther = rest[1], rest[0], a
	}
	waitFor(t, "the non-owner following at the new owner", 10*time.Second, func() bool {
		st := other.relay.Stats()
		return st.FollowedRemote == 1 && owner.relay.Stats().Followers >= 1
	})
	// Presence both ways, through the new owner: each socket eventually
	// hears the other's new document (after the move's leave and join).
	until := func(c *realtime.Client, id, doc string) {
		t.Helper()
		for {
			p := nextPresence(t, ctx, c)
			if p.ClientID == id && string(p.Doc) == doc {
				return
			}
		}
	}
	if err := a.Publish(ctx, key, json.RawMessage(`{"v":2}`)); err != nil {
		t.Fatal(err)
	}
	until(b, "a", `{"v":2}`)
	if err := b.Publish(ctx, key, json.RawMessage(`{"w":1}`)); err != nil {
		t.Fatal(err)
	}
	until(a, "b", `{"w":1}`)

	// A commit on the new owner reaches the other member's socket.
	waitFor(t, "the socket on the other member live", 10*time.Second, func() bool {
		s := other.hub.Sessions(auth.DefaultPartition)
		return len(s) == 1 && s[0].Live
	})
	seq := push(t, ctx, owner.httpClient("ada", "ada"), "t-move", "l1")
	ev := next(t, ctx, onOther)
	for {
		if _, ok := ev.(*ssp2.PresenceFanout); !ok {
			break
		}
		ev = next(t, ctx, onOther) // presence of the move still queued
	}
	switch e := ev.(type) {
	case *realtime.Delta:
		if e.Cursor() != seq {
			t.Fatalf("delta up to %d, want %d", e.Cursor(), seq)
		}
	case *ssp2.Wake:
		if e.Cursor < seq {
			t.Fatalf("wake-up at %d, want %d", e.Cursor, seq)
		}
	default:
		t.Fatalf("want the commit, got %T %+v", ev, ev)
	}
}
