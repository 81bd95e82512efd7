package realtime_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/operations"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
	"github.com/synclane/synclane/transport/realtime"
)

// testStore is a store a test opens: a backend package's store, giving the
// engine its roles (Backend), with its handle.
type testStore interface {
	Backend() storage.Backend
	Close() error
}

// fixture is synclane with realtime over real loopback sockets.
type fixture struct {
	t      testing.TB
	schema *schema.Schema
	store  testStore
	eng    *engine.Engine
	hub    *realtime.Hub
	srv    *httptest.Server

	mu     sync.Mutex
	grants map[string]map[string][]string
	// failing lists the actors whose scope resolution fails.
	failing map[string]bool
	// gate, when set, blocks the scope resolver until it is closed;
	// entered, when set, is sent to as a resolution starts waiting on it.
	gate    chan struct{}
	entered chan struct{}
}

type fixtureOpts struct {
	hub   realtime.Options
	store testStore
	// ownStore: the caller closes the store.
	ownStore bool
	feed     engine.CommitFeed
	now      func() time.Time
	flush    time.Duration
	// ops, when set, builds the engine's remote operation registry.
	ops func(*schema.Schema) *operations.Registry
	// auth, when set, authenticates instead of auth.DevAuth (hub and
	// POST /sync alike).
	auth auth.Authenticator
	// wire is the engine's wire-version window (nil: the default, 3).
	wire []uint16
	// schema is the schema served (nil: the demo schema, table todos).
	schema *schema.Schema
}

func newFixture(t testing.TB, o fixtureOpts) *fixture {
	t.Helper()
	f := &fixture{t: t, schema: o.schema, grants: map[string]map[string][]string{}}
	if f.schema == nil {
		f.schema = schema.MustDemo()
	}
	f.store = o.store
	if f.store == nil {
		st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "synclane.db"), sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		f.store = st
	}
	if o.auth == nil {
		o.auth = auth.DevAuth{}
	}
	o.hub.Auth = o.auth
	f.hub = realtime.New(o.hub)
	cfg := engine.Config{Schema: f.schema, Backend: f.store.Backend(), Now: o.now, ClientFlushInterval: o.flush,
		Resolver: engine.ScopeResolverFunc(f.resolve), Feed: o.feed, WireVersions: o.wire}
	cfg.Extensions = []engine.Extension{f.hub} // its hooks before New, Start after
	if o.ops != nil {
		cfg.Operations.Registry = o.ops(f.schema)
	}
	eng, err := engine.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.eng = eng
	f.srv = httptest.NewServer(httpsync.NewMux(eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: o.auth}, Realtime: f.hub}))
	t.Cleanup(func() {
		f.srv.Close()
		f.hub.Close()
		_ = f.eng.Close()
		if !o.ownStore {
			_ = f.store.Close()
		}
		if st := f.hub.Stats(); st.Sockets != 0 {
			t.Errorf("%d sockets left after Close", st.Sockets)
		}
	})
	return f
}

