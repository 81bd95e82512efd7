package peer_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/cluster"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
	"github.com/synclane/synclane/transport/peer"
	"github.com/synclane/synclane/transport/realtime"
)

// membership is a Membership whose view the test sets.
type membership struct {
	mu sync.Mutex
	v  cluster.View
	ch chan struct{}
}

func newMembership() *membership { return &membership{ch: make(chan struct{})} }

func (m *membership) View() cluster.View {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.v
}

func (m *membership) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ch
}

// set makes the members ids the view.
func (m *membership) set(ids ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := cluster.View{Revision: m.v.Revision + 1, Healthy: true}
	for _, id := range ids {
		v.Members = append(v.Members, cluster.Member{ID: id, Incarnation: "i-" + id})
	}
	sort.Slice(v.Members, func(i, j int) bool { return v.Members[i].ID < v.Members[j].ID })
	m.v = v
	close(m.ch)
	m.ch = make(chan struct{})
}

func view(ids ...string) cluster.View {
	var v cluster.View
	for _, id := range ids {
		v.Members = append(v.Members, cluster.Member{ID: id})
	}
	return v
}

// ownedBy returns a partition name, none of not, that owners[k] owns in
// views[k], for every k.
func ownedBy(t *testing.T, views []cluster.View, owners []string, not ...string) string {
	t.Helper()
	for n := range 100_000 {
		p := fmt.Sprintf("p%d", n)
		ok := !slices.Contains(not, p)
		for k, v := range views {
			if m, _ := cluster.Owner(v, p); m.ID != owners[k] {
				ok = false
				break
			}
		}
		if ok {
			return p
		}
	}
	t.Fatalf("no partition is owned by %v in %v", owners, views)
	return ""
}

func testSecret(t *testing.T) peer.Secret {
	t.Helper()
	s, err := peer.NewSecret([]byte("cluster secret\n"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// server is an httptest server whose URL (the member ID) is known before
// its handler is.
func server(t *testing.T) (*httptest.Server, string) {
	srv := httptest.NewUnstartedServer(nil)
	return srv, "http://" + srv.Listener.Addr().String()
}

// sink is a fake HubSink recording every call as a line.
type sink struct {
	mu     sync.Mutex
	events []string
	// gate, when set, holds OnRegistration until it is closed.
	gate chan struct{}
}

func (s *sink) add(format string, args ...any) {
	s.mu.Lock()
	s.events = append(s.events, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

func (s *sink) OnCommit(p string, seq int64) { s.add("commit %s %d", p, seq) }
func (s *sink) OnCommitKeys(p string, commits []engine.CommitKeys) {
	var b strings.Builder
	for _, c := range commits {
		fmt.Fprintf(&b, " %d:%s:%v", c.Seq, strings.Join(c.Keys, ","), c.Any)
	}
	s.add("keys %s%s", p, b.String())
}
func (s *sink) OnCommitOutcome(p string, durable bool) { s.add("outcome %s %v", p, durable) }
func (s *sink) OnRegistration(p string, r engine.Registration) {
	s.mu.Lock()
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		<-gate
	}
	var subs []string
	for _, x := range r.Subscriptions {
		subs = append(subs, fmt.Sprintf("%s/%s/%d/%v/%v/%v", x.ID, x.Table, x.Cursor, x.Active, x.Ready, x.Effective))
	}
	s.add("reg %s %s %s w%d %s pulled=%v [%s]", p, r.ClientID, r.ActorID, r.WireVersion, r.LogEpoch, r.Pulled, strings.Join(subs, " "))
}
func (s *sink) RemotePresence(p, origin string, ev realtime.PresenceEvent) {
	s.add("presence %s %s %s %s %s %s/%s %s", p, origin, ev.Kind, ev.Key, ev.Socket, ev.ActorID, ev.ClientID, ev.Doc)
}
func (s *sink) DropRemotePresence(p, origin string) { s.add("drop %s %q", p, origin) }

func (s *sink) snapshot() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.events...)
}

// waitEvent waits for an event equal to want at index from or later and
// returns its index.
func (s *sink) waitEvent(t *testing.T, from int, want string) int {
	t.Helper()
	var at int
	waitFor(t, fmt.Sprintf("event %q from %d", want, from), 10*time.Second, func() bool {
		ev := s.snapshot()
		for i := from; i < len(ev); i++ {
			if ev[i] == want {
				at = i
				return true
			}
		}
		return false
	})
	return at
}

// has reports whether an event starting with prefix was recorded at from
// or later.
func (s *sink) has(from int, prefix string) bool {
	ev := s.snapshot()
	for i := from; i < len(ev); i++ {
		if strings.HasPrefix(ev[i], prefix) {
			return true
		}
	}
	return false
}

// waitFor polls cond (server state the test is not told about) until it
// holds or the deadline passes.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sinkMember is a member with a fake hub: a relay served at FollowPath.
type sinkMember struct {
	id    string
	relay *peer.Relay
	sink  *sink
	hooks engine.Config // the relay's hooks
}

type memberOpts struct {
	limits peer.RelayLimits
	maxSeq int64
	secret *peer.Secret
}

func newSinkMember(t *testing.T, ms cluster.Membership, o memberOpts) *sinkMember {
	t.Helper()
	srv, id := server(t)
	sec := testSecret(t)
	if o.secret != nil {
		sec = *o.secret
	}
	m := &sinkMember{id: id, sink: &sink{}}
	maxSeq := o.maxSeq
	m.relay = peer.NewRelay(peer.RelayConfig{Self: id, Membership: ms, Secret: sec, Hub: m.sink, Limits: o.limits,
		MaxSeq: func(context.Context, string) (int64, error) { return maxSeq, nil }})
	m.relay.Hooks(&m.hooks)
	mux := http.NewServeMux()
	mux.Handle(peer.FollowPath, m.relay)
	srv.Config.Handler = mux
	srv.Start()
	m.relay.Start()
	t.Cleanup(func() {
		srv.Close()
		m.relay.Close()
	})
	return m
}

// hubMember is a member with a real engine and realtime hub (on a memory
// store shared with the other members: one database) and its relay, all
// on one httptest server.
type hubMember struct {
	t     *testing.T
	id    string
	store *memory.Store
	eng   *engine.Engine
	hub   *realtime.Hub
	relay *peer.Relay
	url   string
}

var demo = schema.MustDemo()

func newHubMember(t *testing.T, ms cluster.Membership, store *memory.Store) *hubMember {
	t.Helper()
	srv, id := server(t)
	m := &hubMember{t: t, id: id, store: store, url: id}
	m.relay = peer.NewRelay(peer.RelayConfig{Self: id, Membership: ms, Secret: testSecret(t),
		MaxSeq: func(ctx context.Context, p string) (int64, error) {
			info, err := store.ReadPartition(ctx, p)
			return info.MaxCommitSeq, err
		}})
	m.hub = realtime.New(realtime.Options{Auth: auth.DevAuth{}, Cluster: m.relay})
	m.relay.SetHub(m.hub)
	cfg := engine.Config{Schema: demo, Backend: store.Backend(), Resolver: engine.AllowAll(demo)}
	m.hub.Hooks(&cfg)
	m.relay.Hooks(&cfg)
	eng, err := engine.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.eng = eng
	m.hub.Start(eng)
	mux := http.NewServeMux()
	mux.Handle(peer.FollowPath, m.relay)
	mux.Handle("/", httpsync.NewMux(eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{}}, Realtime: m.hub}))
	srv.Config.Handler = mux
	srv.Start()
	m.relay.Start()
	t.Cleanup(func() {
		srv.Close()
		m.hub.Close()
		m.relay.Close()
		_ = eng.Close()
	})
	return m
}

