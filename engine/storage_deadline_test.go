package engine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
)

// stallingStore stalls its first BeginPush until the call's context ends
// (a database that does not answer), recording the context's deadline.
type stallingStore struct {
	*memory.Store
	mu       sync.Mutex
	stalled  bool
	deadline time.Time // of the stalled call; zero: it had none
}

func (s *stallingStore) Backend() storage.Backend {
	b := s.Store.Backend()
	b.Log = s
	return b
}

func (s *stallingStore) BeginPush(ctx context.Context, p string) (storage.PushTx, error) {
	s.mu.Lock()
	first := !s.stalled
	s.stalled = true
	if first {
		s.deadline, _ = ctx.Deadline()
	}
	s.mu.Unlock()
	if first {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.Store.BeginPush(ctx, p)
}

// A request's storage work ends with the request's own deadline, not the
// runtime's (30s) storage timeout: a push whose database does not answer
// frees its partition at the request's deadline, and the partition's
// next request is served at once.
func TestStorageWaitEndsWithTheRequestDeadline(t *testing.T) {
	st := &stallingStore{Store: memory.New()}
	f := newFixture(t, st)
	a := f.client("alice", "ca")

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	want, _ := ctx.Deadline()
	_, err := f.eng.Sync(ctx, a.id, mustMsg(t, a, &ssp2.PushCommit{ClientCommitID: "c1",
		Operations: []ssp2.Operation{upsert("tasks", "t1", f.row("t1", "P", "x"), nil)}}))
	if se := syncerr.As(err); se == nil || se.Code != syncerr.InternalError || !se.Spec().Retryable {
		t.Fatalf("push whose storage stalled past its deadline: %v, want a retryable sync.internal_error", err)
	}
	start := time.Now()
	if pr := a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "x"), nil)); pr.Status != ssp2.CommitApplied {
		t.Fatalf("the next push: %+v", pr)
	}
	// Generous: the partition is free at the first request's deadline
	// (300ms), where the storage timeout would have held it for 30s.
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the next push was served after %v: the stalled call outlived its request", took)
	}
	st.mu.Lock()
	got := st.deadline
	st.mu.Unlock()
	if !got.Equal(want) {
		t.Fatalf("the stalled BeginPush had deadline %v, want the request's %v", got, want)
	}
}
