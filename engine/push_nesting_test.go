package engine_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
)

// nestingStore watches for reads made outside a push transaction of a
// partition while that transaction is open: on PostgreSQL such a read
// needs a second pool connection while the transaction holds one, and
// MaxConns partitions doing it at once stall the pool until their
// deadlines (issue 48). failTouch makes the next TouchPartition calls
// fail, as during a database outage.
type nestingStore struct {
	*memory.Store
	mu        sync.Mutex
	open      map[string]int // partition → push transactions open
	nested    []string       // "<call> <partition>" made while one was open
	failTouch int
}

func (s *nestingStore) Backend() storage.Backend {
	b := s.Store.Backend()
	b.Log, b.Clients, b.Leases = s, s, s
	return b
}

// outside records call on partition when a push transaction of it is open.
func (s *nestingStore) outside(call, partition string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[partition] > 0 {
		s.nested = append(s.nested, call+" "+partition)
	}
}

func (s *nestingStore) nestedCalls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.nested...)
}

func (s *nestingStore) BeginPush(ctx context.Context, p string) (storage.PushTx, error) {
	s.outside("BeginPush", p)
	tx, err := s.Store.BeginPush(ctx, p)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.open[p]++
	s.mu.Unlock()
	return &watchedTx{PushTx: tx, s: s, p: p}, nil
}

func (s *nestingStore) TouchPartition(ctx context.Context, p string, nowMs int64) (storage.PartitionInfo, error) {
	s.outside("TouchPartition", p)
	s.mu.Lock()
	fail := s.failTouch > 0
	if fail {
		s.failTouch--
	}
	s.mu.Unlock()
	if fail {
		return storage.PartitionInfo{}, errors.New("database unavailable (test)")
	}
	return s.Store.TouchPartition(ctx, p, nowMs)
}

func (s *nestingStore) ReadPartition(ctx context.Context, p string) (storage.PartitionInfo, error) {
	s.outside("ReadPartition", p)
	return s.Store.ReadPartition(ctx, p)
}

func (s *nestingStore) GetClient(ctx context.Context, p, clientID string) (*storage.ClientRecord, error) {
	s.outside("GetClient", p)
	return s.Store.GetClient(ctx, p, clientID)
}

func (s *nestingStore) BindClient(ctx context.Context, p, clientID, actorID string, nowMs int64) (string, error) {
	s.outside("BindClient", p)
	return s.Store.BindClient(ctx, p, clientID, actorID, nowMs)
}

func (s *nestingStore) BindClients(ctx context.Context, p string, nowMs int64, binds ...storage.ClientBinding) ([]storage.BoundClient, error) {
	s.outside("BindClients", p)
	return s.Store.BindClients(ctx, p, nowMs, binds...)
}

func (s *nestingStore) PutClient(ctx context.Context, p string, recs ...storage.ClientRecord) error {
	s.outside("PutClient", p)
	return s.Store.PutClient(ctx, p, recs...)
}

func (s *nestingStore) GetLease(ctx context.Context, p, clientID string) (*storage.LeaseRecord, error) {
	s.outside("GetLease", p)
	return s.Store.GetLease(ctx, p, clientID)
}

// watchedTx marks its partition's transaction closed once it ends.
type watchedTx struct {
	storage.PushTx
	s    *nestingStore
	p    string
	once sync.Once
}

func (t *watchedTx) end() {
	t.once.Do(func() {
		t.s.mu.Lock()
		t.s.open[t.p]--
		t.s.mu.Unlock()
	})
}

func (t *watchedTx) Commit(ctx context.Context) error {
	defer t.end()
	return t.PushTx.Commit(ctx)
}

func (t *watchedTx) Rollback(ctx context.Context) error {
	defer t.end()
	return t.PushTx.Rollback(ctx)
}

// A push reads nothing from storage outside its transaction while the
// transaction is open, also when its client bindings are void or were
// never read: after another process rotated the partition's log epoch,
// after the partition failed to load (a database outage), and in a
// resolver outage, where the round is authorized by the client's lease.
// Each push is still applied.
func TestPushReadsNothingOutsideItsTransaction(t *testing.T) {
	newStore := func() *nestingStore { return &nestingStore{Store: memory.New(), open: map[string]int{}} }
	applied := func(t *testing.T, c *client, ccid string) {
		t.Helper()
		if pr := c.push(ccid, upsert("tasks", ccid, c.f.row(ccid, "P", "x"), nil)); pr.Status != ssp2.CommitApplied {
			t.Fatalf("push %s: %+v", ccid, pr)
		}
	}
	noneNested := func(t *testing.T, st *nestingStore) {
		t.Helper()
		if n := st.nestedCalls(); len(n) > 0 {
			t.Fatalf("read outside an open push transaction: %v", n)
		}
	}

	t.Run("log epoch rotated by another process", func(t *testing.T) {
		st := newStore()
		f := newFixture(t, st)
		a := f.client("alice", "ca")
		applied(t, a, "c1")
		// Another process rotates the epoch; the client learns the new one
		// (from that process) and pushes here, where the actor still holds
		// the old epoch and a binding the rotation deleted.
		epoch, err := st.Store.RotateLogEpoch(context.Background(), "p1", time.Now().UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		a.epoch = &epoch
		applied(t, a, "c2")
		noneNested(t, st)
		if rec, err := st.Store.GetClient(context.Background(), "p1", "ca"); err != nil || rec == nil || rec.ActorID != "alice" {
			t.Fatalf("binding after the rotation: %+v, %v", rec, err)
		}
	})

	t.Run("partition failed to load", func(t *testing.T) {
		st := newStore()
		f := newFixture(t, st, func(c *engine.Config) { c.IdleTimeout = 20 * time.Millisecond })
		a := f.client("alice", "ca")
		applied(t, a, "c1")
		eventually(t, "the partition's actor passivated", func() bool { return f.eng.ActorStats().LiveActors == 0 })
		st.mu.Lock()
		st.failTouch = 1 // the restarted actor cannot load the partition
		st.mu.Unlock()
		applied(t, a, "c2")
		noneNested(t, st)
	})

	t.Run("outage round authorized by the lease", func(t *testing.T) {
		st := newStore()
		lf := newLeaseFixture(t, st, leaseTTL)
		lf.allow("alice", map[string][]string{"project_id": {"P"}})
		a := lf.client("alice", "ca")
		applied(t, a, "c1")
		lf.setOutage(true)
		applied(t, a, "c2")
		noneNested(t, st)
	})
}
