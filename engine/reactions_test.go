package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/reactions"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

// eventually polls cond until it holds or 20s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// reactingValidator schedules one "notify" reaction per task write whose
// title is not "no-reaction", with the row id as payload.
func reactingValidator(maxAttempts int) map[string]engine.RowValidator {
	return map[string]engine.RowValidator{"tasks": func(ctx context.Context, w *engine.RowWrite) error {
		if w.Row != nil && w.Row[2] == "reject" {
			_ = w.React(engine.Reaction{Name: "notify", Payload: []byte("rejected-" + w.RowID)})
			return &engine.Rejection{Code: "app.rejected"}
		}
		return w.React(engine.Reaction{Name: "notify", Payload: []byte(w.RowID), MaxAttempts: maxAttempts})
	}}
}

func fastReactions(h reactions.Handler) reactions.Options {
	return reactions.Options{Handlers: map[string]reactions.Handler{"notify": h},
		Lease: 5 * time.Second, PollInterval: 10 * time.Millisecond, BaseBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
}

// Reactions are delivered after their commit, retried with backoff after
// failures, and never scheduled by a rejected commit.
func TestReactionsDeliveredWithRetries(t *testing.T) {
	var mu sync.Mutex
	calls := map[string]int{}
	f := newFixture(t, memory.New(), func(c *engine.Config) {
		c.Validators = reactingValidator(0)
		c.Reactions = fastReactions(func(ctx context.Context, r reactions.Stored) error {
			mu.Lock()
			defer mu.Unlock()
			calls[string(r.Payload)]++
			if r.Attempts != calls[string(r.Payload)] {
				return fmt.Errorf("attempt %d seen as call %d", r.Attempts, calls[string(r.Payload)])
			}
			if string(r.Payload) == "flaky" && r.Attempts < 3 {
				return errors.New("smtp unavailable")
			}
			return nil
		})
	})
	a := f.client("alice", "ca")
	a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "x"), nil))
	a.push("c2", upsert("tasks", "flaky", f.row("flaky", "P", "x"), nil))
	if pr := a.push("c3", upsert("tasks", "t3", f.row("t3", "P", "reject"), nil)); pr.Status != ssp2.CommitRejected {
		t.Fatalf("c3 = %+v", pr)
	}
	ctx := context.Background()
	eventually(t, "every reaction delivered", func() bool {
		s, err := f.eng.Reactions().Stats(ctx)
		return err == nil && s.Delivered == 2 && s.Pending == 0
	})
	s, _ := f.eng.Reactions().Stats(ctx)
	if s.Retried != 2 || s.DeadLettered != 0 || s.Dead != 0 {
		t.Fatalf("stats = %+v, want 2 retried", s)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls["t1"] != 1 || calls["flaky"] != 3 || len(calls) != 2 {
		t.Fatalf("handler calls = %v, want t1:1 flaky:3 and nothing of the rejected commit", calls)
	}
}

// After MaxAttempts failed attempts a reaction is dead-lettered: kept,
// listed with its last error, never attempted again.
func TestReactionsDeadLetterAfterMaxAttempts(t *testing.T) {
	var calls atomic.Int32
	f := newFixture(t, memory.New(), func(c *engine.Config) {
		c.Validators = reactingValidator(3)
		c.Reactions = fastReactions(func(ctx context.Context, r reactions.Stored) error {
			calls.Add(1)
			if r.Attempts == 2 {
				panic("handler bug")
			}
			return errors.New("mailbox full")
		})
	})
	a := f.client("alice", "ca")
	a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "x"), nil))
	ctx := context.Background()
	eventually(t, "the reaction dead-lettered", func() bool {
		s, err := f.eng.Reactions().Stats(ctx)
		return err == nil && s.Dead == 1
	})
	dead := storage.ReactionDead
	rs, err := f.eng.Reactions().List(ctx, storage.ReactionFilter{State: &dead})
	if err != nil || len(rs) != 1 {
		t.Fatalf("dead letters = %+v, %v", rs, err)
	}
	if r := rs[0]; r.Attempts != 3 || r.MaxAttempts != 3 || r.LastError != "mailbox full" || string(r.Payload) != "t1" || r.CommitSeq != 1 || r.Partition != "p1" {
		t.Fatalf("dead letter = %+v", r)
	}
	// The worker keeps polling; the dead letter is not attempted again.
	a.push("c2", upsert("tasks", "t2", f.row("t2", "P", "x"), nil)) // wakes the worker
	eventually(t, "the second reaction dead-lettered too", func() bool {
		s, _ := f.eng.Reactions().Stats(ctx)
		return s.Dead == 2
	})
	if got := calls.Load(); got != 6 {
		t.Fatalf("handler ran %d times, want 3 per reaction", got)
	}
	s, _ := f.eng.Reactions().Stats(ctx)
	if s.DeadLettered != 2 || s.Retried != 4 || s.Delivered != 0 || s.Pending != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

