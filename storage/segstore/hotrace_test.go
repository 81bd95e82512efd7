package segstore

import (
	"context"
	"testing"
	"time"
)

// gatedStore pauses one Get after it has read the store, until released:
// the download it serves then offers what it read to the hot set after
// whatever the test did meanwhile.
type gatedStore struct {
	Store
	gate     chan struct{} // the next Get blocks on it once it has read
	arrived  chan struct{} // closed when that Get has read
	released chan struct{}
}

func (s *gatedStore) Get(ctx context.Context, partition, id string, nowMs int64) ([]Publication, []byte, error) {
	metas, data, err := s.Store.Get(ctx, partition, id, nowMs)
	if g := s.gate; g != nil {
		s.gate = nil
		close(s.arrived)
		<-g
	}
	return metas, data, err
}

// TestHotSetStaleReoffer reproduces, step by step, the race that refused
// a legitimate download (403 "effective scopes do not match segment"): a
// download that read the segment's entry list before a second entry (a
// second scope digest, same bytes) was stored offers that old list to the
// hot set after another download found the kept list stale and dropped it
// (Forget). The refetch after Forget must see the entry stored since,
// however the concurrent download's offer is interleaved.
func TestHotSetStaleReoffer(t *testing.T) {
	ctx := context.Background()
	now := time.UnixMilli(1_000_000)
	gs := &gatedStore{Store: NewMemory()}
	c := NewCache(gs, time.Hour, func() time.Time { return now }, nil)
	c.KeepHot(1 << 20)
	data := []byte("the same page bytes under two scope digests")
	id := ID(data)
	put := func(key, digest string) {
		t.Helper()
		m := Meta{Partition: "p", Key: key, ID: id, Table: "t", ScopeDigest: digest, ByteLength: int64(len(data)),
			CreatedAtMs: now.UnixMilli(), ExpiresAtMs: now.Add(time.Hour).UnixMilli()}
		if err := gs.Put(ctx, m, data); err != nil {
			t.Fatal(err)
		}
	}
	digests := func() map[string]bool {
		t.Helper()
		metas, _, err := c.Get(ctx, "p", id)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, m := range metas {
			out[m.ScopeDigest] = true
		}
		return out
	}
	put("k1", "d1")
	digests() // first download: seen

	// B reads the list [d1] from the store and pauses before offering it.
	gs.gate, gs.arrived = make(chan struct{}), make(chan struct{})
	release := gs.gate
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		_, _, _ = c.Get(ctx, "p", id)
	}()
	<-gs.arrived

	digests() // second download: kept hot as [d1]
	put("k2", "d2")
	// A (digest d2) finds the kept list stale and drops it, as the
	// download route does before reading the store again.
	if got := digests(); got["d2"] {
		t.Fatalf("the hot set already had d2: %v", got)
	}
	if !c.Forget("p", id) {
		t.Fatal("Forget: the segment was not kept hot")
	}
	digests() // another download reads [d1 d2] from the store (seen again)
	close(release)
	<-bDone // B offers its old list [d1]

	// A refetches: it must see d2.
	if got := digests(); !got["d2"] {
		t.Fatalf("refetch after Forget answered a stale entry list %v: a stale re-offer was kept", got)
	}
}
