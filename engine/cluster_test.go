package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/cluster"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

// fakeMembership is a membership whose view a test sets.
type fakeMembership struct {
	mu      sync.Mutex
	view    cluster.View
	changed chan struct{}
}

func newFakeMembership(ids ...string) *fakeMembership {
	m := &fakeMembership{changed: make(chan struct{})}
	m.set(ids...)
	return m
}

func (m *fakeMembership) set(ids ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := cluster.View{Healthy: true, Revision: m.view.Revision + 1}
	for _, id := range ids {
		v.Members = append(v.Members, cluster.Member{ID: id})
	}
	m.view = v
	close(m.changed)
	m.changed = make(chan struct{})
}

// setHealthy sets the view's Healthy (this member's lease known alive).
func (m *fakeMembership) setHealthy(ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.view.Healthy = ok
	m.view.Revision++
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *fakeMembership) View() cluster.View {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.view
}

func (m *fakeMembership) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// loopPeers reaches the other engines of the test in-process, through
// their *Owned calls, as transport/peer does over HTTP/2.
type loopPeers struct {
	mu      sync.Mutex
	engines map[string]*engine.Engine
	down    map[string]bool
	// cut[to] > 0 makes the next Sync calls to member to run on it but
	// answer a body that breaks before its first byte (the owner died
	// after its response headers), counting down.
	cut map[string]int
}

func (p *loopPeers) target(to string) (*engine.Engine, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down[to] || p.engines[to] == nil {
		return nil, fmt.Errorf("%w: %s is down", engine.ErrPeerUnreachable, to)
	}
	return p.engines[to], nil
}

func (p *loopPeers) Sync(ctx context.Context, to string, id engine.Identity, request []byte) (io.ReadCloser, error) {
	e, err := p.target(to)
	if err != nil {
		return nil, err
	}
	msg, err := ssp2.DecodeRequest(request)
	if err != nil {
		return nil, err
	}
	rep, err := e.SyncOwned(ctx, id, msg)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := rep.WriteTo(&buf); err != nil {
		return nil, err
	}
	p.mu.Lock()
	cut := p.cut[to] > 0
	if cut {
		p.cut[to]--
	}
	p.mu.Unlock()
	if cut {
		return &ctxBody{ctx: ctx, r: iotest.ErrReader(io.ErrUnexpectedEOF)}, nil
	}
	return &ctxBody{ctx: ctx, r: &buf}, nil
}

// ctxBody is an answer's body read on the call's context, as an HTTP
// response body is: once ctx ends, reads fail.
type ctxBody struct {
	ctx context.Context
	r   io.Reader
}

func (b *ctxBody) Read(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	return b.r.Read(p)
}

func (b *ctxBody) Close() error { return nil }

func (p *loopPeers) ClientState(ctx context.Context, to string, id engine.Identity, clientID string) (engine.ClientState, error) {
	e, err := p.target(to)
	if err != nil {
		return engine.ClientState{}, err
	}
	return e.ClientStateOwned(ctx, id, clientID)
}

func (p *loopPeers) BuildDeltas(ctx context.Context, to, partition string, req engine.DeltaRequest) (*engine.DeltaResult, error) {
	e, err := p.target(to)
	if err != nil {
		return nil, err
	}
	return e.BuildDeltasOwned(ctx, partition, req)
}

func (p *loopPeers) Release(ctx context.Context, to, partition string) error {
	e, err := p.target(to)
	if err != nil {
		return err
	}
	return e.ReleaseOwned(ctx, partition)
}

func (p *loopPeers) Ack(ctx context.Context, to, partition string, acks []engine.Ack) error {
	e, err := p.target(to)
	if err != nil {
		return err
	}
	return e.AckOwned(ctx, partition, acks)
}

// clusterOf starts one engine per member id on one PostgreSQL schema, each
// with its own membership view (all equal to start with).
type testCluster struct {
	peers    *loopPeers
	views    map[string]*fakeMembership
	fixtures map[string]*fixture
	stores   map[string]*postgres.Store
}

