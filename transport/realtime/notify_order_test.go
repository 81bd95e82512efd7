package realtime_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/realtime"
)

// TestOutOfOrderCommitNotifications (SPEC §8.2): post-commit
// notifications can reach the hub out of commit order, or name a seq past
// what the socket has seen. The hub keeps the highest seq it was told
// (Hub.OnCommit raises it, a lower one changes nothing) and builds each
// delta from the socket's cursor out of the log, so a notification that
// skips seqs still gets a delta contiguous with the socket's cursor, a
// late lower one sends nothing twice, and commits outside the socket's
// scopes move it along without a wake-up. A notification the log cannot
// bridge (a seq past its newest commit) gets a catch-up wake-up, and the
// client's catch-up ack makes deltas flow again from its cursor.
//
// The commits are written by another engine on the same database whose
// notifications the test hands to the socket's hub itself, in the order
// it chooses.
func TestOutOfOrderCommitNotifications(t *testing.T) {
	path := filepath.Join(t.TempDir(), "synclane.db")
	open := func() *sqlite.Store {
		st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	writer := newFixture(t, fixtureOpts{store: open(), ownStore: true}) // the other process
	f := newFixture(t, fixtureOpts{store: open(), ownStore: true})      // the socket's
	ctx := ctxT(t)
	w := writer.httpClient("ada", "w")
	push(t, ctx, w, "g0", "groceries", "flour")
	b := f.replica("bob", "b", "groceries")
	if err := b.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	bs := f.mustDial(ctx, "bob", "b")
	f.waitLive(t, "b")
	from := b.Cursor()

	g1 := push(t, ctx, w, "g1", "groceries", "milk")
	h1 := push(t, ctx, w, "h1", "hardware", "nails") // outside the socket's scopes
	g2 := push(t, ctx, w, "g2", "groceries", "eggs")
	// The newest notification first, skipping two seqs; then the late ones.
	f.hub.OnCommit(auth.DefaultPartition, g2)
	d := nextDelta(t, ctx, bs)
	cm := commits(d.Message)
	if len(cm) != 2 || cm[0].CommitSeq != g1 || cm[1].CommitSeq != g2 || d.Cursor() != g2 {
		t.Fatalf("delta after a notification of %d (socket at %d): commits %+v up to %d; want %d and %d, contiguous", g2, from, cm, d.Cursor(), g1, g2)
	}
	if err := b.ApplyDelta(d.Message); err != nil {
		t.Fatal(err)
	}
	if err := bs.Ack(ctx, d.Cursor()); err != nil {
		t.Fatal(err)
	}
	f.hub.OnCommit(auth.DefaultPartition, g1)
	f.hub.OnCommit(auth.DefaultPartition, h1)
	// Nothing for the late notifications: the next event is the next
	// groceries commit's delta, from where the last one ended.
	g3 := push(t, ctx, w, "g3", "groceries", "tea")
	f.hub.OnCommit(auth.DefaultPartition, g3)
	d = nextDelta(t, ctx, bs)
	if cm := commits(d.Message); len(cm) != 1 || cm[0].CommitSeq != g3 {
		t.Fatalf("after late notifications: %+v, want only %d", cm, g3)
	}
	if err := b.ApplyDelta(d.Message); err != nil {
		t.Fatal(err)
	}
	if err := bs.Ack(ctx, d.Cursor()); err != nil {
		t.Fatal(err)
	}

	// A commit outside the scopes, notified alone, moves the socket along
	// without a message: the next in-scope commit is a delta, not a wake-up.
	h2 := push(t, ctx, w, "h2", "hardware", "glue")
	f.hub.OnCommit(auth.DefaultPartition, h2)
	g4 := push(t, ctx, w, "g4", "groceries", "jam")
	f.hub.OnCommit(auth.DefaultPartition, g4)
	d = nextDelta(t, ctx, bs)
	if cm := commits(d.Message); len(cm) != 1 || cm[0].CommitSeq != g4 || d.Cursor() != g4 {
		t.Fatalf("after a commit outside the scopes: %+v up to %d, want only %d", cm, d.Cursor(), g4)
	}
	if err := b.ApplyDelta(d.Message); err != nil {
		t.Fatal(err)
	}
	if err := bs.Ack(ctx, d.Cursor()); err != nil {
		t.Fatal(err)
	}
	f.waitLive(t, "b")

	// A notification past the log: the gap cannot be bridged, the socket is
	// told to catch up.
	f.hub.OnCommit(auth.DefaultPartition, g4+2)
	if wk := nextWake(t, ctx, bs); wk.Reason != ssp2.WakeCatchupRequired || wk.Cursor != g4+2 {
		t.Fatalf("after a notification past the log: %+v, want catchup-required at %d", wk, g4+2)
	}
	// The commits arrive; the client catches up by pulling and acks: the
	// ack raises what the socket holds and deltas flow from its cursor.
	g5 := push(t, ctx, w, "g5", "groceries", "salt")
	g6 := push(t, ctx, w, "g6", "groceries", "oil")
	if g6 != g4+2 {
		t.Fatalf("seqs %d, %d: the test expects the notified seq %d to be g6", g5, g6, g4+2)
	}
	f.hub.OnCommit(auth.DefaultPartition, g6)
	if err := b.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if b.Cursor() != g6 {
		t.Fatalf("the catch-up pull reached %d, want %d", b.Cursor(), g6)
	}
	if err := bs.Ack(ctx, b.Cursor()); err != nil {
		t.Fatal(err)
	}
	f.waitLive(t, "b")
	g7 := push(t, ctx, w, "g7", "groceries", "rice")
	f.hub.OnCommit(auth.DefaultPartition, g7)
	for {
		ev := next(t, ctx, bs)
		if d, ok := ev.(*realtime.Delta); ok {
			if cm := commits(d.Message); len(cm) != 1 || cm[0].CommitSeq != g7 {
				t.Fatalf("after the catch-up ack: %+v, want only %d", cm, g7)
			}
			break
		}
		if wk, ok := ev.(*ssp2.Wake); !ok || wk.Cursor > g6 {
			t.Fatalf("before the delta after the catch-up ack: %s", describe(ev)) // only wake-ups queued before the ack
		}
	}
}
