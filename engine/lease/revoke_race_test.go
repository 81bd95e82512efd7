package lease

import (
	"context"
	"testing"
	"time"

	"github.com/synclane/synclane/storage"
)

// hookStore runs onSwapDone once, right after a successful SwapLease
// returns to its caller's stack (before the caller's next statement).
type hookStore struct {
	storage.Leases
	onSwapDone func()
}

func (h *hookStore) SwapLease(ctx context.Context, partition string, rec storage.LeaseRecord, prev []byte) (bool, error) {
	ok, err := h.Leases.SwapLease(ctx, partition, rec, prev)
	if f := h.onSwapDone; ok && f != nil {
		h.onSwapDone = nil
		f() // a revocation in this process lands between the slide's write and its cache update
	}
	return ok, err
}

// TestRevokeRacingASlideIsNotUndoneByTheCache: a revocation in the same
// process that interleaves with a slide (an admin revoke while the
// client's round is sliding) must not leave the slid record cached: the
// next online round gets a fresh lease, not the revoked one.
func TestRevokeRacingASlideIsNotUndoneByTheCache(t *testing.T) {
	ctx := context.Background()
	hs := &hookStore{Leases: newStore(t)}
	clk := &clock{t: time.UnixMilli(1_000_000)}
	k := newKeeper(t, hs, clk, time.Hour)
	grants := map[string][]string{"p": {"a"}}
	var revoked string
	hs.onSwapDone = func() {
		id, err := k.Revoke(ctx, "P", "c1")
		if err != nil {
			t.Fatal(err)
		}
		revoked = id
	}
	l1, err := k.Slide(ctx, "P", "c1", "alice", grants)
	if err != nil {
		t.Fatal(err)
	}
	if revoked != l1.LeaseID {
		t.Fatalf("revoked %q, slid %q", revoked, l1.LeaseID)
	}
	clk.add(time.Second)
	l2, err := k.Slide(ctx, "P", "c1", "alice", grants)
	if err != nil {
		t.Fatal(err)
	}
	if l2.LeaseID == revoked {
		_, aerr := k.Authorize(ctx, "P", "c1", "alice")
		t.Fatalf("the round after the revocation (same process) was sent the revoked lease %s (expires %d); an outage round on it: %v", l2.LeaseID, l2.ExpiresAtMs, aerr)
	}
}