func newTestCluster(t *testing.T, moveTimeout time.Duration, ids ...string) *testCluster {
	schemaName := pgtest.NewSchema(t)
	tc := &testCluster{peers: &loopPeers{engines: map[string]*engine.Engine{}, down: map[string]bool{}, cut: map[string]int{}},
		views: map[string]*fakeMembership{}, fixtures: map[string]*fixture{}, stores: map[string]*postgres.Store{}}
	for _, id := range ids {
		st := pgtest.OpenSchema(t, schemaName, postgres.Options{MaxConns: 8})
		view := newFakeMembership(ids...)
		f := newFixture(t, st, func(c *engine.Config) {
			c.Cluster = &engine.ClusterConfig{Self: id, Membership: view, Peers: tc.peers, MoveTimeout: moveTimeout}
		})
		tc.peers.mu.Lock()
		tc.peers.engines[id] = f.eng
		tc.peers.mu.Unlock()
		tc.views[id], tc.fixtures[id], tc.stores[id] = view, f, st
	}
	return tc
}

// setView gives every member the same view.
func (tc *testCluster) setView(ids ...string) {
	for _, v := range tc.views {
		v.set(ids...)
	}
}

// frames decodes a reply, forwarded or not, into its frames.
func frames(t *testing.T, rep *engine.Reply) []ssp2.Frame {
	t.Helper()
	if !rep.Forwarded() {
		return rep.Frames
	}
	var buf bytes.Buffer
	if _, err := rep.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	m, err := ssp2.DecodeResponse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return m.Frames
}

func pushResults(t *testing.T, rep *engine.Reply) []*ssp2.PushResult {
	var out []*ssp2.PushResult
	for _, f := range frames(t, rep) {
		if pr, ok := f.(*ssp2.PushResult); ok {
			out = append(out, pr)
		}
	}
	return out
}

// epochOf acquires the partition's log epoch through f (a pull-only
// round, forwarded or not).
func epochOf(t *testing.T, f *fixture, id engine.Identity, cid string) string {
	t.Helper()
	c := &client{f: f, id: id, cid: cid}
	rep, err := f.eng.Sync(context.Background(), id, mustMsg(t, c, &ssp2.PullHeader{Accept: 1}))
	if err != nil {
		t.Fatal(err)
	}
	for _, fr := range frames(t, rep) {
		if h, ok := fr.(*ssp2.RespHeader); ok && h.LogEpoch != "" {
			return h.LogEpoch
		}
	}
	t.Fatal("no log epoch in the answer")
	return ""
}

// ownedBy returns a partition name cluster.Owner places on owner in a
// view of ids.
func ownedBy(owner string, ids ...string) string {
	v := cluster.View{}
	for _, id := range ids {
		v.Members = append(v.Members, cluster.Member{ID: id})
	}
	for i := 0; ; i++ {
		p := fmt.Sprintf("part-%d", i)
		if m, _ := cluster.Owner(v, p); m.ID == owner {
			return p
		}
	}
}

