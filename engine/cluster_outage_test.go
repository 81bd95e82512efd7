package engine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/cluster"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
)

// The coordinator is unreachable for every member (every view stays as
// it was, not Healthy): each member keeps serving the partitions it owns,
// locally and for the others' forwarded requests, under the generation
// the database already records — nothing is claimed anew. A partition no
// member ever owned is claimed by its view's owner.
func TestClusterServesThroughCoordinatorOutage(t *testing.T) {
	ids := []string{"http://a", "http://b"}
	tc := newTestCluster(t, 300*time.Millisecond, ids...)
	for _, f := range tc.fixtures {
		f.allow("u1", map[string][]string{"project_id": {"*"}})
	}
	fa, fb := tc.fixtures["http://a"], tc.fixtures["http://b"]
	parts := map[string]string{"http://a": ownedBy("http://a", ids...), "http://b": ownedBy("http://b", ids...)}
	clients := map[string]*client{}
	for owner, p := range parts {
		c := &client{f: fa, id: engine.Identity{ActorID: "u1", Partition: p}, cid: "c-" + p, wire: ssp2.WireV3, sv: 1}
		rep, err := c.sync(&ssp2.PullHeader{Accept: 1})
		if err != nil {
			t.Fatal(err)
		}
		epoch := rep.Header().LogEpoch
		c.epoch = &epoch
		clients[owner] = c
		if pr := c.push("k0", upsert("tasks", "t0", fa.row("t0", "P", "before"), nil)); pr.Status != ssp2.CommitApplied {
			t.Fatalf("push before the outage: %+v", pr)
		}
	}
	gens := map[string]int64{}
	for owner, p := range parts {
		o, gen, err := tc.stores["http://a"].PartitionOwner(context.Background(), p)
		if err != nil || o != owner || gen < 1 {
			t.Fatalf("%s: owner %q generation %d (%v), want %s", p, o, gen, err, owner)
		}
		gens[p] = gen
	}

	for _, v := range tc.views {
		v.setHealthy(false)
	}
	// Both members, both partitions, pushes and pulls: served, a's
	// partition locally through a, b's forwarded to b (which serves a
	// forwarded call without a live lease too).
	self := map[*fixture]string{fa: "http://a", fb: "http://b"}
	for i, f := range []*fixture{fa, fb, fa, fb} {
		for owner, p := range parts {
			c := *clients[owner]
			c.f = f
			ccid := "k" + string(rune('1'+i))
			rep, err := c.sync(&ssp2.PushCommit{ClientCommitID: ccid, Operations: []ssp2.Operation{upsert("tasks", ccid, f.row(ccid, "P", "during"), nil)}})
			if err != nil {
				t.Fatalf("push %s of %s through %s during the outage: %v", ccid, p, self[f], err)
			}
			if prs := decodedPushResults(rep); len(prs) != 1 || prs[0].Status != ssp2.CommitApplied {
				t.Fatalf("push %s of %s: %+v", ccid, p, prs)
			}
			if want := self[f] != owner; rep.Forwarded() != want {
				t.Fatalf("push of %s through %s: forwarded %v, want %v", p, self[f], rep.Forwarded(), want)
			}
		}
	}
	for _, p := range parts {
		_, gen, err := tc.stores["http://a"].PartitionOwner(context.Background(), p)
		if err != nil || gen != gens[p] {
			t.Fatalf("%s: generation %d (%v) after the outage's pushes, want %d: nothing is claimed without a live lease", p, gen, err, gens[p])
		}
		info, err := tc.stores["http://a"].ReadPartition(context.Background(), p)
		if err != nil || info.MaxCommitSeq != 5 {
			t.Fatalf("%s: %+v (%v), want 5 commits", p, info, err)
		}
	}
	// A partition nobody owned yet is claimed by its view's owner.
	fresh := ""
	for i := 0; fresh == ""; i++ {
		p := fmt.Sprintf("fresh-%d", i)
		if m, _ := cluster.Owner(cluster.View{Members: []cluster.Member{{ID: "http://a"}, {ID: "http://b"}}}, p); m.ID == "http://b" {
			fresh = p
		}
	}
	c := &client{f: fa, id: engine.Identity{ActorID: "u1", Partition: fresh}, cid: "c-fresh", wire: ssp2.WireV3, sv: 1}
	if _, err := c.sync(&ssp2.PullHeader{Accept: 1}); err != nil {
		t.Fatalf("a partition never owned, during the outage: %v", err)
	}
	if o, gen, err := tc.stores["http://a"].PartitionOwner(context.Background(), fresh); err != nil || o != "http://b" || gen != 1 {
		t.Fatalf("fresh partition: owner %q generation %d (%v), want http://b 1", o, gen, err)
	}
}

