package testcontrol

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
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

// The armed fault is taken by exactly one idempotency read.
func TestIdempotencyFaultIsTakenOnce(t *testing.T) {
	var f IdempotencyFault
	if f.Take() {
		t.Fatal("an unarmed fault was taken")
	}
	f.Arm()
	f.Arm() // arming twice still fails one read
	if !f.Take() {
		t.Fatal("the armed fault was not taken")
	}
	if f.Take() {
		t.Fatal("the fault outlived one read")
	}
}
