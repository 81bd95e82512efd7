package admin_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	adminsvc "github.com/synclane/synclane/engine/admin"
	"github.com/synclane/synclane/engine/cluster"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/transport/admin"
)

// viewMembership is a cluster membership whose view a test sets.
type viewMembership struct {
	mu      sync.Mutex
	view    cluster.View
	changed chan struct{}
}

func (m *viewMembership) set(healthy bool, ids ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := cluster.View{Healthy: healthy, Revision: m.view.Revision + 1}
	for _, id := range ids {
		v.Members = append(v.Members, cluster.Member{ID: id, Incarnation: "inc-" + id[len(id)-1:], StartedAtMs: 1_700_000_000_000})
	}
	m.view = v
	if m.changed != nil {
		close(m.changed)
	}
	m.changed = make(chan struct{})
}

func (m *viewMembership) View() cluster.View {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.view
}

func (m *viewMembership) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// deadPeers answers no call: every forwarded request finds its owner
// unreachable (and is answered unavailable after the move timeout).
type deadPeers struct{}

var errDead = fmt.Errorf("%w: test member is not running", engine.ErrPeerUnreachable)

func (deadPeers) Sync(context.Context, string, engine.Identity, []byte) (io.ReadCloser, error) {
	return nil, errDead
}
func (deadPeers) ClientState(context.Context, string, engine.Identity, string) (engine.ClientState, error) {
	return engine.ClientState{}, errDead
}
func (deadPeers) BuildDeltas(context.Context, string, string, engine.DeltaRequest) (*engine.DeltaResult, error) {
	return nil, errDead
}
func (deadPeers) Ack(context.Context, string, string, []engine.Ack) error { return errDead }

const (
	memberA = "http://member-a"
	memberB = "http://member-b"
	memberC = "http://member-c"
)

// clusterServer is a server whose engine is member A of a three-member
// cluster (on PostgreSQL, as cluster mode needs): B answers its counters,
// C does not. The partitions p1..p9 are written while A is alone, then B
// and C join: the view divides them.
type clusterServer struct {
	*server
	view *viewMembership
	// owners maps each partition to its owner in the three-member view.
	owners map[string]string
}

var clusterParts = []string{"p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9"}

func newClusterServer(t *testing.T) *clusterServer {
	t.Helper()
	view := &viewMembership{}
	view.set(true, memberA)
	bStats := engine.ClusterStats{Self: memberB, Healthy: true, Forwarded: map[string]uint64{"sync": 7}, Served: map[string]uint64{"sync": 3},
		Retries: 2, Evictions: 1}
	st := pgtest.OpenSchema(t, pgtest.NewSchema(t), postgres.Options{MaxConns: 8})
	s := newServerFull(t, pgStore{st}, func(c *engine.Config) {
		c.Cluster = &engine.ClusterConfig{Self: memberA, Membership: view, Peers: deadPeers{}, MoveTimeout: 300 * time.Millisecond}
	}, func(o *admin.Options, eng *engine.Engine) {
		o.Cluster = func(ctx context.Context, p string) (any, error) {
			return admin.BuildClusterView(ctx, eng, p, func(ctx context.Context, id string) (engine.ClusterStats, error) {
				if id != memberB {
					return engine.ClusterStats{}, errors.New("dial tcp: connection refused (test)")
				}
				out := bStats
				out.Members = view.View().Members
				return out, nil
			}), nil
		}
	})
	for i, p := range clusterParts {
		s.push(p, "ada", fmt.Sprint("c", i), fmt.Sprint("x", i), "t", "P", "x")
	}
	view.set(true, memberA, memberB, memberC)
	cs := &clusterServer{server: s, view: view, owners: map[string]string{}}
	seen := map[string]bool{}
	for _, p := range clusterParts {
		o, ok := s.eng.Owner(p)
		if !ok {
			t.Fatalf("no owner of %s", p)
		}
		cs.owners[p] = o
		seen[o] = true
	}
	if !seen[memberA] || !seen[memberB] {
		t.Fatalf("the view gives %v: the test needs partitions on A and on B", cs.owners)
	}
	return cs
}

// pgStore adapts a PostgreSQL store to testStore.
type pgStore struct{ *postgres.Store }

func (p pgStore) Backend() storage.Backend { return p.Store.Backend() }

// ownedBy returns a partition owned by member.
func (cs *clusterServer) ownedBy(t *testing.T, member string) string {
	for _, p := range clusterParts {
		if cs.owners[p] == member {
			return p
		}
	}
	t.Fatalf("no partition owned by %s in %v", member, cs.owners)
	return ""
}