// One member is cut off from the coordinator while the others are not:
// they see it gone and claim its partitions. Its stale actor is fenced for
// reads as for writes: a pull through it after the claim is not answered
// from it but from the owner the database records, and the cut-off member
// never claims the partition back while its lease is not known alive.
func TestClusterCutOffMemberIsFencedForReads(t *testing.T) {
	ids := []string{"http://a", "http://b"}
	tc := newTestCluster(t, 500*time.Millisecond, ids...)
	for _, f := range tc.fixtures {
		f.allow("u1", map[string][]string{"project_id": {"*"}})
	}
	fa, fb := tc.fixtures["http://a"], tc.fixtures["http://b"]
	part := ownedBy("http://b", ids...)
	id := engine.Identity{ActorID: "u1", Partition: part}
	cb := &client{f: fb, id: id, cid: "c1", wire: ssp2.WireV3, sv: 1}
	rep, err := cb.sync(&ssp2.PullHeader{Accept: 1})
	if err != nil {
		t.Fatal(err)
	}
	epoch := rep.Header().LogEpoch
	cb.epoch = &epoch
	if pr := cb.push("k1", upsert("tasks", "t1", fb.row("t1", "P", "one"), nil)); pr.Status != ssp2.CommitApplied {
		t.Fatalf("first push: %+v", pr)
	}
	// b's actor is live with generation 1; its pull is served locally.
	if rep, err := cb.sync(&ssp2.PullHeader{Accept: 1}, sub("s", -1, "P")); err != nil || rep.Forwarded() {
		t.Fatalf("pull through b before the cut: %v (forwarded %v)", err, rep != nil && rep.Forwarded())
	}

	// b is cut off: its view goes stale (still naming b), a sees b gone
	// and takes the partition with a push.
	tc.views["http://b"].setHealthy(false)
	tc.views["http://a"].set("http://a")
	ca := *cb
	ca.f = fa
	if pr := ca.push("k2", upsert("tasks", "t2", fa.row("t2", "P", "two"), nil)); pr.Status != ssp2.CommitApplied || *pr.CommitSeq != 2 {
		t.Fatalf("push on the new owner: %+v", pr)
	}
	// A pull through b: b's actor (generation 1) must not answer it; the
	// pull is answered by a with both commits.
	rep, err = cb.sync(&ssp2.PullHeader{Accept: 1}, sub("s", -1, "P"))
	if err != nil {
		t.Fatalf("pull through the cut-off member: %v", err)
	}
	if !rep.Forwarded() {
		t.Fatal("the cut-off member answered a pull of a partition another member had claimed")
	}
	s := sections(t, rep)["s"]
	if s == nil || len(s.rows) != 2 {
		t.Fatalf("pull through the cut-off member: section %+v, want the owner's 2 rows", s)
	}
	st, _ := fb.eng.ClusterStats()
	if st.OwnershipLost < 1 {
		t.Fatalf("b's counters %+v: want its stale reply counted as an ownership loss", st)
	}
	if o, gen, err := tc.stores["http://a"].PartitionOwner(context.Background(), part); err != nil || o != "http://a" || gen != 2 {
		t.Fatalf("owner %q generation %d (%v), want http://a 2: the cut-off member must not claim it back", o, gen, err)
	}
	// When b cannot reach the recorded owner either, its clients get the
	// retryable unavailable answer, never b's stale data.
	tc.peers.mu.Lock()
	tc.peers.down["http://a"] = true
	tc.peers.mu.Unlock()
	_, err = cb.sync(&ssp2.PullHeader{Accept: 1}, sub("s", -1, "P"))
	if !errors.Is(err, syncerr.ErrUnavailable) && syncerr.CodeOf(err) != syncerr.InternalError {
		t.Fatalf("pull through b with the owner unreachable: %v, want unavailable", err)
	}
}

// decodedPushResults returns the push results of a reply client.sync
// returned (its Frames are the decoded answer, forwarded or not).
func decodedPushResults(rep *engine.Reply) []*ssp2.PushResult {
	var out []*ssp2.PushResult
	for _, f := range rep.Frames {
		if pr, ok := f.(*ssp2.PushResult); ok {
			out = append(out, pr)
		}
	}
	return out
}
