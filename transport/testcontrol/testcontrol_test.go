package testcontrol

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
)

func TestClockMovesOnlyWhenAdvanced(t *testing.T) {
	c := NewClock(1_000)
	if got := c.Now().UnixMilli(); got != 1_000 {
		t.Fatalf("start %d", got)
	}
	if got := c.Advance(250 * time.Millisecond).UnixMilli(); got != 1_250 {
		t.Fatalf("after advance %d", got)
	}
	if got := c.Now().UnixMilli(); got != 1_250 {
		t.Fatalf("clock moved by itself: %d", got)
	}
}

func TestResolverGrantsCopiesAndFails(t *testing.T) {
	r := NewResolver()
	ctx := context.Background()
	got, err := r.ResolveScopes(ctx, engine.Identity{ActorID: "ada"})
	if err != nil || len(got) != 0 {
		t.Fatalf("unset actor: %v, %v; want no grants", got, err)
	}
	r.Set("ada", map[string][]string{"project_id": {"p1"}})
	got, _ = r.ResolveScopes(ctx, engine.Identity{ActorID: "ada"})
	got["project_id"][0] = "mutated" // callers may not change the table
	again, _ := r.ResolveScopes(ctx, engine.Identity{ActorID: "ada"})
	if again["project_id"][0] != "p1" {
		t.Fatalf("grants were shared with a caller: %v", again)
	}
	r.SetFailing(true)
	if _, err := r.ResolveScopes(ctx, engine.Identity{ActorID: "ada"}); !errors.Is(err, ErrResolverFailing) {
		t.Fatalf("failing resolver: %v", err)
	}
}

// The armed failure makes exactly one idempotency read unreadable.
func TestStoreFailsOneIdempotencyLookup(t *testing.T) {
	ctx := context.Background()
	st := WrapStore(memory.New())
	if err := st.EnsureSchema(ctx, schema.MustDemo()); err != nil {
		t.Fatal(err)
	}
	tx, err := st.BeginPush(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if rec, err := tx.LookupIdempotency(ctx, "c", "k"); err != nil || rec != nil {
		t.Fatalf("unarmed lookup: %+v, %v", rec, err)
	}
	st.FailNextIdempotencyLookup()
	st.FailNextIdempotencyLookup() // arming twice still fails one read
	rec, err := tx.LookupIdempotency(ctx, "c", "k")
	if err != nil || rec == nil || rec.Status != ssp2.CommitApplied || rec.ClientCommitID != "k" {
		t.Fatalf("armed lookup: %+v, %v", rec, err)
	}
	if rec, err := tx.LookupIdempotency(ctx, "c", "k"); err != nil || rec != nil {
		t.Fatalf("the failure outlived one read: %+v, %v", rec, err)
	}
	var _ storage.PushTx = tx
}
