package engine_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/sqlite"
)

// countingStore counts the client write-backs and gate reads made outside
// push transactions, and can rewrite the gate a push transaction reports
// after its commit and the gate ReadServeGate reads.
type countingStore struct {
	*sqlite.Store
	putClients, gateReads atomic.Int64
	// after, when set, rewrites CommittedGate's answer; onBegin runs
	// (on the partition actor) when a push transaction begins.
	after   func(storage.ServeGate) storage.ServeGate
	onBegin func()
	// gate, when set, rewrites ReadServeGate's answer.
	gate func(storage.ServeGate) storage.ServeGate
}

// Backend gives the engine the store with the counting Log, Clients and
// Checkpoints roles.
func (c *countingStore) Backend() storage.Backend {
	b := c.Store.Backend()
	b.Log, b.Clients, b.Checkpoints = c, c, c
	return b
}

func (c *countingStore) PutClient(ctx context.Context, p string, recs ...storage.ClientRecord) error {
	c.putClients.Add(1)
	return c.Store.PutClient(ctx, p, recs...)
}

func (c *countingStore) ReadServeGate(ctx context.Context, p string, running int32) (storage.ServeGate, error) {
	c.gateReads.Add(1)
	g, err := c.Store.ReadServeGate(ctx, p, running)
	if err == nil && c.gate != nil {
		g = c.gate(g)
	}
	return g, err
}

func (c *countingStore) BeginPush(ctx context.Context, p string) (storage.PushTx, error) {
	if c.onBegin != nil {
		c.onBegin()
	}
	tx, err := c.Store.BeginPush(ctx, p)
	if err != nil || c.after == nil {
		return tx, err
	}
	return &rewrittenGateTx{PushTx: tx, after: c.after}, nil
}

type rewrittenGateTx struct {
	storage.PushTx
	after func(storage.ServeGate) storage.ServeGate
}

func (t *rewrittenGateTx) CommittedGate() (storage.ServeGate, bool) {
	g, ok := t.PushTx.CommittedGate()
	return t.after(g), ok
}

// A push that finds the partition's client records due for write-back
// writes them inside its own transaction (no PutClient of their own), and
// they are durable with it.
func TestPushWritesBackClientRecords(t *testing.T) {
	cs := &countingStore{Store: openShared(t, filepath.Join(t.TempDir(), "db.sqlite"))}
	clock := &manualClock{now: time.Unix(1_000_000, 0)}
	f := newFixture(t, cs, func(c *engine.Config) {
		c.Now = clock.Now
		c.ClientFlushInterval = time.Hour // the tick never flushes during the test
		c.IdleTimeout = 0
	})
	a := f.client("alice", "ca")
	a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "x"), nil))
	if _, err := a.sync(&ssp2.PullHeader{Accept: 1}, sub("s", 0, "P")); err != nil {
		t.Fatal(err)
	}
	if rec, err := cs.GetClient(context.Background(), "p1", "ca"); err != nil || (rec != nil && rec.Cursor == 1) {
		t.Fatalf("record written back before it was due: %+v, %v", rec, err)
	}
	// The clock moves on the actor, as the push begins: the actor is done
	// with the pull (and its own flush check) by then.
	cs.onBegin = func() { clock.advance(2 * time.Hour) }
	a.push("c2", upsert("tasks", "t2", f.row("t2", "P", "y"), nil))
	rec, err := cs.GetClient(context.Background(), "p1", "ca")
	if err != nil || rec == nil || rec.Cursor != 1 || rec.ActorID != "alice" {
		t.Fatalf("record after the push that found it due: %+v, %v (want cursor 1, actor alice)", rec, err)
	}
	if n := cs.putClients.Load(); n != 0 {
		t.Fatalf("%d write-back transactions of their own, want 0 (written in the push)", n)
	}
}

// A reply of pushes alone is verified against the gate the store read
// after the group's commit (no read of its own), and refused when that
// read found the token changed.
func TestPushOnlyReplyVerifiedAfterCommit(t *testing.T) {
	cs := &countingStore{Store: openShared(t, filepath.Join(t.TempDir(), "db.sqlite"))}
	f := newFixture(t, cs)
	a := f.client("alice", "ca")
	reads := cs.gateReads.Load()
	if pr := a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "x"), nil)); pr.Status != ssp2.CommitApplied {
		t.Fatalf("push: %+v", pr)
	}
	if n := cs.gateReads.Load() - reads; n != 0 {
		t.Fatalf("%d gate reads outside the push transaction for a push-only reply, want 0", n)
	}
	cs.after = func(g storage.ServeGate) storage.ServeGate {
		g.LogEpoch = "rotated"
		return g
	}
	_, err := a.sync(&ssp2.PushCommit{ClientCommitID: "c2", Operations: []ssp2.Operation{upsert("tasks", "t2", f.row("t2", "P", "y"), nil)}})
	wantNotReady(t, err, `{"logEpochChanged":true}`)
	cs.after = nil
	// The commit was durable; the retry replays it.
	if pr := a.push("c2", upsert("tasks", "t2", f.row("t2", "P", "y"), nil)); pr.Status != ssp2.CommitCached {
		t.Fatalf("retried push: %+v", pr)
	}
}
