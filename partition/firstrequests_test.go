package partition

import (
	"context"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
)

// countingClients counts the binding writes and record reads a partition
// makes.
type countingClients struct {
	storage.Clients
	bindWrites, bound, gets int
}

func (c *countingClients) BindClients(ctx context.Context, partition string, nowMs int64, binds ...storage.ClientBinding) ([]storage.BoundClient, error) {
	c.bindWrites++
	c.bound += len(binds)
	return c.Clients.BindClients(ctx, partition, nowMs, binds...)
}

func (c *countingClients) BindClient(context.Context, string, string, string, int64) (string, error) {
	panic("the partition binds through BindClients")
}

func (c *countingClients) GetClient(ctx context.Context, partition, clientID string) (*storage.ClientRecord, error) {
	c.gets++
	return c.Clients.GetClient(ctx, partition, clientID)
}

// firstRequestsPartition returns partition "p" on a memory store whose
// client calls cc counts, loaded, and its log epoch.
func firstRequestsPartition(t *testing.T) (*Partition, *memory.Store, *countingClients, *Counters, string) {
	t.Helper()
	ctx := context.Background()
	s := testSchema(t)
	st := memory.New()
	if err := st.EnsureSchema(ctx, s); err != nil {
		t.Fatal(err)
	}
	b := st.Backend()
	cc := &countingClients{Clients: b.Clients}
	b.Clients = cc
	pc := NewConfig(s, b, Gate{Running: s.Version})
	pc.Counters = &Counters{}
	p := New("p", pc)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	p.load(ctx)
	return p, st, cc, pc.Counters, p.token.LogEpoch
}

// bootstrapPull is a fresh client's first pull of tasks (cursor -1) under
// epoch; a nil epoch makes it the request acquiring the epoch.
func bootstrapPull(actor, cid string, epoch *string, cursor int64) *SyncJob {
	req := &ssp2.Request{WireVersion: ssp2.WireV2, Header: &ssp2.ReqHeader{ClientID: cid, SchemaVersion: 1, LogEpoch: epoch},
		Pull:          &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows},
		Subscriptions: []*ssp2.Subscription{{ID: "s", Table: "tasks", Scopes: map[string][]string{"project_id": {"P"}}, Cursor: cursor}}}
	if epoch == nil {
		req.Subscriptions = nil
	}
	return NewSyncJob(context.Background(), actor, req, Allowed{"project_id": {"*"}, "team_id": {"*"}}, true)
}

// TestFirstRequestsBatchable: a fresh client's first requests (acquiring
// the epoch, a pull at cursor -1) join a batch; a later pull does not,
// and a push is the only kind grouped into a push transaction.
func TestFirstRequestsBatchable(t *testing.T) {
	epoch := "e"
	for _, c := range []struct {
		name string
		j    *SyncJob
		want bool
	}{
		{"epoch acquisition", bootstrapPull("u", "c", nil, -1), true},
		{"pull at cursor -1", bootstrapPull("u", "c", &epoch, -1), true},
		{"incremental pull", bootstrapPull("u", "c", &epoch, 5), false},
	} {
		if got := c.j.Batchable(); got != c.want {
			t.Errorf("%s: Batchable = %v, want %v", c.name, got, c.want)
		}
		if c.j.push() != nil {
			t.Errorf("%s: a pull was taken for a push group", c.name)
		}
	}
}

