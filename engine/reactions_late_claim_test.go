package engine_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/reactions"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/sqlite"
)

// TestLateReactionClaimIsGivenBack: the worker reads its clock, then waits
// for the SQLite write lock to claim. A push that holds the lock (a slow
// validator, well within StorageTimeout) made the claim happen after most
// of the lease it wrote had passed: the handler was called with an expired
// context and the attempt spent (dead-lettered). Such claims are given back.
func TestLateReactionClaimIsGivenBack(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "s.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var entryErrs []error
	f := newFixture(t, st, func(c *engine.Config) {
		c.Validators = map[string]engine.RowValidator{"tasks": func(ctx context.Context, w *engine.RowWrite) error {
			if w.RowID == "slow" {
				time.Sleep(1500 * time.Millisecond) // a slow host check, far below StorageTimeout (30s)
				return nil
			}
			return w.React(engine.Reaction{Name: "notify", Payload: []byte(w.RowID), MaxAttempts: 1})
		}}
		c.Reactions = reactions.Options{
			Handlers: map[string]reactions.Handler{"notify": func(ctx context.Context, r reactions.Stored) error {
				mu.Lock()
				entryErrs = append(entryErrs, ctx.Err())
				mu.Unlock()
				// A well-behaved handler: 10ms of work, honouring ctx.
				select {
				case <-time.After(10 * time.Millisecond):
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}},
			Lease: time.Second, PollInterval: time.Hour, ClaimInterval: 200 * time.Millisecond,
		}
	})
	a := f.client("alice", "ca")
	b := f.client("alice", "cb")
	a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "x"), nil)) // schedules the reaction, wakes the worker
	b.push("c2", upsert("tasks", "slow", f.row("slow", "P", "x"), nil))
	ctx := context.Background()
	eventually(t, "the reaction settled", func() bool {
		s, err := f.eng.Reactions().Stats(ctx)
		return err == nil && s.Pending == 0
	})
	s, _ := f.eng.Reactions().Stats(ctx)
	mu.Lock()
	defer mu.Unlock()
	if s.Dead != 0 {
		rs, _ := f.eng.Reactions().List(ctx, storage.ReactionFilter{})
		t.Fatalf("the reaction was dead-lettered without a real attempt: handler entry ctx errors %v; stored %+v", entryErrs, rs)
	}
}
