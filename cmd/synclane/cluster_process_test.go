package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
)

// Cluster mode (docs/cluster.md) with real processes: etcd and three
// `synclane serve` members on one PostgreSQL schema (the harness in
// cluster_harness_test.go). The tests that wait for a lease to expire use
// the default lease (2s) when what they measure depends on it (the
// recovery after kill -9) and 1s otherwise; the others use 2s, so a slow
// machine does not lose a lease by accident.

// rotate returns ms starting at index w (mod len(ms)).
func rotate(ms []*clusterMember, w int) []*clusterMember {
	k := w % len(ms)
	return append(slices.Clone(ms[k:]), ms[:k]...)
}

// A push reaching a member that does not own its partition is forwarded to
// the owner and applied there once: the same clientCommitId pushed through
// the third member is answered cached, and the row is pulled through it.
// The admin API shows the forward and the serve.
func TestClusterForwardedPushAppliesOnce(t *testing.T) {
	c := startCluster(t, clusterOptions{leaseTTL: 2 * time.Second})
	a, b, third := c.members[0], c.members[1], c.members[2]
	p := c.ownedPartition(t, b, "fwd-")
	ctx := context.Background()

	cl := newClusterClient(nil, "ada", "fwd-client", p)
	cl.c.URL = a.base + "/sync"
	if err := cl.c.Handshake(ctx); err != nil {
		t.Fatalf("handshake through %s: %v", a.name, err)
	}
	aBefore, bBefore := a.mustView(t, "").self(), b.mustView(t, "").self()
	commit := todoCommit("fwd-commit-1", "fwd-todo", "L")
	res, ans, err := cl.push(ctx, a, commit)
	if ans != answered || res.Status != ssp2.CommitApplied || res.CommitSeq == nil {
		t.Fatalf("push through %s for %s (owned by %s): %s %+v %v, want applied", a.name, p, b.name, ans, res, err)
	}
	seq := *res.CommitSeq
	aAfter, bAfter := a.mustView(t, "").self(), b.mustView(t, "").self()
	for _, d := range []struct {
		what       string
		before, at uint64
		want       uint64
	}{
		{a.name + " forwarded sync", aBefore.Forwarded["sync"], aAfter.Forwarded["sync"], 1},
		{b.name + " served sync", bBefore.Served["sync"], bAfter.Served["sync"], 1},
		{a.name + " served sync", aBefore.Served["sync"], aAfter.Served["sync"], 0},
		{b.name + " forwarded sync", bBefore.Forwarded["sync"], bAfter.Forwarded["sync"], 0},
	} {
		if d.at-d.before != d.want {
			t.Errorf("%s: %d before the push, %d after, want +%d", d.what, d.before, d.at, d.want)
		}
	}

	again := newClusterClient(nil, "ada", "fwd-client", p)
	res, ans, err = again.push(ctx, third, commit)
	if ans != answered || res.Status != ssp2.CommitCached || res.CommitSeq == nil || *res.CommitSeq != seq {
		t.Fatalf("the same clientCommitId through %s: %s %+v %v, want cached as seq %d", third.name, ans, res, err, seq)
	}

	reader := &httpsync.Client{URL: third.base + "/sync", ClientID: "fwd-reader", Header: http.Header{"X-Actor": {"ada"}, "X-Partition": {p}}}
	r := httpsynctest.NewReplica(reader, schema.MustDemo())
	r.Subscribe("todos", "todos", map[string][]string{"list_id": {"L"}})
	if err := r.SyncUntilIdle(ctx, 10); err != nil {
		t.Fatalf("pull through %s: %v", third.name, err)
	}
	if row, ok := r.Rows["todos"]["fwd-todo"]; !ok || row.Values[2] != "title fwd-todo" {
		t.Fatalf("pull through %s: rows %+v, want fwd-todo", third.name, r.Rows["todos"])
	}

	log := c.checkLog(t, p, []pushAck{{partition: p, clientID: "fwd-client", commitID: commit.ClientCommitID, status: ssp2.CommitApplied, seq: seq, via: a}})
	if len(log) != 1 || log[0].committer != auditName(b.name) {
		t.Fatalf("log of %s: %+v, want one commit made by %s", p, log, b.name)
	}

	// synclane admin against a: the cluster as a sees it, and p owned by b.
	env := map[string]string{"SYNCLANE_ADMIN_URL": a.admin, "SYNCLANE_ADMIN_TOKEN": adminTestToken}
	code, out, stderr := runCmdEnv(t, env, "admin", "cluster")
	if code != 0 {
		t.Fatalf("admin cluster: exit %d %s", code, stderr)
	}
	for _, m := range c.members {
		if !strings.Contains(out, m.base) {
			t.Errorf("admin cluster lacks member %s:\n%s", m.base, out)
		}
	}
	if !strings.Contains(strings.Join(strings.Fields(out), " "), "health healthy") {
		t.Errorf("admin cluster: a is not healthy:\n%s", out)
	}
	for _, w := range []string{a.base + " (this member)", "CALL (THIS MEMBER)"} {
		if !strings.Contains(out, w) {
			t.Errorf("admin cluster lacks %q:\n%s", w, out)
		}
	}
	if code, out, stderr := runCmdEnv(t, env, "admin", "partitions"); code != 0 || !strings.Contains(out, "owned by member "+b.base) {
		t.Fatalf("admin partitions: exit %d %s %s, want %s owned by member %s", code, out, stderr, p, b.base)
	}
}