// A push through member a for a partition b owns is applied once, on b;
// c pulls it; the counters say a forwarded, b served.
func TestClusterForwardsToTheOwner(t *testing.T) {
	ids := []string{"http://a", "http://b", "http://c"}
	tc := newTestCluster(t, 2*time.Second, ids...)
	part := ownedBy("http://b", ids...)
	fa, fc := tc.fixtures["http://a"], tc.fixtures["http://c"]
	id := engine.Identity{ActorID: "u1", Partition: part}
	fa.allow("u1", map[string][]string{"project_id": {"*"}})
	fc.allow("u1", map[string][]string{"project_id": {"*"}})
	tc.fixtures["http://b"].allow("u1", map[string][]string{"project_id": {"*"}})
	epoch := epochOf(t, fa, id, "c1")
	c := &client{f: fa, id: id, cid: "c1", wire: ssp2.WireV3, sv: 1, epoch: &epoch}
	rep, err := fa.eng.Sync(context.Background(), id, mustMsg(t, c, &ssp2.PushCommit{ClientCommitID: "k1",
		Operations: []ssp2.Operation{upsert("tasks", "t1", fa.row("t1", "P", "hello"), nil)}}))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Forwarded() {
		t.Fatal("a push for b's partition through a was not forwarded")
	}
	prs := pushResults(t, rep)
	if len(prs) != 1 || prs[0].Status != ssp2.CommitApplied {
		t.Fatalf("push results %+v", prs)
	}
	// The same commit again through c: cached, not applied twice.
	rep, err = fc.eng.Sync(context.Background(), id, mustMsg(t, &client{f: fc, id: id, cid: "c1", epoch: &epoch}, &ssp2.PushCommit{ClientCommitID: "k1",
		Operations: []ssp2.Operation{upsert("tasks", "t1", fc.row("t1", "P", "hello"), nil)}}))
	if err != nil {
		t.Fatal(err)
	}
	if prs := pushResults(t, rep); len(prs) != 1 || prs[0].Status != ssp2.CommitCached {
		t.Fatalf("replayed push through c: %+v", prs)
	}
	info, err := tc.stores["http://c"].ReadPartition(context.Background(), part)
	if err != nil || info.MaxCommitSeq != 1 {
		t.Fatalf("partition after one commit pushed twice: %+v, %v", info, err)
	}
	owner, gen, err := tc.stores["http://a"].PartitionOwner(context.Background(), part)
	if err != nil || owner != "http://b" || gen < 1 {
		t.Fatalf("recorded owner %q generation %d (%v), want http://b", owner, gen, err)
	}
	sa, _ := fa.eng.ClusterStats()
	sb, _ := tc.fixtures["http://b"].eng.ClusterStats()
	// a forwarded its epoch pull and the push; b served those and c's.
	if sa.Forwarded["sync"] != 2 || sb.Served["sync"] != 3 {
		t.Fatalf("counters: a forwarded %d, b served %d; want 2 and 3", sa.Forwarded["sync"], sb.Served["sync"])
	}
}

// An owner whose answer breaks off before its first byte (it failed after
// committing the push and sending its response headers) is retried: the
// client gets the owner's answer on the retry, cached, and the commit is
// in the log once.
func TestClusterAnswerCutBeforeItsFirstByteIsRetried(t *testing.T) {
	ids := []string{"http://a", "http://b"}
	tc := newTestCluster(t, 2*time.Second, ids...)
	part := ownedBy("http://b", ids...)
	fa := tc.fixtures["http://a"]
	for _, f := range tc.fixtures {
		f.allow("u1", map[string][]string{"project_id": {"*"}})
	}
	id := engine.Identity{ActorID: "u1", Partition: part}
	epoch := epochOf(t, fa, id, "c1")
	tc.peers.mu.Lock()
	tc.peers.cut["http://b"] = 1
	tc.peers.mu.Unlock()
	rep, err := fa.eng.Sync(context.Background(), id, mustMsg(t, &client{f: fa, id: id, cid: "c1", epoch: &epoch}, &ssp2.PushCommit{ClientCommitID: "k1",
		Operations: []ssp2.Operation{upsert("tasks", "t1", fa.row("t1", "P", "hello"), nil)}}))
	if err != nil {
		t.Fatalf("push whose first answer broke off: %v", err)
	}
	if prs := pushResults(t, rep); len(prs) != 1 || prs[0].Status != ssp2.CommitCached || prs[0].CommitSeq == nil || *prs[0].CommitSeq != 1 {
		t.Fatalf("push results %+v, want k1 cached as seq 1 (applied by the first attempt)", prs)
	}
	info, err := tc.stores["http://a"].ReadPartition(context.Background(), part)
	if err != nil || info.MaxCommitSeq != 1 {
		t.Fatalf("partition: %+v, %v; want one commit", info, err)
	}
	if st, _ := fa.eng.ClusterStats(); st.Retries != 1 || st.Forwarded["sync"] != 3 {
		t.Fatalf("a's counters %+v; want one retry, three forwarded calls (epoch pull, cut push, retry)", st)
	}
}

