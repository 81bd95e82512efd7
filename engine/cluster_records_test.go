package engine_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

// Client records across a hand-over (docs/cluster.md, "Client records"):
// two members on one PostgreSQL schema, each with its own view, both on
// one test clock; each member writes back its buffered client records
// only when the test says so (flushRecords).

// newRecordsCluster is newTestCluster with the clock and a client flush
// interval of an hour (no write-back by time while a test runs).
func newRecordsCluster(t *testing.T, clock *ackClock, ids ...string) *testCluster {
	schemaName := pgtest.NewSchema(t)
	tc := &testCluster{peers: &loopPeers{engines: map[string]*engine.Engine{}, down: map[string]bool{}, cut: map[string]int{}},
		views: map[string]*fakeMembership{}, fixtures: map[string]*fixture{}, stores: map[string]*postgres.Store{}}
	for _, id := range ids {
		st := pgtest.OpenSchema(t, schemaName, postgres.Options{MaxConns: 8})
		view := newFakeMembership(ids...)
		f := newFixture(t, st, func(c *engine.Config) {
			c.Now = clock.now
			c.ClientFlushInterval = time.Hour
			c.Cluster = &engine.ClusterConfig{Self: id, Membership: view, Peers: tc.peers, MoveTimeout: time.Second}
		})
		tc.peers.mu.Lock()
		tc.peers.engines[id] = f.eng
		tc.peers.mu.Unlock()
		tc.views[id], tc.fixtures[id], tc.stores[id] = view, f, st
	}
	return tc
}

// flushRecords makes member f's actor of part write back its buffered
// client records as the owner it believes it is (AckOwned: a job on its
// actor): an hour later, any job writes them after it answered; the
// second job runs once that write-back is done.
func flushRecords(t *testing.T, f *fixture, clock *ackClock, part string) {
	t.Helper()
	clock.ms.Add(2 * time.Hour.Milliseconds())
	for range 2 {
		if err := f.eng.AckOwned(context.Background(), part, nil); err != nil {
			t.Fatalf("an empty ack on the partition's actor: %v", err)
		}
	}
}

// pullRound runs a pull round of client cid through f (Sync: routed by
// f's view) with subs and returns each subscription's next cursor.
func pullRound(t *testing.T, f *fixture, part, cid, epoch string, subs ...*ssp2.Subscription) map[string]int64 {
	t.Helper()
	frs := []ssp2.Frame{&ssp2.PullHeader{Accept: ssp2.AcceptInlineRows}}
	for _, s := range subs {
		frs = append(frs, s)
	}
	id := engine.Identity{ActorID: "u1", Partition: part}
	rep, err := f.eng.Sync(context.Background(), id, mustMsg(t, &client{f: f, id: id, cid: cid, wire: ssp2.WireV3, sv: 1, epoch: &epoch}, frs...))
	if err != nil {
		t.Fatalf("pull round of %s: %v", cid, err)
	}
	next := map[string]int64{}
	var cur string
	for _, fr := range frames(t, rep) {
		switch x := fr.(type) {
		case *ssp2.SubStart:
			cur = x.ID
		case *ssp2.SubEnd:
			next[cur] = x.NextCursor
		case *ssp2.ErrorFrame:
			t.Fatalf("pull round of %s: %s %s", cid, x.Code, x.Message)
		}
	}
	return next
}

// storedSub is a registered subscription as a stored client record holds
// it (the fields compared).
type storedSub struct {
	ID     string `json:"id"`
	Cursor int64  `json:"cursor"`
}

// wantStored checks the stored record of cid: its cursor and its
// subscriptions (ids and cursors, in order).
func wantStored(t *testing.T, st storage.Clients, what, part, cid string, cursor int64, subs ...storedSub) {
	t.Helper()
	rec, err := st.GetClient(context.Background(), part, cid)
	if err != nil || rec == nil {
		t.Fatalf("%s: record of %s: %+v, %v", what, cid, rec, err)
	}
	var got []storedSub
	if len(rec.Subscriptions) > 0 {
		if err := json.Unmarshal(rec.Subscriptions, &got); err != nil {
			t.Fatalf("%s: subscriptions of %s: %v", what, cid, err)
		}
	}
	if rec.Cursor != cursor || !slices.Equal(got, subs) {
		t.Fatalf("%s: %s stored with cursor %d, subscriptions %s; want cursor %d, subscriptions %+v", what, cid, rec.Cursor, rec.Subscriptions, cursor, subs)
	}
}