// kill -9 of the owner of a hot partition under 64 concurrent writers: the
// partition is served again within the target (5 s; asserted with a
// margin), no acknowledged commit is lost and none is applied twice.
func TestClusterKill9OwnerUnderLoad(t *testing.T) {
	c := startCluster(t, clusterOptions{leaseTTL: 2 * time.Second}) // the default: the target is for it
	victim, survivors := c.members[2], c.members[:2]
	p := c.ownedPartition(t, victim, "hot-")
	load := startLoad(t, loadConfig{writers: 64, partitions: []string{p},
		targets: func(w int) []*clusterMember { return rotate(c.members, w) }})
	for _, m := range c.members {
		load.waitAcks(t, 30*time.Second, "pushes acknowledged through "+m.name, 50, func(a pushAck) bool { return a.via == m })
	}
	owner, g1, _ := c.ownerRow(t, p)
	if owner != victim.base {
		t.Fatalf("%s is owned by %q in the database, want %s", p, owner, victim.base)
	}

	killAt := time.Now()
	victim.kill(t)
	after := func(a pushAck) bool { return a.sent.After(killAt) }
	load.waitAcks(t, 30*time.Second, "a push sent after the kill is acknowledged", 1, after)
	var recovered time.Time
	for _, a := range load.snapshot() {
		if after(a) && (recovered.IsZero() || a.at.Before(recovered)) {
			recovered = a.at
		}
	}
	load.waitAcks(t, 30*time.Second, "the load continues after the recovery", 300, func(a pushAck) bool { return a.sent.After(recovered) })
	load.finish()
	recovery := recovered.Sub(killAt)

	c.waitViews(t, survivors...)
	newOwner, g2, _ := c.ownerRow(t, p)
	if m := c.byBase(newOwner); m == nil || m == victim || g2 <= g1 {
		t.Errorf("after the kill %s is owned by %q at generation %d (was %s at %d), want a survivor at a higher generation", p, newOwner, g2, victim.base, g1)
	}
	acks := load.snapshot()
	c.checkLog(t, p, acks)
	t.Logf("kill -9 of %s (owner of %s, generation %d): recovery %v (first push sent after the kill acknowledged); new owner %s at generation %d; %s",
		victim.name, p, g1, recovery.Round(time.Millisecond), newOwner, g2, load.summary())
	if len(load.failures) > 0 || load.gaveUp > 0 {
		t.Errorf("%d pushes failed, %d gave up: %v", len(load.failures), load.gaveUp, load.failures[:min(len(load.failures), 10)])
	}
	if recovery > 8*time.Second {
		t.Errorf("recovery after kill -9 took %v; the target is 5s", recovery)
	}
}

// balancer is a load balancer's view of the members: it polls each
// member's /readyz every 100ms and sends to the members that answered 200
// last time.
type balancer struct {
	members []*clusterMember
	mu      sync.Mutex
	ready   map[*clusterMember]bool
	stop    chan struct{}
	done    chan struct{}
}