func (f *fixture) resolve(ctx context.Context, id engine.Identity) (map[string][]string, error) {
	f.mu.Lock()
	gate, entered := f.gate, f.entered
	g, ok := f.grants[id.ActorID]
	failing := f.failing[id.ActorID]
	f.mu.Unlock()
	if gate != nil {
		if entered != nil {
			select {
			case entered <- struct{}{}:
			default:
			}
		}
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if failing {
		return nil, fmt.Errorf("the resolver of %s is down", id.ActorID)
	}
	if ok {
		return g, nil
	}
	return map[string][]string{"list_id": {"*"}}, nil
}

// fail makes actor's scope resolution fail (or succeed again).
func (f *fixture) fail(actor string, failing bool) {
	f.mu.Lock()
	if f.failing == nil {
		f.failing = map[string]bool{}
	}
	f.failing[actor] = failing
	f.mu.Unlock()
}

func (f *fixture) grant(actor string, g map[string][]string) {
	f.mu.Lock()
	f.grants[actor] = g
	f.mu.Unlock()
}

func (f *fixture) header(actor string) http.Header {
	return http.Header{"X-Actor": {actor}}
}

// httpClient is an SSP2 client over POST /sync.
func (f *fixture) httpClient(actor, clientID string) *httpsync.Client {
	return &httpsync.Client{URL: f.srv.URL + "/sync", ClientID: clientID, Header: f.header(actor)}
}

// replica is a client database subscribed to the given lists.
func (f *fixture) replica(actor, clientID string, lists ...string) *httpsynctest.Replica {
	r := httpsynctest.NewReplica(f.httpClient(actor, clientID), f.schema)
	for _, l := range lists {
		r.Subscribe("sub-"+l, "todos", map[string][]string{"list_id": {l}})
	}
	return r
}

func (f *fixture) dial(ctx context.Context, actor, clientID string) (*realtime.Client, error) {
	return realtime.Dial(ctx, f.srv.URL+"/realtime", clientID, realtime.DialOptions{Header: f.header(actor)})
}

func (f *fixture) mustDial(ctx context.Context, actor, clientID string) *realtime.Client {
	f.t.Helper()
	c, err := f.dial(ctx, actor, clientID)
	if err != nil {
		f.t.Fatalf("dial %s: %v", clientID, err)
	}
	f.t.Cleanup(func() { c.CloseNow() })
	return c
}

// follow pulls list for id (actor and client id alike), registering its
// subscription, and dials its socket.
func (f *fixture) follow(ctx context.Context, id, list string) *realtime.Client {
	f.t.Helper()
	if err := f.replica(id, id, list).CatchUp(ctx); err != nil {
		f.t.Fatal(err)
	}
	return f.mustDial(ctx, id, id)
}

var rowCodec = ssp2.NewRowCodec(schema.MustDemo().Table("todos").Columns)

// todo is the wire-v3 payload of a whole todo (every column present).
func todo(id, list, title string) []byte {
	b, err := rowCodec.AppendSparse(nil, ssp2.Row{id, list, title, false, int64(1), int64(1)}, nil, 0)
	if err != nil {
		panic(err)
	}
	return b
}

// fullTodo is the full-row encoding of the todo that todo(id, list,
// title) pushes: the row a COMMIT change carries.
func fullTodo(id, list, title string) []byte {
	b, err := rowCodec.Append(nil, ssp2.Row{id, list, title, false, int64(1), int64(1)})
	if err != nil {
		panic(err)
	}
	return b
}

// push upserts one todo through c and returns its commit seq.
func push(t testing.TB, ctx context.Context, c *httpsync.Client, id, list, title string) int64 {
	t.Helper()
	prs, err := c.Push(ctx, &ssp2.PushCommit{ClientCommitID: "cc-" + id + "-" + uuid.NewString(),
		Operations: []ssp2.Operation{{Table: "todos", RowID: id, Op: ssp2.OpUpsert, Payload: todo(id, list, title)}}})
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

func nextDelta(t *testing.T, ctx context.Context, c *realtime.Client) *realtime.Delta {
	t.Helper()
	ev := next(t, ctx, c)
	d, ok := ev.(*realtime.Delta)
	if !ok {
		t.Fatalf("want a delta, got %s", describe(ev))
	}
	return d
}

func nextWake(t *testing.T, ctx context.Context, c *realtime.Client) *ssp2.Wake {
	t.Helper()
	ev := next(t, ctx, c)
	w, ok := ev.(*ssp2.Wake)
	if !ok {
		t.Fatalf("want a wake-up, got %s", describe(ev))
	}
	return w
}

func describe(ev any) string {
	switch e := ev.(type) {
	case *realtime.Delta:
		return fmt.Sprintf("delta up to %d", e.Cursor())
	case *ssp2.Wake:
		return fmt.Sprintf("wake %s at %d", e.Reason, e.Cursor)
	case *ssp2.PresenceFanout:
		return fmt.Sprintf("presence %s %s by %s/%s %s", e.Kind, e.ScopeKey, e.ActorID, e.ClientID, e.Doc)
	case *ssp2.PresenceError:
		return fmt.Sprintf("presence error %s on %s", e.Error, e.ScopeKey)
	}
	return fmt.Sprintf("%T %+v", ev, ev)
}

// waitFor polls cond (a condition on server state that the test cannot be
// told about) until it holds or the deadline passes.
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

// live waits until the hub has clientID's socket live (an ack it sent has
// been taken).
func (f *fixture) waitLive(t *testing.T, clientID string) {
	t.Helper()
	waitFor(t, clientID+" live", 5*time.Second, func() bool {
		for _, s := range f.hub.Sessions(auth.DefaultPartition) {
			if s.ClientID == clientID && s.Live {
				return true
			}
		}
		return false
	})
}

// ctxT bounds a test's waits: a liveness bound for a loaded CI machine
// (the race detector on two cores), not a speed target.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func commits(m *ssp2.Message) []*ssp2.Commit {
	var out []*ssp2.Commit
	for _, f := range m.Frames {
		if c, ok := f.(*ssp2.Commit); ok {
			out = append(out, c)
		}
	}
	return out
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

var rowTable = schema.MustDemo().Table("todos")
