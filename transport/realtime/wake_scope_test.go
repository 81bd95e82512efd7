package realtime_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/realtime"
)

// deleteTodo deletes a todo through c and returns the commit seq.
func deleteTodo(t *testing.T, ctx context.Context, c *httpsync.Client, id string) int64 {
	t.Helper()
	prs, err := c.Push(ctx, &ssp2.PushCommit{ClientCommitID: "del-" + id + "-" + uuid.NewString(),
		Operations: []ssp2.Operation{{Table: "todos", RowID: id, Op: ssp2.OpDelete}}})
	if err != nil || len(prs) != 1 || prs[0].Status != ssp2.CommitApplied {
		t.Fatalf("delete %s: %+v %v", id, prs, err)
	}
	return *prs[0].CommitSeq
}

func catchupWakes(h *realtime.Hub) uint64 { return h.Stats().Wakes[ssp2.WakeCatchupRequired] }

// A socket that is not live is woken only by commits that touch its scope
// keys (SPEC §8.2): commits to another list wake neither a socket behind
// on groceries nor one that never pulled (no keys); an upsert, a delete on
// groceries do. The hub's wake-up count is exact: the groceries wake-up is
// seen after every earlier commit was weighed, so any other wake-up would
// have been counted.
func TestWakeOnlyForCommitsTouchingItsKeys(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := ctxT(t)
	w := f.httpClient("ada", "w")
	push(t, ctx, w, "g1", "groceries", "milk")
	b := f.replica("bob", "b", "groceries")
	if err := b.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	push(t, ctx, w, "g2", "groceries", "eggs") // b is behind: not live at connect
	bs := f.mustDial(ctx, "bob", "b")
	if !bs.Hello().RequiresSync {
		t.Fatalf("hello %+v: want requiresSync", bs.Hello())
	}
	fresh := f.mustDial(ctx, "cy", "never-pulled")
	if h := fresh.Hello(); !h.RequiresSync || h.Cursor != -1 {
		t.Fatalf("fresh hello %+v", h)
	}
	before := catchupWakes(f.hub)

	for i := range 5 {
		push(t, ctx, w, fmt.Sprintf("h%d", i), "hardware", "nails")
	}
	seq := push(t, ctx, w, "g3", "groceries", "bread")
	if wk := nextWake(t, ctx, bs); wk.Reason != ssp2.WakeCatchupRequired || wk.Cursor != seq {
		t.Fatalf("first event after 5 hardware commits and one groceries commit %d: %+v", seq, wk)
	}
	if got := catchupWakes(f.hub) - before; got != 1 {
		t.Fatalf("%d wake-ups sent for 5 commits to another list and 1 to groceries; want 1", got)
	}

	// A delete on groceries wakes it too (its keys are the deleted row's).
	push(t, ctx, w, "h9", "hardware", "screws")
	del := deleteTodo(t, ctx, w, "g1")
	if wk := nextWake(t, ctx, bs); wk.Cursor != del {
		t.Fatalf("after deleting a groceries row at %d: %+v", del, wk)
	}
	if got := catchupWakes(f.hub) - before; got != 2 {
		t.Fatalf("%d wake-ups after the delete; want 2", got)
	}

	// After its own pull (not live until it acks), the same holds.
	if err := b.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	push(t, ctx, w, "h10", "hardware", "bolts")
	seq = push(t, ctx, w, "g4", "groceries", "jam")
	if wk := nextWake(t, ctx, bs); wk.Cursor != seq {
		t.Fatalf("after the pull, a groceries commit at %d: %+v", seq, wk)
	}
	if got := catchupWakes(f.hub) - before; got != 3 {
		t.Fatalf("%d wake-ups after the pull; want 3", got)
	}
	for _, s := range f.hub.Sessions(auth.DefaultPartition) {
		if s.ClientID == "never-pulled" && (s.Queued != 0 || len(s.Keys) != 0) {
			t.Fatalf("the socket that never pulled: %+v", s)
		}
	}

	// Pulled and acked: live, and deltas carry only its list.
	if err := b.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if err := bs.Ack(ctx, b.Cursor()); err != nil {
		t.Fatal(err)
	}
	f.waitLive(t, "b")
	push(t, ctx, w, "h11", "hardware", "glue")
	seq = push(t, ctx, w, "g5", "groceries", "tea")
	for {
		ev := next(t, ctx, bs)
		if d, ok := ev.(*realtime.Delta); ok {
			if cm := commits(d.Message); len(cm) != 1 || cm[0].CommitSeq != seq {
				t.Fatalf("live delta: %+v, want only groceries commit %d", cm, seq)
			}
			break
		}
		if wk, ok := ev.(*ssp2.Wake); !ok || wk.Cursor >= seq {
			t.Fatalf("before the live delta: %s", describe(ev)) // only the wake-ups queued before the ack may come first
		}
	}
}

// On PostgreSQL (two engines on one schema, each also hearing its own
// commits on the commit feed): a process's own commits to another list
// wake none of its sockets, however the feed's report and its own race;
// the feed carries no scope keys, so another process's commit wakes every
// socket that is not live and has keys, whatever it touched
// (conservative, never a missed wake-up); a socket with no keys is still
// woken by none.
func TestWakeOnPostgresAcrossProcesses(t *testing.T) {
	name := pgtest.NewSchema(t)
	open := func() *postgres.Store {
		return pgtest.OpenSchema(t, name, postgres.Options{MaxConns: 4, NotifyChannel: name})
	}
	s1, s2 := open(), open()
	f1 := newFixture(t, fixtureOpts{store: s1, ownStore: true, feed: s1})
	f2 := newFixture(t, fixtureOpts{store: s2, ownStore: true, feed: s2})
	ctx := ctxT(t)
	w1 := f1.httpClient("ada", "w1")
	push(t, ctx, w1, "g1", "groceries", "milk")
	b := f2.replica("bob", "b", "groceries")
	if err := b.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	push(t, ctx, w1, "g2", "groceries", "eggs")
	bs := f2.mustDial(ctx, "bob", "b") // behind: not live
	f2.mustDial(ctx, "cy", "never-pulled")
	before := catchupWakes(f2.hub)
	w2 := f2.httpClient("ada", "w2")
	for i := range 50 {
		push(t, ctx, w2, fmt.Sprintf("h%d", i), "hardware", "nails")
	}
	seq := push(t, ctx, w2, "g3", "groceries", "bread")
	if wk := nextWake(t, ctx, bs); wk.Reason != ssp2.WakeCatchupRequired || wk.Cursor != seq {
		t.Fatalf("first event after 50 own hardware commits and one groceries commit %d: %+v", seq, wk)
	}
	if got := catchupWakes(f2.hub) - before; got != 1 {
		t.Fatalf("%d wake-ups for the process's own commits; want 1", got)
	}
	seq = push(t, ctx, w1, "h1", "hardware", "nails")
	if wk := nextWake(t, ctx, bs); wk.Reason != ssp2.WakeCatchupRequired || wk.Cursor != seq {
		t.Fatalf("another process's hardware commit %d: %+v", seq, wk)
	}
	if got := catchupWakes(f2.hub) - before; got != 2 {
		t.Fatalf("%d wake-ups in all; want 2 (the socket with no keys is not woken)", got)
	}
}
