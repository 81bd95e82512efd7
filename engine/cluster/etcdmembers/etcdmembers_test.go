package etcdmembers

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zaptest"

	"github.com/synclane/synclane/engine/cluster"
	"github.com/synclane/synclane/engine/cluster/etcdtest"
)

// testCluster is the ClusterName the tests use.
const testCluster = "test-cluster"

// join joins srv's cluster as id with lease TTL ttl; the membership is
// closed at the end of the test.
func join(t *testing.T, srv *etcdtest.Server, id string, ttl time.Duration) *Membership {
	t.Helper()
	return joinSelf(t, srv, cluster.Member{ID: id}, ttl)
}

func joinSelf(t *testing.T, srv *etcdtest.Server, self cluster.Member, ttl time.Duration) *Membership {
	t.Helper()
	m, err := Join(context.Background(), config(t, srv, self, ttl))
	if err != nil {
		t.Fatalf("join %s: %v", self.ID, err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func config(t *testing.T, srv *etcdtest.Server, self cluster.Member, ttl time.Duration) Config {
	return Config{
		Endpoints:   []string{srv.Endpoint},
		ClusterName: testCluster,
		Self:        self,
		LeaseTTL:    ttl,
		DialTimeout: 2 * time.Second,
		Logger:      zaptest.NewLogger(t).Named(self.ID),
	}
}

// rawClient is a plain etcd client for inspecting and disturbing the keys.
func rawClient(t *testing.T, srv *etcdtest.Server) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitView waits until pred holds for m's view, following m.Changed, and
// returns how long it took; it fails t after within.
func waitView(t *testing.T, m *Membership, within time.Duration, what string, pred func(cluster.View) bool) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		ch := m.Changed()
		v := m.View()
		if pred(v) {
			return time.Since(start)
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("%s: not within %v; view of %s: %+v", what, within, m.Self().ID, m.View())
		}
	}
}

// waitRevision polls m's view until its Revision reaches rev: revisions
// that change no member are published without closing Changed, so there is
// nothing to wait on but the view itself.
func waitRevision(t *testing.T, m *Membership, rev int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for m.View().Revision < rev {
		if time.Now().After(deadline) {
			t.Fatalf("view of %s did not reach revision %d within %v: %+v", m.Self().ID, rev, within, m.View())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ids(v cluster.View) []string {
	var out []string
	for _, m := range v.Members {
		out = append(out, m.ID)
	}
	return out
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestConfigValidation(t *testing.T) {
	good := Config{Endpoints: []string{"http://127.0.0.1:1"}, ClusterName: "c", Self: cluster.Member{ID: "http://10.0.0.1:8080"}}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no endpoints", func(c *Config) { c.Endpoints = nil }, "Endpoints"},
		{"empty endpoint", func(c *Config) { c.Endpoints = []string{""} }, "Endpoints"},
		{"no cluster name", func(c *Config) { c.ClusterName = "" }, "ClusterName"},
		{"slash in cluster name", func(c *Config) { c.ClusterName = "a/b" }, "ClusterName"},
		{"space in cluster name", func(c *Config) { c.ClusterName = "a b" }, "ClusterName"},
		{"cluster name too long", func(c *Config) { c.ClusterName = strings.Repeat("x", 65) }, "ClusterName"},
		{"no ID", func(c *Config) { c.Self.ID = "" }, "Self.ID"},
		{"ID not a URL", func(c *Config) { c.Self.ID = "node-1" }, "Self.ID"},
		{"ID not http", func(c *Config) { c.Self.ID = "ftp://10.0.0.1" }, "Self.ID"},
		{"negative TTL", func(c *Config) { c.LeaseTTL = -time.Second }, "LeaseTTL"},
		{"negative dial timeout", func(c *Config) { c.DialTimeout = -time.Second }, "DialTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			cfg.Endpoints = slices.Clone(good.Endpoints)
			tc.change(&cfg)
			_, err := Join(context.Background(), cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Join: %v, want an error naming %s", err, tc.want)
			}
		})
	}
	if _, err := normalize(good); err != nil {
		t.Fatalf("the good config is refused: %v", err)
	}
	if _, err := normalize(Config{Endpoints: good.Endpoints, ClusterName: strings.Repeat("x", 64) + "", Self: good.Self}); err != nil {
		t.Fatalf("a 64-character cluster name is refused: %v", err)
	}
}

func TestConfigDefaults(t *testing.T) {
	base := Config{Endpoints: []string{"http://127.0.0.1:1"}, ClusterName: "c.1_x-y", Self: cluster.Member{ID: "https://a.example:443"}}
	for _, tc := range []struct {
		ttl, want time.Duration
	}{
		{0, DefaultLeaseTTL},
		{500 * time.Millisecond, time.Second},
		{time.Second, time.Second},
		{1200 * time.Millisecond, 2 * time.Second},
		{3 * time.Second, 3 * time.Second},
	} {
		cfg := base
		cfg.LeaseTTL = tc.ttl
		got, err := normalize(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got.LeaseTTL != tc.want {
			t.Errorf("LeaseTTL %v → %v, want %v", tc.ttl, got.LeaseTTL, tc.want)
		}
	}
	a, _ := normalize(base)
	b, _ := normalize(base)
	if a.DialTimeout != DefaultDialTimeout || a.Logger == nil {
		t.Errorf("defaults: DialTimeout %v, Logger %v", a.DialTimeout, a.Logger)
	}
	if a.Self.Incarnation == "" || a.Self.Incarnation == b.Self.Incarnation {
		t.Errorf("incarnations %q and %q: want random, distinct", a.Self.Incarnation, b.Self.Incarnation)
	}
	if now := time.Now().UnixMilli(); a.Self.StartedAtMs <= 0 || a.Self.StartedAtMs > now {
		t.Errorf("StartedAtMs %d, now %d", a.Self.StartedAtMs, now)
	}
	given := base
	given.Self.Incarnation, given.Self.StartedAtMs = "inc", 42
	if g, _ := normalize(given); g.Self.Incarnation != "inc" || g.Self.StartedAtMs != 42 {
		t.Errorf("given Incarnation and StartedAtMs replaced: %+v", g.Self)
	}
}

// TestThreeMembersJoin: three members see the three, sorted, Healthy, and
// the keys are where the package doc says, holding the members' JSON.
func TestThreeMembersJoin(t *testing.T) {
	srv := etcdtest.Start(t)
	ms := []*Membership{
		join(t, srv, "http://127.0.0.3:7000", time.Second),
		join(t, srv, "http://127.0.0.1:7000", time.Second),
		join(t, srv, "http://127.0.0.2:7000", time.Second),
	}
	want := []string{"http://127.0.0.1:7000", "http://127.0.0.2:7000", "http://127.0.0.3:7000"}
	for _, m := range ms {
		waitView(t, m, 5*time.Second, "three members", func(v cluster.View) bool { return slices.Equal(ids(v), want) && v.Healthy })
		v := m.View()
		if v.Revision <= 0 {
			t.Errorf("revision %d", v.Revision)
		}
		for _, other := range ms {
			i := slices.Index(ids(v), other.Self().ID)
			if i < 0 || v.Members[i] != other.Self() {
				t.Errorf("%s's view has %+v for %s, want %+v", m.Self().ID, v.Members, other.Self().ID, other.Self())
			}
		}
	}
	if ms[0].View().Has("http://127.0.0.4:7000") || !ms[0].View().Has(want[1]) {
		t.Error("View.Has disagrees with the members")
	}

	resp, err := rawClient(t, srv).Get(ctx(t), "/synclane/"+testCluster+"/members/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 3 {
		t.Fatalf("%d keys under the prefix, want 3", len(resp.Kvs))
	}
	for _, kv := range resp.Kvs {
		var mem cluster.Member
		if err := json.Unmarshal(kv.Value, &mem); err != nil {
			t.Fatalf("%s: %v", kv.Key, err)
		}
		if want := "/synclane/" + testCluster + "/members/" + url.PathEscape(mem.ID); string(kv.Key) != want {
			t.Errorf("key %s, want %s", kv.Key, want)
		}
		if kv.Lease == 0 {
			t.Errorf("key %s has no lease", kv.Key)
		}
	}
}

// TestLeaveDropsPromptly: a member that leaves is gone from the others'
// views well within the TTL (its lease is revoked); after Leave its own
// view is frozen without it and not Healthy, and Leave and Close do nothing
// more.
func TestLeaveDropsPromptly(t *testing.T) {
	srv := etcdtest.Start(t)
	const ttl = 2 * time.Second
	a, b, c := join(t, srv, "http://127.0.0.1:7001", ttl), join(t, srv, "http://127.0.0.1:7002", ttl), join(t, srv, "http://127.0.0.1:7003", ttl)
	for _, m := range []*Membership{a, b} {
		waitView(t, m, 5*time.Second, "c joined", func(v cluster.View) bool { return v.Has(c.Self().ID) })
	}
	changed := c.Changed()
	start := time.Now()
	if err := c.Leave(ctx(t)); err != nil {
		t.Fatalf("leave: %v", err)
	}
	for _, m := range []*Membership{a, b} {
		waitView(t, m, ttl/2, "c gone after Leave", func(v cluster.View) bool { return !v.Has(c.Self().ID) && len(v.Members) == 2 })
		t.Logf("Leave → %s's view drops it: %v", m.Self().ID, time.Since(start).Round(time.Millisecond))
	}
	select {
	case <-changed:
	default:
		t.Error("Leave did not fire the leaver's Changed")
	}
	if v := c.View(); v.Healthy || v.Has(c.Self().ID) {
		t.Errorf("the leaver's view after Leave: %+v", v)
	}
	if err := c.Leave(ctx(t)); err != nil {
		t.Errorf("second Leave: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close after Leave: %v", err)
	}
}

// TestCrashExpiresAfterTTL: a member closed without leaving (a crash) keeps
// its key until the lease expires, then the others drop it.
func TestCrashExpiresAfterTTL(t *testing.T) {
	srv := etcdtest.Start(t)
	const ttl = 2 * time.Second
	a, b, c := join(t, srv, "http://127.0.0.1:7001", ttl), join(t, srv, "http://127.0.0.1:7002", ttl), join(t, srv, "http://127.0.0.1:7003", ttl)
	for _, m := range []*Membership{a, b} {
		waitView(t, m, 5*time.Second, "c joined", func(v cluster.View) bool { return v.Has(c.Self().ID) })
	}
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	// The last renewal was at most a third of the TTL ago: the key is still
	// there (Close revoked nothing).
	resp, err := rawClient(t, srv).Get(ctx(t), c.key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("Close deleted the key at once (%d keys)", len(resp.Kvs))
	}
	for _, m := range []*Membership{a, b} {
		waitView(t, m, ttl+2*time.Second, "c gone after its TTL", func(v cluster.View) bool { return !v.Has(c.Self().ID) && len(v.Members) == 2 })
		t.Logf("Close (crash) → %s's view drops it: %v", m.Self().ID, time.Since(start).Round(time.Millisecond))
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := c.Leave(ctx(t)); err != nil {
		t.Errorf("Leave after Close: %v", err)
	}
}

// TestJoinUnreachable: with nothing listening at the endpoint, Join fails
// within DialTimeout (and a little).
func TestJoinUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + l.Addr().String()
	_ = l.Close()
	const dial = time.Second
	start := time.Now()
	m, err := Join(context.Background(), Config{
		Endpoints:   []string{endpoint},
		ClusterName: testCluster,
		Self:        cluster.Member{ID: "http://127.0.0.1:7001"},
		DialTimeout: dial,
		Logger:      zaptest.NewLogger(t),
	})
	took := time.Since(start)
	if err == nil {
		_ = m.Close()
		t.Fatal("Join succeeded with no etcd")
	}
	t.Logf("Join with no etcd failed after %v: %v", took.Round(time.Millisecond), err)
	if took > dial+time.Second {
		t.Fatalf("Join took %v to fail, DialTimeout %v", took, dial)
	}
	if !strings.Contains(err.Error(), endpoint) {
		t.Errorf("the error does not name the endpoint: %v", err)
	}
}

// TestEtcdOutage: when etcd stops, every member turns not Healthy within
// the TTL (and a little); when it comes back they are Healthy again and see
// each other.
func TestEtcdOutage(t *testing.T) {
	srv := etcdtest.Start(t)
	const ttl = 2 * time.Second
	a, b := join(t, srv, "http://127.0.0.1:7001", ttl), join(t, srv, "http://127.0.0.1:7002", ttl)
	waitView(t, a, 5*time.Second, "b joined", func(v cluster.View) bool { return v.Has(b.Self().ID) })

	start := time.Now()
	srv.Stop()
	for _, m := range []*Membership{a, b} {
		waitView(t, m, ttl+time.Second, "not healthy without etcd", func(v cluster.View) bool { return !v.Healthy })
		t.Logf("etcd stopped → %s not Healthy: %v", m.Self().ID, time.Since(start).Round(time.Millisecond))
	}

	srv.Restart(t)
	start = time.Now()
	for _, m := range []*Membership{a, b} {
		waitView(t, m, 15*time.Second, "healthy again with both", func(v cluster.View) bool {
			return v.Healthy && v.Has(a.Self().ID) && v.Has(b.Self().ID)
		})
		t.Logf("etcd restarted → %s Healthy with both: %v", m.Self().ID, time.Since(start).Round(time.Millisecond))
	}
	// The watches go on after the outage.
	c := join(t, srv, "http://127.0.0.1:7003", ttl)
	for _, m := range []*Membership{a, b} {
		waitView(t, m, 5*time.Second, "c joined after the outage", func(v cluster.View) bool { return v.Has(c.Self().ID) })
	}
}

// TestEtcdReplaced: etcd restarted empty (wiped or restored under its
// clients: the leases gone, the revisions starting over) — the members
// register again with new leases and follow the new store: a record only
// the old store had leaves their views, a member joining the new one enters
// them.
func TestEtcdReplaced(t *testing.T) {
	srv := etcdtest.Start(t)
	const ttl = time.Second
	a, b := join(t, srv, "http://127.0.0.1:7001", ttl), join(t, srv, "http://127.0.0.1:7002", ttl)
	// A record of the old store only, put often enough that the watches'
	// revisions are well above those the new store will have.
	raw := rawClient(t, srv)
	ghost := cluster.Member{ID: "http://127.0.0.1:7999", Incarnation: "ghost", StartedAtMs: 1}
	value, _ := json.Marshal(ghost)
	var lastRev int64
	for range 30 {
		resp, err := raw.Put(ctx(t), "/synclane/"+testCluster+"/members/"+url.PathEscape(ghost.ID), string(value))
		if err != nil {
			t.Fatal(err)
		}
		lastRev = resp.Header.Revision
	}
	for _, m := range []*Membership{a, b} {
		waitView(t, m, 5*time.Second, "three records", func(v cluster.View) bool { return len(v.Members) == 3 })
		// A revision alone does not fire Changed (the repeated puts change
		// no member), so the watch's progress to the last put is polled.
		waitRevision(t, m, lastRev, 5*time.Second)
	}
	oldA := a.currentLease()

	srv.RestartEmpty(t)
	start := time.Now()
	for _, m := range []*Membership{a, b} {
		waitView(t, m, 15*time.Second, "registered again in the new store", func(v cluster.View) bool {
			return v.Healthy && slices.Equal(ids(v), []string{a.Self().ID, b.Self().ID})
		})
		t.Logf("etcd replaced → %s registered again: %v", m.Self().ID, time.Since(start).Round(time.Millisecond))
	}
	if a.currentLease() == oldA {
		t.Errorf("a kept lease %x across the store's replacement", oldA)
	}
	c := join(t, srv, "http://127.0.0.1:7003", ttl)
	for _, m := range []*Membership{a, b} {
		waitView(t, m, 5*time.Second, "c joined the new store", func(v cluster.View) bool { return v.Has(c.Self().ID) })
	}
}

// TestLeaseLossReregisters: a member whose lease is lost (revoked here, as
// an expiry during a partition from etcd would) registers again with a new
// lease and is back in the others' views.
func TestLeaseLossReregisters(t *testing.T) {
	srv := etcdtest.Start(t)
	const ttl = time.Second
	a, b := join(t, srv, "http://127.0.0.1:7001", ttl), join(t, srv, "http://127.0.0.1:7002", ttl)
	waitView(t, b, 5*time.Second, "a joined", func(v cluster.View) bool { return v.Has(a.Self().ID) })
	old := a.currentLease()
	if _, err := rawClient(t, srv).Revoke(ctx(t), old); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for a.currentLease() == old || a.currentLease() == 0 || !a.View().Healthy {
		if time.Now().After(deadline) {
			t.Fatalf("a did not register again: lease %x (old %x), view %+v", a.currentLease(), old, a.View())
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitView(t, b, 5*time.Second, "a back in b's view", func(v cluster.View) bool { return v.Has(a.Self().ID) })
	resp, err := rawClient(t, srv).Get(ctx(t), a.key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) != a.currentLease() {
		t.Fatalf("a's key %+v, want it under lease %x", resp.Kvs, a.currentLease())
	}
}

// TestOwnKeyDeletedReregisters: a member whose key is deleted (its lease
// alive) registers again: the others saw it gone, so it must not go on as
// if nothing happened.
func TestOwnKeyDeletedReregisters(t *testing.T) {
	srv := etcdtest.Start(t)
	const ttl = time.Second
	a, b := join(t, srv, "http://127.0.0.1:7001", ttl), join(t, srv, "http://127.0.0.1:7002", ttl)
	waitView(t, b, 5*time.Second, "a joined", func(v cluster.View) bool { return v.Has(a.Self().ID) })
	old := a.currentLease()
	if _, err := rawClient(t, srv).Delete(ctx(t), a.key); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for a.currentLease() == old || a.currentLease() == 0 || !a.View().Has(a.Self().ID) {
		if time.Now().After(deadline) {
			t.Fatalf("a did not register again: lease %x (old %x), view %+v", a.currentLease(), old, a.View())
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitView(t, b, 5*time.Second, "a back in b's view", func(v cluster.View) bool { return v.Has(a.Self().ID) })
	ttlResp, err := rawClient(t, srv).TimeToLive(ctx(t), old)
	if err != nil {
		t.Fatal(err)
	}
	if ttlResp.TTL != -1 {
		t.Errorf("the abandoned lease %x lives on (TTL %d)", old, ttlResp.TTL)
	}
}

// TestDuplicateIDRefused: a second live process with the same ID (another
// incarnation) is refused, naming the ID; the first keeps its registration.
func TestDuplicateIDRefused(t *testing.T) {
	srv := etcdtest.Start(t)
	const ttl = time.Second
	id := "http://127.0.0.1:7001"
	a := join(t, srv, id, ttl)
	start := time.Now()
	m, err := Join(context.Background(), config(t, srv, cluster.Member{ID: id}, ttl))
	if err == nil {
		_ = m.Close()
		t.Fatal("a second member with the same ID joined")
	}
	t.Logf("duplicate refused after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if !errors.Is(err, ErrDuplicateMember) || !strings.Contains(err.Error(), id) || !strings.Contains(err.Error(), a.Self().Incarnation) {
		t.Fatalf("error %v: want ErrDuplicateMember naming %s and incarnation %s", err, id, a.Self().Incarnation)
	}
	if v := a.View(); !v.Healthy || len(v.Members) != 1 || v.Members[0] != a.Self() {
		t.Fatalf("the first member's view after the refusal: %+v", v)
	}
}

// TestRestartAfterCrashJoins: a new incarnation of a member that crashed
// joins once the crashed one's key expires, and the others see the new
// incarnation.
func TestRestartAfterCrashJoins(t *testing.T) {
	srv := etcdtest.Start(t)
	const ttl = time.Second
	id := "http://127.0.0.1:7001"
	a, b := join(t, srv, id, ttl), join(t, srv, "http://127.0.0.1:7002", ttl)
	waitView(t, b, 5*time.Second, "a joined", func(v cluster.View) bool { return v.Has(id) })
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a2 := join(t, srv, id, ttl)
	t.Logf("restarted member joined after %v", time.Since(start).Round(time.Millisecond))
	if a2.Self().Incarnation == a.Self().Incarnation {
		t.Fatal("same incarnation")
	}
	waitView(t, b, 5*time.Second, "b sees the new incarnation", func(v cluster.View) bool {
		return slices.Contains(v.Members, a2.Self())
	})
}

// TestSameIncarnationTakesOver: a Membership of the same incarnation (the
// same process joining again after Close) takes the key over at once and
// revokes the previous lease.
func TestSameIncarnationTakesOver(t *testing.T) {
	srv := etcdtest.Start(t)
	self := cluster.Member{ID: "http://127.0.0.1:7001", Incarnation: "inc-1", StartedAtMs: 1}
	a := joinSelf(t, srv, self, 5*time.Second)
	old := a.currentLease()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a2 := joinSelf(t, srv, self, 5*time.Second)
	raw := rawClient(t, srv)
	resp, err := raw.Get(ctx(t), a2.key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) != a2.currentLease() || a2.currentLease() == old {
		t.Fatalf("key %+v: want it under the new lease %x (old %x)", resp.Kvs, a2.currentLease(), old)
	}
	ttlResp, err := raw.TimeToLive(ctx(t), old)
	if err != nil {
		t.Fatal(err)
	}
	if ttlResp.TTL != -1 {
		t.Errorf("the previous lease %x lives on (TTL %d)", old, ttlResp.TTL)
	}
	if v := a2.View(); !v.Healthy || !slices.Equal(v.Members, []cluster.Member{self}) {
		t.Errorf("view %+v", v)
	}
}

// TestChangedSemantics: Changed is closed at the next change after the call
// and not before; a new channel is handed out for the change after; reading
// views changes nothing; Close fires the last one.
func TestChangedSemantics(t *testing.T) {
	srv := etcdtest.Start(t)
	const ttl = time.Second
	a := join(t, srv, "http://127.0.0.1:7001", ttl)
	ch := a.Changed()
	if a.Changed() != ch {
		t.Fatal("two calls without a change in between return different channels")
	}
	_ = a.View()
	_ = a.View()
	select {
	case <-ch:
		t.Fatal("closed before any change")
	default:
	}

	b := join(t, srv, "http://127.0.0.1:7002", ttl)
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("not closed when b joined")
	}
	waitView(t, a, time.Second, "b in a's view", func(v cluster.View) bool { return v.Has(b.Self().ID) })
	ch2 := a.Changed()
	select {
	case <-ch2:
		t.Fatal("the channel after the change is already closed")
	default:
	}

	// A record put by someone else is a change too; a malformed one is not
	// a member.
	raw := rawClient(t, srv)
	prefix := "/synclane/" + testCluster + "/members/"
	if _, err := raw.Put(ctx(t), prefix+"junk", "{not json"); err != nil {
		t.Fatal(err)
	}
	fake, _ := json.Marshal(cluster.Member{ID: "http://127.0.0.1:7003", Incarnation: "x", StartedAtMs: 3})
	if _, err := raw.Put(ctx(t), prefix+url.PathEscape("http://127.0.0.1:7003"), string(fake)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch2:
	case <-time.After(5 * time.Second):
		t.Fatal("not closed when a third record appeared")
	}
	waitView(t, a, time.Second, "the third record in a's view", func(v cluster.View) bool {
		return slices.Equal(ids(v), []string{"http://127.0.0.1:7001", "http://127.0.0.1:7002", "http://127.0.0.1:7003"})
	})

	ch3 := a.Changed()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch3:
	default:
		t.Fatal("Close did not fire Changed")
	}
	select {
	case <-a.Changed():
		t.Fatal("the channel after Close is closed")
	default:
	}
}

// Admit sees the members registered before this one registers (sorted,
// this member's own ID left out, read again at each call); when it
// refuses, Join fails with its error and nothing is registered: the
// others never see the refused member. When it admits, the member joins.
func TestAdmitBeforeRegistering(t *testing.T) {
	srv := etcdtest.Start(t)
	const ttl = 2 * time.Second
	b := join(t, srv, "http://127.0.0.1:7002", ttl)
	a := join(t, srv, "http://127.0.0.1:7001", ttl)
	self := "http://127.0.0.1:7003"
	refusal := errors.New("the cluster secret differs")
	var seen [][]string
	cfg := config(t, srv, cluster.Member{ID: self}, ttl)
	cfg.Admit = func(ctx context.Context, registered func(context.Context) ([]cluster.Member, error)) error {
		for range 2 {
			ms, err := registered(ctx)
			if err != nil {
				return err
			}
			var got []string
			for _, m := range ms {
				got = append(got, m.ID)
			}
			seen = append(seen, got)
		}
		return refusal
	}
	m, err := Join(ctx(t), cfg)
	if err == nil {
		_ = m.Close()
		t.Fatal("Join succeeded although Admit refused")
	}
	want := []string{a.Self().ID, b.Self().ID}
	if !errors.Is(err, refusal) || len(seen) != 2 || !slices.Equal(seen[0], want) || !slices.Equal(seen[1], want) {
		t.Fatalf("Join = %v after Admit saw %v, want the refusal after %v twice", err, seen, want)
	}
	resp, err := rawClient(t, srv).Get(ctx(t), "/synclane/"+testCluster+"/members/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Key), url.PathEscape(self)) {
			t.Fatalf("the refused member is registered: %s", kv.Key)
		}
	}
	if len(resp.Kvs) != 2 {
		t.Fatalf("%d member keys after the refusal, want 2", len(resp.Kvs))
	}

	// A key of this member's ID (a crashed run's) is left out; admitted,
	// the member joins.
	cfg.Self = cluster.Member{ID: a.Self().ID}
	_ = a.Close() // its key stays until its lease expires
	seen = nil
	cfg.Admit = func(ctx context.Context, registered func(context.Context) ([]cluster.Member, error)) error {
		ms, err := registered(ctx)
		for _, m := range ms {
			seen = append(seen, []string{m.ID})
		}
		return err
	}
	m, err = Join(ctx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if len(seen) != 1 || seen[0][0] != b.Self().ID {
		t.Fatalf("Admit of %s saw %v, want only %s", cfg.Self.ID, seen, b.Self().ID)
	}
	waitView(t, b, 10*time.Second, "the admitted member in b's view", func(v cluster.View) bool { return slices.Contains(ids(v), cfg.Self.ID) })
}