func startBalancer(t *testing.T, ms []*clusterMember) *balancer {
	b := &balancer{members: ms, ready: map[*clusterMember]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	hc := &http.Client{Timeout: 500 * time.Millisecond}
	b.poll(hc)
	go func() {
		defer close(b.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-b.stop:
				return
			case <-tick.C:
				b.poll(hc)
			}
		}
	}()
	t.Cleanup(func() { close(b.stop); <-b.done })
	return b
}

func (b *balancer) poll(hc *http.Client) {
	for _, m := range b.members {
		ok := false
		if res, err := hc.Get(m.base + "/readyz"); err == nil {
			ok = res.StatusCode == http.StatusOK
			res.Body.Close()
		}
		b.mu.Lock()
		b.ready[m] = ok
		b.mu.Unlock()
	}
}

// healthy returns the members the balancer sends to.
func (b *balancer) healthy() []*clusterMember {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*clusterMember
	for _, m := range b.members {
		if b.ready[m] {
			out = append(out, m)
		}
	}
	return out
}

// A rolling restart (each member in turn: SIGTERM, exit, start again on
// its address, back in every member's view) under load fails no request:
// the clients sit behind a load balancer that follows /readyz; a client
// whose connection is refused sends to another member; every request that
// got an HTTP answer succeeded.
func TestClusterRollingRestart(t *testing.T) {
	c := startCluster(t, clusterOptions{leaseTTL: 2 * time.Second})
	var parts []string
	for _, m := range c.members {
		parts = append(parts, c.ownedPartition(t, m, "roll-"+m.name+"-"))
	}
	lb := startBalancer(t, c.members)
	load := startLoad(t, loadConfig{writers: 24, partitions: parts, roundRobin: true, pullEvery: 4,
		targets: func(int) []*clusterMember { return lb.healthy() }})
	for _, p := range parts {
		load.waitAcks(t, 30*time.Second, "pushes acknowledged for "+p, 20, func(a pushAck) bool { return a.partition == p })
	}
	for _, m := range c.members {
		start, offset := time.Now(), m.logSize()
		m.stop(t)
		stopped := time.Now()
		// Its actors served their last jobs and wrote back their client
		// records before the others claimed the partitions (none of those
		// writes was fenced out).
		msgs, lines := m.logSince(t, offset)
		for i, msg := range msgs {
			if msg == "push group failed" || msg == "client records write failed; will retry" {
				t.Errorf("member %s, stopping: %s", m.name, lines[i])
			}
		}
		m.restart(t)
		c.waitViews(t, c.members...)
		back := time.Now()
		t.Logf("member %s: SIGTERM to exit %v, restart to back in every view %v", m.name, stopped.Sub(start).Round(time.Millisecond), back.Sub(stopped).Round(time.Millisecond))
		for _, p := range parts {
			load.waitAcks(t, 30*time.Second, fmt.Sprintf("pushes for %s after member %s restarted", p, m.name), 10,
				func(a pushAck) bool { return a.partition == p && a.sent.After(back) })
		}
	}
	load.finish()
	t.Logf("rolling restart: %s", load.summary())
	acks := load.snapshot()
	for _, p := range parts {
		c.checkLog(t, p, acksFor(acks, p))
	}
	load.mu.Lock()
	defer load.mu.Unlock()
	if n := load.counts[httpError] + load.counts[errorFrame] + load.counts[badAnswer] + load.counts[cutAnswer]; n > 0 || len(load.retryErr) > 0 || len(load.failures) > 0 || load.gaveUp > 0 {
		t.Errorf("failed requests during the rolling restart: %d error answers (%v), failures %v, %d commits gave up",
			n, load.retryErr, load.failures[:min(len(load.failures), 10)], load.gaveUp)
	}
	if n := load.counts[noAnswer]; n > 0 {
		t.Errorf("%d requests got no answer (connection closed or timed out) during the rolling restart", n)
	}
}