// Scheduling refuses unknown names, oversize payloads and a 101st
// reaction; a hook that returns that error rejects its commit with
// sync.constraint_violation and nothing is stored.
func TestReactRefusals(t *testing.T) {
	var errs []error
	f := newFixture(t, memory.New(), func(c *engine.Config) {
		c.CommitValidator = func(ctx context.Context, v *engine.CommitView) error {
			errs = append(errs,
				v.React(engine.Reaction{Name: "unknown"}),
				v.React(engine.Reaction{Name: "notify", Payload: make([]byte, storage.MaxReactionPayloadBytes+1)}),
				v.React(engine.Reaction{Name: "notify", MaxAttempts: 101}))
			for i := range storage.MaxReactionsPerCommit {
				if err := v.React(engine.Reaction{Name: "notify", Payload: []byte(fmt.Sprint(i))}); err != nil {
					return fmt.Errorf("reaction %d refused: %w", i, err)
				}
			}
			return v.React(engine.Reaction{Name: "notify"})
		}
		c.Reactions = fastReactions(func(context.Context, reactions.Stored) error { return nil })
	})
	a := f.client("alice", "ca")
	pr := a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "x"), nil))
	if pr.Status != ssp2.CommitRejected || pr.Results[0].Code != "sync.constraint_violation" {
		t.Fatalf("c1 = %+v", pr)
	}
	for i, err := range errs {
		if err == nil {
			t.Fatalf("refusal %d was accepted", i)
		}
	}
	if rs, err := f.eng.Reactions().List(context.Background(), storage.ReactionFilter{}); err != nil || len(rs) != 0 {
		t.Fatalf("stored reactions after the rejected commit: %d, %v", len(rs), err)
	}
}

// Two engines on one PostgreSQL database share the queue: every reaction
// is delivered, the work is spread over both, and no reaction ever runs in
// both (or twice in one) at the same time.
func TestReactionsTwoPostgresEnginesNeverOverlap(t *testing.T) {
	schemaName := pgtest.NewSchema(t)
	var mu sync.Mutex
	running := map[int64]int{}
	delivered := map[int64]bool{}
	byEngine := map[string]int{}
	overlaps := 0
	handler := func(eng string) reactions.Handler {
		return func(ctx context.Context, r reactions.Stored) error {
			mu.Lock()
			running[r.ID]++
			if running[r.ID] > 1 {
				overlaps++
			}
			mu.Unlock()
			// Simulated work, so claims of both engines overlap in time.
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
			}
			mu.Lock()
			defer mu.Unlock()
			running[r.ID]--
			if r.Attempts == 1 && r.ID%3 == 0 {
				return errors.New("first attempt fails")
			}
			delivered[r.ID] = true
			byEngine[eng]++
			return nil
		}
	}
	mk := func(name string) *fixture {
		return newFixture(t, pgtest.OpenSchema(t, schemaName, postgres.Options{MaxConns: 4}), func(c *engine.Config) {
			c.Validators = reactingValidator(0)
			rc := fastReactions(handler(name))
			rc.Concurrency = 3
			c.Reactions = rc
		})
	}
	fa, fb := mk("a"), mk("b")
	a := fa.client("alice", "ca")
	const n = 60
	for i := range n {
		id := fmt.Sprint("t", i)
		a.push(id, upsert("tasks", id, fa.row(id, "P", "x"), nil))
	}
	eventually(t, "every reaction delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(delivered) == n
	})
	ctx := context.Background()
	eventually(t, "the queue drained", func() bool {
		s, err := fb.eng.Reactions().Stats(ctx)
		return err == nil && s.Pending == 0 && s.Dead == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if overlaps != 0 {
		t.Fatalf("%d deliveries overlapped another delivery of the same reaction", overlaps)
	}
	if byEngine["a"] == 0 || byEngine["b"] == 0 {
		t.Fatalf("work not shared: %v", byEngine)
	}
	sa, _ := fa.eng.Reactions().Stats(ctx)
	sb, _ := fb.eng.Reactions().Stats(ctx)
	if sa.Delivered+sb.Delivered != n || sa.Retried+sb.Retried != n/3 {
		t.Fatalf("stats a=%+v b=%+v, want %d delivered and %d retried in all", sa, sb, n, n/3)
	}
}