// In cluster mode the partition list names each partition's owner and
// says which this member does not own; the overview has the cluster line;
// GET /api/cluster/partitions divides the partitions; GET /api/cluster
// has every member, B's counters and C's error. A single-process server
// has none of it.
func TestClusterAPI(t *testing.T) {
	cs := newClusterServer(t)
	var pg adminsvc.Page[adminsvc.PartitionView]
	cs.ok("GET", "/api/partitions", &pg)
	if len(pg.Items) != len(clusterParts) {
		t.Fatalf("%d partitions, want %d", len(pg.Items), len(clusterParts))
	}
	owned := 0
	for _, p := range pg.Items {
		want := cs.owners[p.Partition]
		if p.Owner != want || p.OwnedElsewhere != (want != memberA) {
			t.Errorf("%s: owner %q ownedElsewhere %v, want %q %v", p.Partition, p.Owner, p.OwnedElsewhere, want, want != memberA)
		}
		if want == memberA {
			owned++
		}
	}
	var d adminsvc.PartitionDetail
	cs.ok("GET", "/api/partitions/"+cs.ownedBy(t, memberB), &d)
	if d.Owner != memberB || !d.OwnedElsewhere {
		t.Fatalf("detail: owner %q ownedElsewhere %v", d.Owner, d.OwnedElsewhere)
	}

	var ov adminsvc.Overview
	cs.ok("GET", "/api/overview", &ov)
	if ov.Cluster == nil || ov.Cluster.Self != memberA || !ov.Cluster.Healthy || ov.Cluster.Members != 3 {
		t.Fatalf("overview cluster %+v", ov.Cluster)
	}

	var own adminsvc.OwnershipView
	cs.ok("GET", "/api/cluster/partitions", &own)
	if own.Self != memberA || own.Partitions != len(clusterParts) || own.Owned != owned || len(own.OwnedList) != owned || own.OwnedTruncated || own.Unowned != 0 {
		t.Fatalf("ownership %+v, want %d of %d owned", own, owned, len(clusterParts))
	}
	total := 0
	for i, m := range own.Members {
		if want := []string{memberA, memberB, memberC}[i]; m.Member != want {
			t.Fatalf("ownership member %d is %s, want %s", i, m.Member, want)
		}
		n := 0
		for _, o := range cs.owners {
			if o == m.Member {
				n++
			}
		}
		if m.Partitions != n {
			t.Errorf("%s owns %d, want %d", m.Member, m.Partitions, n)
		}
		total += m.Partitions
	}
	if total != len(clusterParts) {
		t.Fatalf("shares add up to %d", total)
	}

	// A push for a partition of B goes to B, which does not answer: it is
	// forwarded, retried, and answered unavailable.
	_, err := cs.client(cs.ownedBy(t, memberB), "ada", "fwd").Push(context.Background(), &ssp2.PushCommit{ClientCommitID: "f1",
		Operations: []ssp2.Operation{{Table: "tasks", RowID: "t", Op: ssp2.OpDelete}}})
	if err == nil {
		t.Fatal("a push for a partition of an unreachable owner succeeded")
	}
	var cv admin.ClusterView
	cs.ok("GET", "/api/cluster?partition="+cs.ownedBy(t, memberB), &cv)
	if cv.Self != memberA || !cv.Healthy || len(cv.Members) != 3 || cv.Owner != memberB || cv.Forwarded["sync"] == 0 {
		t.Fatalf("cluster view %+v", cv)
	}
	for _, m := range cv.Members {
		switch m.ID {
		case memberA:
			if !m.Self || !m.Reachable || m.Stats == nil || m.Stats.Unavailable == 0 || m.Stats.Retries == 0 {
				t.Errorf("A: %+v %+v", m, m.Stats)
			}
		case memberB:
			if m.Self || !m.Reachable || m.Stats == nil || m.Stats.Forwarded["sync"] != 7 {
				t.Errorf("B: %+v", m)
			}
		case memberC:
			if m.Reachable || m.Stats != nil || m.Error == "" {
				t.Errorf("C: %+v", m)
			}
		}
	}

	single := newServer(t, backends[0].open(t))
	single.wantError("GET", "/api/cluster/partitions", http.StatusNotFound, "admin.not_found")
	var sov map[string]any
	single.ok("GET", "/api/overview", &sov)
	if _, ok := sov["cluster"]; ok {
		t.Fatalf("single-process overview has a cluster line: %v", sov["cluster"])
	}
	var spg adminsvc.Page[adminsvc.PartitionView]
	single.push("solo", "ada", "c", "x", "t", "P", "x")
	single.ok("GET", "/api/partitions", &spg)
	if len(spg.Items) != 1 || spg.Items[0].Owner != "" || spg.Items[0].OwnedElsewhere {
		t.Fatalf("single-process partition %+v", spg.Items)
	}
}
