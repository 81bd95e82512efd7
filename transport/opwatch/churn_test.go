package opwatch_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/opwire"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/sqlite"
)

// blockingStore holds every operation query until release is closed,
// honouring its context or not; entered and cancelled report them.
type blockingStore struct {
	*sqlite.Store
	honourCtx bool
	release   chan struct{}
	entered   chan struct{}
	cancelled chan struct{}
	inflight  atomic.Int64
	peak      atomic.Int64
}

func (s *blockingStore) Query(ctx context.Context, p string, running int32, q storage.Query, check func(storage.ServeGate) error) (storage.QueryResult, error) {
	n := s.inflight.Add(1)
	defer s.inflight.Add(-1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	select {
	case s.entered <- struct{}{}:
	default:
	}
	done := ctx.Done()
	if !s.honourCtx {
		done = nil
	}
	select {
	case <-s.release:
	case <-done:
		s.cancelled <- struct{}{}
		return storage.QueryResult{}, ctx.Err()
	}
	return s.Store.Query(ctx, p, running, q, check)
}

func blockingEnv(t *testing.T, honourCtx bool) (*env, *blockingStore) {
	bs := &blockingStore{honourCtx: honourCtx, release: make(chan struct{}), entered: make(chan struct{}, 1), cancelled: make(chan struct{}, 64)}
	e := newEnvWith(t, func(st *sqlite.Store) storage.Backend {
		bs.Store = st
		b := st.Backend()
		b.Queries = bs
		return b
	})
	t.Cleanup(func() { close(bs.release) }) // runs first: lets the held queries end before the server closes
	return e, bs
}

// TestUnwatchedRunsHoldTheirSlot: watch/unwatch churn on one socket cannot
// run more queries at once than MaxWatches, even against a store that
// ignores cancellation: an unwatched watch whose query still runs keeps
// its slot until the query ends.
func TestUnwatchedRunsHoldTheirSlot(t *testing.T) {
	e, bs := blockingEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sk := e.dial(ctx)
	for range 200 { // never more than one watch registered at a time
		sk.watch(ctx, "w", "L")
		sk.send(ctx, opwire.Object{{Key: "kind", Value: "unwatch"}, {Key: "watchId", Value: "w"}})
	}
	// Messages are handled in order: once this one is answered, every
	// watch and unwatch before it was.
	sk.send(ctx, opwire.Object{{Key: "kind", Value: "watch"}, {Key: "watchId", Value: "probe"}, {Key: "clientId", Value: "watcher"},
		{Key: "operationId", Value: "no-such-query"}})
	for {
		if kind, id, _, _, _ := sk.next(ctx); kind == "error" && id == "probe" {
			break
		}
	}
	if got := bs.peak.Load(); got > 32 {
		t.Fatalf("one socket with at most one watch registered ran %d queries at once (MaxWatches 32)", got)
	}
}

// TestUnwatchCancelsTheRunningQuery: unwatching a watch cancels the query
// its run is waiting on.
func TestUnwatchCancelsTheRunningQuery(t *testing.T) {
	e, bs := blockingEnv(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sk := e.dial(ctx)
	sk.watch(ctx, "w", "L")
	<-bs.entered
	sk.send(ctx, opwire.Object{{Key: "kind", Value: "unwatch"}, {Key: "watchId", Value: "w"}})
	// Well before the engine's Operations.Timeout (10 s) would end it.
	select {
	case <-bs.cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the unwatched watch's query was not cancelled")
	}
}