// A member that no longer owns a partition cannot commit to it. b
// activates the partition (generation 1); a's view loses b, a commits
// (generation 2). b's actor, still holding generation 1, is refused by the
// fence even while b's own view still names b the owner (a forwarded call
// reaching it during the view change): nothing lands, the actor is
// stopped, the caller is told to re-route. And b with its lease lost (a
// pause past it) never claims the partition back: its clients' writes go
// to the owner the database records.
func TestClusterStaleOwnerCannotCommit(t *testing.T) {
	ids := []string{"http://a", "http://b"}
	tc := newTestCluster(t, 300*time.Millisecond, ids...)
	part := ownedBy("http://b", ids...)
	fa, fb := tc.fixtures["http://a"], tc.fixtures["http://b"]
	for _, f := range []*fixture{fa, fb} {
		f.allow("u1", map[string][]string{"project_id": {"*"}})
	}
	id := engine.Identity{ActorID: "u1", Partition: part}
	epoch := epochOf(t, fb, id, "c1")
	msg := func(f *fixture, ccid string) *ssp2.Message {
		return mustMsg(t, &client{f: f, id: id, cid: "c1", epoch: &epoch}, &ssp2.PushCommit{ClientCommitID: ccid,
			Operations: []ssp2.Operation{upsert("tasks", ccid, f.row(ccid, "P", "x"), nil)}})
	}
	if _, err := fb.eng.Sync(context.Background(), id, msg(fb, "k1")); err != nil { // b's actor claims generation 1
		t.Fatal(err)
	}
	tc.views["http://a"].set("http://a") // only a sees b gone: a owns the partition now
	if rep, err := fa.eng.Sync(context.Background(), id, msg(fa, "k2")); err != nil || rep.Forwarded() {
		t.Fatalf("push on the new owner: %v", err)
	}
	seq := func() int64 {
		info, err := tc.stores["http://a"].ReadPartition(context.Background(), part)
		if err != nil {
			t.Fatal(err)
		}
		return info.MaxCommitSeq
	}
	if seq() != 2 {
		t.Fatalf("max seq %d, want 2", seq())
	}
	// b's view still names b; its actor's fence is generation 1.
	_, err := fb.eng.SyncOwned(context.Background(), id, msg(fb, "k3"))
	if !errors.Is(err, engine.ErrNotOwner) || !errors.Is(err, storage.ErrOwnershipLost) {
		t.Fatalf("the stale actor's push: %v; want ErrNotOwner from ErrOwnershipLost", err)
	}
	if seq() != 2 {
		t.Fatalf("max seq %d after the stale owner's push, want 2", seq())
	}
	if st, _ := fb.eng.ClusterStats(); st.OwnershipLost != 1 || st.Evictions != 1 {
		t.Fatalf("b's stats %+v; want one ownership loss and one eviction", st)
	}
	// b's lease is lost (it was paused past it) and its view still names
	// it the owner: it does not claim the partition back (the database
	// records a), it forwards its clients' writes to a, the owner the
	// database names, and they land there once.
	tc.views["http://b"].setHealthy(false)
	rep, err := fb.eng.Sync(context.Background(), id, msg(fb, "k4"))
	if err != nil || !rep.Forwarded() {
		t.Fatalf("push through b without a lease: %v, want it forwarded to the recorded owner", err)
	}
	if seq() != 3 {
		t.Fatalf("max seq %d after b lost its lease, want 3 (k4 on a)", seq())
	}
	// Once b sees the same view as a, its clients' pushes reach a and land
	// once.
	tc.views["http://b"].set("http://a")
	for range 2 {
		rep, err := fb.eng.Sync(context.Background(), id, msg(fb, "k3"))
		if err != nil || !rep.Forwarded() {
			t.Fatalf("after the view converged: %v", err)
		}
	}
	if seq() != 4 {
		t.Fatalf("max seq %d, want 4: k3 applied once", seq())
	}
	if owner, gen, _ := tc.stores["http://a"].PartitionOwner(context.Background(), part); owner != "http://a" || gen != 2 {
		t.Fatalf("owner %s generation %d, want http://a 2", owner, gen)
	}
}