// A member paused (SIGSTOP) while it serves pushes of the partitions it
// owns loses them when its lease expires; once a survivor has committed
// under the new generation, the paused member, continued (SIGCONT),
// commits nothing under its old one: every commit in the log was made by
// the member holding the partition's generation at the time (the audit
// trigger), pushes sent to it are forwarded or refused until it rejoins,
// and after rejoining it claims the partition anew and serves it.
func TestClusterStaleOwnerCannotCommit(t *testing.T) {
	c := startCluster(t, clusterOptions{})
	o, survivors := c.members[0], c.members[1:]
	p := c.ownedPartition(t, o, "stale-")
	// Even writers send only to o, odd ones to the survivors.
	load := startLoad(t, loadConfig{writers: 16, partitions: []string{p}, targets: func(w int) []*clusterMember {
		if w%2 == 0 {
			return []*clusterMember{o}
		}
		return rotate(survivors, w)
	}})
	load.waitAcks(t, 30*time.Second, "pushes acknowledged through "+o.name, 30, func(a pushAck) bool { return a.via == o })
	owner, g1, _ := c.ownerRow(t, p)
	if owner != o.base {
		t.Fatalf("%s is owned by %q in the database, want %s", p, owner, o.base)
	}

	o.pause(t)
	pausedAt := time.Now()
	c.waitViews(t, survivors...)
	var g2 int64
	waitUntil(t, 20*time.Second, "a survivor claims "+p, func() (bool, string) {
		owner, gen, _ := c.ownerRow(t, p)
		g2 = gen
		return gen > g1 && owner != o.base, fmt.Sprintf("owner %s, generation %d (was %d)", owner, gen, g1)
	})
	claimedAt := time.Now()
	load.waitAcks(t, 20*time.Second, "a survivor accepts a push for "+p+" under the new generation", 5,
		func(a pushAck) bool { return a.via != o && a.sent.After(claimedAt) })
	owner2, g2, m1 := c.ownerRow(t, p)
	takeover := time.Since(pausedAt)

	o.resume(t)
	c.waitViews(t, c.members...)
	rejoinedAt := time.Now()
	if v := o.mustView(t, p); v.Owner != o.base {
		t.Errorf("after rejoining, %s sees %s owned by %s, want itself", o.name, p, v.Owner)
	}
	load.waitAcks(t, 30*time.Second, "pushes sent to "+o.name+" after it rejoined are acknowledged", 20,
		func(a pushAck) bool { return a.via == o && a.sent.After(rejoinedAt) })
	load.finish()

	acks := load.snapshot()
	log := c.checkLog(t, p, acks)
	byO := 0
	for _, lc := range log {
		if lc.seq <= m1 {
			continue
		}
		if lc.generation < g2 {
			t.Errorf("commit %d (%s, by %s) after the takeover (seq %d, generation %d) was made under generation %d", lc.seq, lc.commitID, lc.committer, m1, g2, lc.generation)
		}
		if lc.committer == auditName(o.name) {
			byO++
			if lc.generation <= g2 {
				t.Errorf("commit %d (%s) by the resumed %s under generation %d: not a new claim (the takeover's was %d)", lc.seq, lc.commitID, o.name, lc.generation, g2)
			}
		}
	}
	if byO == 0 {
		t.Errorf("the resumed %s committed nothing after rejoining: it does not serve %s", o.name, p)
	}
	final, g3, _ := c.ownerRow(t, p)
	if final != o.base || g3 <= g2 {
		t.Errorf("at the end %s is owned by %s at generation %d, want %s at a generation above %d", p, final, g3, o.base, g2)
	}
	st := o.mustView(t, "").self()
	t.Logf("SIGSTOP of %s (owner of %s at generation %d): takeover by %s at generation %d after %v (log at seq %d); "+
		"%s rejoined and committed %d commits at generation %d; its counters: ownershipLost %d, evictions %d, retries %d, unavailable %d, forwarded %v; %s",
		o.name, p, g1, owner2, g2, takeover.Round(time.Millisecond), m1, o.name, byO, g3,
		st.OwnershipLost, st.Evictions, st.Retries, st.Unavailable, st.Forwarded, load.summary())
	load.mu.Lock()
	defer load.mu.Unlock()
	if len(load.failures) > 0 || load.gaveUp > 0 {
		t.Errorf("%d pushes failed, %d gave up: %v", len(load.failures), load.gaveUp, load.failures[:min(len(load.failures), 10)])
	}
}
