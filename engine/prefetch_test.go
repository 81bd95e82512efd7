package engine_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
)

// prefetchStore is a memory store whose push transactions record the keys
// the partition prefetches (storage.PushTx.Prefetch).
type prefetchStore struct {
	*memory.Store
	mu   sync.Mutex
	idem []storage.IdempotencyKey
	rows []string
}

// Backend gives the engine the store with the recording Log role.
func (s *prefetchStore) Backend() storage.Backend {
	b := s.Store.Backend()
	b.Log = s
	return b
}

func (s *prefetchStore) BeginPush(ctx context.Context, partition string) (storage.PushTx, error) {
	tx, err := s.Store.BeginPush(ctx, partition)
	if err != nil {
		return nil, err
	}
	return &prefetchTx{PushTx: tx, s: s}, nil
}

type prefetchTx struct {
	storage.PushTx
	s *prefetchStore
}

func (tx *prefetchTx) Prefetch(_ context.Context, idem []storage.IdempotencyKey, rows []storage.RowKey) error {
	tx.s.mu.Lock()
	defer tx.s.mu.Unlock()
	tx.s.idem = append(tx.s.idem, idem...)
	for _, r := range rows {
		tx.s.rows = append(tx.s.rows, r.Table.Name+"/"+r.RowID)
	}
	return nil
}

// A push group hands a prefetching store every idempotency key and row of
// its commits before applying them (operations on unknown tables left
// out), and the commits are answered as without it.
func TestPushPrefetchesTheGroupsKeys(t *testing.T) {
	st := &prefetchStore{Store: memory.New()}
	f := newFixture(t, st)
	c := f.client("alice", "c1")
	rep, err := c.sync(
		&ssp2.PushCommit{ClientCommitID: "k1", Operations: []ssp2.Operation{upsert("tasks", "t1", f.row("t1", "P", "one"), nil), upsert("tasks", "t2", f.row("t2", "P", "two"), nil)}},
		&ssp2.PushCommit{ClientCommitID: "k2", Operations: []ssp2.Operation{upsert("nope", "x", []byte{0}, nil)}},
	)
	if err != nil {
		t.Fatal(err)
	}
	rs := results(rep)
	if len(rs) != 2 || rs[0].Status != ssp2.CommitApplied || rs[1].Status != ssp2.CommitRejected {
		t.Fatalf("results %+v", rs)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	wantIdem := []storage.IdempotencyKey{{ClientID: "c1", ClientCommitID: "k1"}, {ClientID: "c1", ClientCommitID: "k2"}}
	if !slices.Equal(st.idem, wantIdem) {
		t.Fatalf("prefetched idempotency keys %v, want %v", st.idem, wantIdem)
	}
	if want := []string{"tasks/t1", "tasks/t2"}; !slices.Equal(st.rows, want) {
		t.Fatalf("prefetched rows %v, want %v", st.rows, want)
	}
}