// A request whose owner stays unreachable is answered unavailable (503,
// retryable) after the move timeout, not held.
func TestClusterUnreachableOwnerAnswersUnavailable(t *testing.T) {
	ids := []string{"http://a", "http://b"}
	tc := newTestCluster(t, 200*time.Millisecond, ids...)
	part := ownedBy("http://b", ids...)
	fa := tc.fixtures["http://a"]
	fa.allow("u1", map[string][]string{"project_id": {"*"}})
	tc.peers.mu.Lock()
	tc.peers.down["http://b"] = true
	tc.peers.mu.Unlock()
	id := engine.Identity{ActorID: "u1", Partition: part}
	_, err := fa.eng.Sync(context.Background(), id, mustMsg(t, &client{f: fa, id: id, cid: "c1"}, &ssp2.PullHeader{Accept: 1}))
	if !errors.Is(err, syncerr.ErrUnavailable) || syncerr.CodeOf(err) != syncerr.InternalError {
		t.Fatalf("err = %v, want unavailable", err)
	}
	st, _ := fa.eng.ClusterStats()
	if st.Unavailable != 1 || st.Retries == 0 {
		t.Fatalf("stats %+v", st)
	}
}

// Cluster mode refuses a backend without the Ownership role.
func TestClusterNeedsOwnership(t *testing.T) {
	sch, err := schema.Parse([]byte(testSchemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	_, err = engine.New(context.Background(), engine.Config{Schema: sch, Backend: memory.New().Backend(), Resolver: engine.AllowAll(sch),
		Cluster: &engine.ClusterConfig{Self: "http://a", Membership: newFakeMembership("http://a"), Peers: &loopPeers{}}})
	if err == nil {
		t.Fatal("cluster mode started on a backend without Ownership")
	}
}

// SyncEncoded forwards a request for another member's partition as it
// came, undecoded: the owner decodes and answers it (an undecodable one
// with sync.invalid_request, as a local one would be); on the owner it
// decodes and serves locally.
func TestClusterSyncEncodedForwardsUndecoded(t *testing.T) {
	ids := []string{"http://a", "http://b"}
	tc := newTestCluster(t, time.Second, ids...)
	part := ownedBy("http://b", ids...)
	fa, fb := tc.fixtures["http://a"], tc.fixtures["http://b"]
	for _, f := range []*fixture{fa, fb} {
		f.allow("u1", map[string][]string{"project_id": {"*"}})
	}
	id := engine.Identity{ActorID: "u1", Partition: part}
	epoch := epochOf(t, fb, id, "c1")
	body, err := ssp2.Encode(mustMsg(t, &client{f: fa, id: id, cid: "c1", epoch: &epoch}, &ssp2.PushCommit{ClientCommitID: "k1",
		Operations: []ssp2.Operation{upsert("tasks", "t1", fa.row("t1", "P", "x"), nil)}}))
	if err != nil {
		t.Fatal(err)
	}
	rep, msg, err := fa.eng.SyncEncoded(context.Background(), id, body)
	if err != nil || msg != nil || !rep.Forwarded() {
		t.Fatalf("through a: msg %v forwarded %v err %v; want forwarded undecoded", msg != nil, rep != nil && rep.Forwarded(), err)
	}
	if prs := pushResults(t, rep); len(prs) != 1 || prs[0].Status != ssp2.CommitApplied {
		t.Fatalf("push results %+v", prs)
	}
	rep, msg, err = fb.eng.SyncEncoded(context.Background(), id, body)
	if err != nil || msg == nil || rep.Forwarded() {
		t.Fatalf("on the owner: msg %v forwarded %v err %v; want decoded and local", msg != nil, rep != nil && rep.Forwarded(), err)
	}
	if prs := pushResults(t, rep); len(prs) != 1 || prs[0].Status != ssp2.CommitCached {
		t.Fatalf("the same push on the owner: %+v, want cached", prs)
	}
	_, _, err = fa.eng.SyncEncoded(context.Background(), id, []byte("garbage"))
	if syncerr.CodeOf(err) != syncerr.InvalidRequest {
		t.Fatalf("garbage through a: %v, want the owner's sync.invalid_request", err)
	}
	// A wire-v3 patch that conflicts, through a: the owner's answer reaches
	// the client unchanged, conflictColumns included.
	c := &client{f: fa, id: id, cid: "c1", epoch: &epoch}
	body, err = ssp2.Encode(mustMsg(t, c, &ssp2.PushCommit{ClientCommitID: "k2",
		Operations: []ssp2.Operation{upsert("tasks", "t1", fa.patch(ssp2.Row{"t1", nil, "late", nil}, 2), ver(0))}}))
	if err != nil {
		t.Fatal(err)
	}
	rep, _, err = fa.eng.SyncEncoded(context.Background(), id, body)
	if err != nil || !rep.Forwarded() {
		t.Fatalf("patch through a: forwarded %v err %v", rep != nil && rep.Forwarded(), err)
	}
	want := ssp2.NewColumnSet(4)
	want.Add(2)
	if prs := pushResults(t, rep); len(prs) != 1 || len(prs[0].Results) != 1 || !bytes.Equal(prs[0].Results[0].ConflictColumns, want) {
		t.Fatalf("forwarded conflict %+v, want conflictColumns %08b", prs, want)
	}
	// A version outside the window is refused by the member it reaches,
	// before anything is forwarded.
	before, _ := fa.eng.ClusterStats()
	old, err := ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV2, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{&ssp2.ReqHeader{ClientID: "c1", SchemaVersion: 1, LogEpoch: &epoch}, &ssp2.PullHeader{Accept: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := fa.eng.SyncEncoded(context.Background(), id, old); syncerr.CodeOf(err) != syncerr.InvalidRequest {
		t.Fatalf("v2 body through a: %v, want sync.invalid_request", err)
	}
	if after, _ := fa.eng.ClusterStats(); after.Forwarded["sync"] != before.Forwarded["sync"] {
		t.Fatal("a request outside the wire-version window was forwarded")
	}
}

// A member asked to release a partition it no longer owns stops its
// actor after its queued work (and says so by the actor being gone); one
// that still owns it by its view refuses at once.
func TestClusterReleaseOwned(t *testing.T) {
	ids := []string{"http://a", "http://b"}
	tc := newTestCluster(t, time.Second, ids...)
	part := ownedBy("http://b", ids...)
	fb := tc.fixtures["http://b"]
	fb.allow("u1", map[string][]string{"project_id": {"*"}})
	id := engine.Identity{ActorID: "u1", Partition: part}
	epoch := epochOf(t, fb, id, "c1")
	rep, err := fb.eng.Sync(context.Background(), id, mustMsg(t, &client{f: fb, id: id, cid: "c1", epoch: &epoch}, &ssp2.PushCommit{ClientCommitID: "k1",
		Operations: []ssp2.Operation{upsert("tasks", "t1", fb.row("t1", "P", "x"), nil)}}))
	if err != nil || len(pushResults(t, rep)) != 1 { // b's actor is live now, the client bound and its round buffered
		t.Fatal(err)
	}
	if live, _ := fb.eng.PartitionLive(part); !live {
		t.Fatal("b has no actor for its partition")
	}
	if err := fb.eng.ReleaseOwned(context.Background(), part); err == nil {
		t.Fatal("b released a partition it owns by its view")
	}
	tc.views["http://b"].set("http://a") // b sees itself gone: a owns it
	if err := fb.eng.ReleaseOwned(context.Background(), part); err != nil {
		t.Fatal(err)
	}
	if live, _ := fb.eng.PartitionLive(part); live {
		t.Fatal("b's actor is still live after the release")
	}
	st, err := tc.stores["http://b"].GetClient(context.Background(), part, "c1")
	// The round's wire version is buffered on the actor (BindClient wrote
	// the record with 0); the release's Stop writes it back.
	if err != nil || st == nil || st.WireVersion != ssp2.WireV3 {
		t.Fatalf("the client record b buffered was not written back on release: %+v %v", st, err)
	}
}