func header(actor string) http.Header { return http.Header{"X-Actor": {actor}} }

func (m *hubMember) httpClient(actor, clientID string) *httpsync.Client {
	return &httpsync.Client{URL: m.url + "/sync", ClientID: clientID, Header: header(actor)}
}

// connect pulls list for id (actor and client id alike) through m and
// dials its socket at m.
func (m *hubMember) connect(ctx context.Context, id, list string) *realtime.Client {
	m.t.Helper()
	r := httpsynctest.NewReplica(m.httpClient(id, id), demo)
	r.Subscribe("sub-"+list, "todos", map[string][]string{"list_id": {list}})
	if err := r.CatchUp(ctx); err != nil {
		m.t.Fatal(err)
	}
	c, err := realtime.Dial(ctx, m.url+"/realtime", id, realtime.DialOptions{Header: header(id)})
	if err != nil {
		m.t.Fatalf("dial %s: %v", id, err)
	}
	m.t.Cleanup(func() { c.CloseNow() })
	return c
}

var rowCodec = ssp2.NewRowCodec(demo.Table("todos").Columns)

// push upserts one todo through c and returns its commit seq.
func push(t *testing.T, ctx context.Context, c *httpsync.Client, id, list string) int64 {
	t.Helper()
	row, err := rowCodec.AppendSparse(nil, ssp2.Row{id, list, "title " + id, false, int64(1), int64(1)}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	prs, err := c.Push(ctx, &ssp2.PushCommit{ClientCommitID: "cc-" + id,
		Operations: []ssp2.Operation{{Table: "todos", RowID: id, Op: ssp2.OpUpsert, Payload: row}}})
	if err != nil {
		t.Fatalf("push %s: %v", id, err)
	}
	if len(prs) != 1 || prs[0].Status != ssp2.CommitApplied {
		t.Fatalf("push %s: %+v", id, prs)
	}
	return *prs[0].CommitSeq
}

// next returns the next event of c that is not a heartbeat.
func next(t *testing.T, ctx context.Context, c *realtime.Client) any {
	t.Helper()
	for {
		ev, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("next event: %v", err)
		}
		if _, hb := ev.(*ssp2.Heartbeat); !hb {
			return ev
		}
	}
}

func nextPresence(t *testing.T, ctx context.Context, c *realtime.Client) *ssp2.PresenceFanout {
	t.Helper()
	ev := next(t, ctx, c)
	p, ok := ev.(*ssp2.PresenceFanout)
	if !ok {
		t.Fatalf("want presence, got %T %+v", ev, ev)
	}
	return p
}

// expectPresence checks a fanout's kind, key, actor, client and doc ("":
// none).
func expectPresence(t *testing.T, got *ssp2.PresenceFanout, kind, key, id, doc string) {
	t.Helper()
	if got.Kind != kind || got.ScopeKey != key || got.ClientID != id || got.ActorID != id || string(got.Doc) != doc {
		t.Fatalf("presence %s %s %s/%s %s, want %s %s %s/%s %s", got.Kind, got.ScopeKey, got.ActorID, got.ClientID, got.Doc, kind, key, id, id, doc)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