// A member whose buffered client records the fence refuses hands them
// over: b owns the partition and holds c1's and c2's last rounds
// buffered, and an ack of c3 (whose round it wrote back); a, whose view
// has lost b (so it asks b for no release), claims the partition and
// serves c2 a newer round. When b writes back, the fence refuses it; the records land
// without it where nothing newer is stored (c1's round, c3's ack) and
// never over a's newer record of c2.
func TestClusterFencedClientRecordsAreHandedOver(t *testing.T) {
	ids := []string{"http://a", "http://b"}
	clock := &ackClock{}
	clock.ms.Store(1_700_000_000_000)
	tc := newRecordsCluster(t, clock, ids...)
	part := ownedBy("http://b", ids...)
	fa, fb := tc.fixtures["http://a"], tc.fixtures["http://b"]
	st := tc.stores["http://a"]
	id := engine.Identity{ActorID: "u1", Partition: part}
	epoch := epochOf(t, fb, id, "w")
	w := &client{f: fb, id: id, cid: "w", wire: ssp2.WireV3, sv: 1, epoch: &epoch}
	push := func(f *fixture, ccid, row string) {
		t.Helper()
		w.f = f
		rep, err := f.eng.Sync(context.Background(), id, mustMsg(t, w, &ssp2.PushCommit{ClientCommitID: ccid,
			Operations: []ssp2.Operation{upsert("tasks", row, f.row(row, "P", "x"), nil)}}))
		if prs := pushResults(t, rep); err != nil || len(prs) != 1 || prs[0].Status != ssp2.CommitApplied {
			t.Fatalf("push %s: %v %+v", ccid, err, prs)
		}
	}
	push(fb, "k1", "t1")
	push(fb, "k2", "t2")
	if next := pullRound(t, fb, part, "c3", epoch, sub("s3", -1, "P")); next["s3"] != 2 {
		t.Fatalf("c3's round ended at %v, want 2", next)
	}
	flushRecords(t, fb, clock, part)
	wantStored(t, st, "c3 written back by b", part, "c3", 2, storedSub{"s3", 2})
	push(fb, "k3", "t3")
	clock.ms.Add(10)
	pullRound(t, fb, part, "c1", epoch, sub("s1", -1, "P"))
	pullRound(t, fb, part, "c2", epoch, sub("s2", -1, "P"))
	if err := fb.eng.AckOwned(context.Background(), part, []engine.Ack{{ClientID: "c3", ActorID: "u1", Cursor: 3, LogEpoch: epoch}}); err != nil {
		t.Fatal(err)
	}
	if rec, _ := st.GetClient(context.Background(), part, "c1"); rec == nil || rec.Subscriptions != nil {
		t.Fatalf("c1's record %+v: its round is not buffered on b", rec)
	}

	// a takes the partition without asking b.
	tc.views["http://a"].set("http://a")
	clock.ms.Add(10)
	pullRound(t, fa, part, "c2", epoch, sub("s2", 3, "P"), sub("s2b", -1, "P"))
	flushRecords(t, fa, clock, part)
	wantStored(t, st, "c2's newer round, written back by a", part, "c2", 3, storedSub{"s2", 3}, storedSub{"s2b", 3})
	if owner, gen, _ := st.PartitionOwner(context.Background(), part); owner != "http://a" || gen != 2 {
		t.Fatalf("owner %s generation %d, want http://a 2", owner, gen)
	}

	// b, still the owner by its view, writes back: refused, handed over.
	flushRecords(t, fb, clock, part)
	wantStored(t, st, "c1's round, handed over", part, "c1", 3, storedSub{"s1", 3})
	wantStored(t, st, "c2 not regressed to b's older round", part, "c2", 3, storedSub{"s2", 3}, storedSub{"s2b", 3})
	if rec, err := st.GetClient(context.Background(), part, "c3"); err != nil || rec == nil || rec.Cursor != 3 {
		t.Fatalf("c3's ack, refused by the fence: stored %+v, %v; want cursor 3", rec, err)
	}
	if info, _ := st.ReadPartition(context.Background(), part); info.MaxCommitSeq != 3 {
		t.Fatalf("max seq %d, want 3: the hand-over committed nothing else", info.MaxCommitSeq)
	}
}

// A member asked to release a partition it still owns by its view (the
// views disagree right after a rejoin) writes back its buffered client
// records under its generation before it refuses, so the claiming member
// starts from them. b has left (both views: only a), a owns the partition
// and holds c1's last round buffered; b rejoins, and its view has a and b
// while a's has only a: b claims the partition, asking a to release it
// first, and its realtime client state of c1 is a's last round.
func TestClusterReleaseWritesBackWhileViewsDisagree(t *testing.T) {
	ids := []string{"http://a", "http://b"}
	clock := &ackClock{}
	clock.ms.Store(1_700_000_000_000)
	tc := newRecordsCluster(t, clock, ids...)
	part := ownedBy("http://b", ids...)
	tc.setView("http://a")
	fa, fb := tc.fixtures["http://a"], tc.fixtures["http://b"]
	id := engine.Identity{ActorID: "u1", Partition: part}
	epoch := epochOf(t, fa, id, "c1")
	next := pullRound(t, fa, part, "c1", epoch, sub("s1", -1, "P"), sub("s9", -1, "Q"))
	if rec, _ := tc.stores["http://a"].GetClient(context.Background(), part, "c1"); rec == nil || rec.Subscriptions != nil {
		t.Fatalf("c1's record %+v: its round is not buffered on a", rec)
	}

	tc.views["http://b"].set(ids...) // b is back; a has not seen it yet
	cs, err := fb.eng.ClientState(context.Background(), id, "c1")
	if err != nil {
		t.Fatalf("client state through b: %v", err)
	}
	var got []string
	for _, s := range cs.Subscriptions {
		got = append(got, s.ID)
	}
	if !cs.Exists || !slices.Equal(got, []string{"s1", "s9"}) || cs.Cursor != min(next["s1"], next["s9"]) {
		t.Fatalf("b's client state of c1: %+v; want a's last round (s1, s9; cursor %d)", cs, min(next["s1"], next["s9"]))
	}
	if owner, gen, _ := tc.stores["http://a"].PartitionOwner(context.Background(), part); owner != "http://b" || gen != 2 {
		t.Fatalf("owner %s generation %d, want http://b 2", owner, gen)
	}
	if live, _ := fa.eng.PartitionLive(part); !live {
		t.Fatal("a's actor stopped: a owns the partition by its view and was only asked to write back")
	}
}