// TestFirstRequestsShareOneBindingWrite: fresh clients' first pulls that
// the actor hands over together are bound in one durable write, none
// read back, and served with one gate verify; a clientId two actors use
// in the batch is bound to the first, and the second is refused as it is
// when the requests come one by one. Every binding answered is stored.
func TestFirstRequestsShareOneBindingWrite(t *testing.T) {
	ctx := context.Background()
	p, st, cc, counters, epoch := firstRequestsPartition(t)
	jobs := []*SyncJob{
		bootstrapPull("u1", "c1", nil, -1), // acquires the epoch: binds nothing
		bootstrapPull("u1", "c1", &epoch, -1),
		bootstrapPull("u2", "c2", &epoch, -1),
		bootstrapPull("mallory", "c1", &epoch, -1),
		bootstrapPull("u3", "c3", &epoch, -1),
	}
	batch := make([]Job, len(jobs))
	for i, j := range jobs {
		batch[i] = j
	}
	p.Handle(ctx, batch)
	if cc.bindWrites != 1 || cc.bound != 3 {
		t.Fatalf("%d binding writes of %d bindings, want 1 of 3", cc.bindWrites, cc.bound)
	}
	if cc.gets != 0 {
		t.Fatalf("%d client records read: the batch's bindings were read back or looked up", cc.gets)
	}
	if g, n := counters.PullGroups.Load(), counters.GroupedPulls.Load(); g != 1 || n != 4 {
		// (mallory's pull is answered by its checks, not the group's verify)
		t.Fatalf("%d pull groups of %d replies, want 1 of 4", g, n)
	}
	if c := counters.BindingWrites.Load(); c != 1 {
		t.Fatalf("BindingWrites = %d, want 1", c)
	}
	for i, j := range jobs {
		rep, err := j.Wait(ctx)
		switch {
		case i == 0:
			if err != nil || !rep.Reset {
				t.Fatalf("epoch acquisition: %+v, %v; want a reset header", rep, err)
			}
		case i == 3:
			if syncerr.CodeOf(err) != syncerr.InvalidClientID {
				t.Fatalf("c1 used by a second actor in the batch: %v, want %s", err, syncerr.InvalidClientID)
			}
		default:
			if err != nil || rep.Reset {
				t.Fatalf("pull %d: %+v, %v", i, rep, err)
			}
		}
	}
	for cid, actor := range map[string]string{"c1": "u1", "c2": "u2", "c3": "u3"} {
		if rec, err := st.GetClient(ctx, "p", cid); err != nil || rec == nil || rec.ActorID != actor {
			t.Fatalf("stored binding of %s: %+v, %v; want actor %s", cid, rec, err, actor)
		}
	}
	// A later request of a bound client as another actor is refused; as
	// its own actor it is served, without a new binding write.
	again := bootstrapPull("mallory", "c2", &epoch, -1)
	p.Handle(ctx, []Job{again})
	if _, err := again.Wait(ctx); syncerr.CodeOf(err) != syncerr.InvalidClientID {
		t.Fatalf("c2 as another actor: %v, want %s", err, syncerr.InvalidClientID)
	}
	own := bootstrapPull("u2", "c2", &epoch, -1)
	p.Handle(ctx, []Job{own})
	if _, err := own.Wait(ctx); err != nil || cc.bindWrites != 1 {
		t.Fatalf("c2 as its own actor: %v, %d binding writes", err, cc.bindWrites)
	}
}

// TestPullGroupClosedGateRefusesEvery: a group of first pulls built under
// the token of an earlier open read is verified once; when the gate
// closed meanwhile (a checkpoint this process did not declare is
// pending), every pull of the group is refused, none recorded, whether
// the group reused the earlier read or read the gate itself.
func TestPullGroupClosedGateRefusesEvery(t *testing.T) {
	for _, reuse := range []bool{true, false} {
		ctx := context.Background()
		p, st, _, _, epoch := firstRequestsPartition(t)
		first := bootstrapPull("u0", "c0", &epoch, -1)
		p.Handle(ctx, []Job{first})
		if _, err := first.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok := p.lastOpen(); !ok {
			t.Fatal("a served pull left no open gate read to reuse")
		}
		if !reuse {
			p.forgetOpen()
		}
		if _, err := st.DeclareCheckpoint(ctx, storage.CheckpointDeclaration{Partition: "p", Name: "other", SchemaVersion: p.cfg.Schema.Version}, 1); err != nil {
			t.Fatal(err)
		}
		jobs := []*SyncJob{bootstrapPull("u1", "c1", &epoch, -1), bootstrapPull("u2", "c2", &epoch, -1), bootstrapPull("u3", "c3", nil, -1)}
		p.Handle(ctx, []Job{jobs[0], jobs[1], jobs[2]})
		for i, j := range jobs {
			if rep, err := j.Wait(ctx); syncerr.CodeOf(err) != syncerr.SchemaNotReady {
				t.Fatalf("reuse=%v: pull %d under a closed gate: %+v, %v; want %s", reuse, i, rep, err, syncerr.SchemaNotReady)
			}
		}
		if p.clients.dirty != 1 { // c0's round only
			t.Fatalf("reuse=%v: %d client records buffered, want c0's only", reuse, p.clients.dirty)
		}
	}
}
