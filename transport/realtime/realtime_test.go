package realtime_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/realtime"
)

// The hello carries the stored cursor, the partition's newest seq and
// whether the client must sync first, stamped with the engine's clock.
func TestHello(t *testing.T) {
	clock := time.UnixMilli(1_782_993_600_000)
	f := newFixture(t, fixtureOpts{now: func() time.Time { return clock }})
	ctx := ctxT(t)
	w := f.httpClient("writer", "w1")
	for i := range 3 {
		push(t, ctx, w, "t"+string(rune('a'+i)), "groceries", "milk")
	}

	// Never pulled: no record beyond the binding, cursor -1, must sync.
	c := f.mustDial(ctx, "ada", "fresh")
	h := c.Hello()
	if h.ProtocolVersion != 1 || h.ActorID != "ada" || h.ClientID != "fresh" || h.Cursor != -1 || h.LatestCursor != 3 ||
		!h.RequiresSync || h.Timestamp != clock.UnixMilli() {
		t.Fatalf("hello of a fresh client: %+v", h)
	}
	if _, err := uuid.Parse(h.SessionID); err != nil {
		t.Fatalf("sessionId %q is not a UUID: %v", h.SessionID, err)
	}

	// Pulled to the end: its cursor, nothing to sync.
	r := f.replica("ada", "synced", "groceries")
	if err := r.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	f.eng.Close() // writes the buffered client records (the hub reads them through the actor anyway)
	f2 := f.reopen(t)
	c2 := f2.mustDial(ctx, "ada", "synced")
	h2 := c2.Hello()
	if h2.Cursor != 3 || h2.LatestCursor != 3 || h2.RequiresSync || h2.SessionID == h.SessionID {
		t.Fatalf("hello of a synced client: %+v", h2)
	}
	// Behind: a newer commit makes it require sync.
	push(t, ctx, f2.httpClient("writer", "w1b"), "td", "groceries", "eggs")
	c3 := f2.mustDial(ctx, "ada", "synced")
	if h3 := c3.Hello(); h3.Cursor != 3 || h3.LatestCursor != 4 || !h3.RequiresSync {
		t.Fatalf("hello of a client behind: %+v", h3)
	}
}

// reopen starts a new engine and hub on the same store file.
func (f *fixture) reopen(t *testing.T) *fixture {
	f.srv.Close()
	f.hub.Close()
	return newFixture(t, fixtureOpts{store: f.store})
}

// A push by A reaches B as a delta: the epoch header, B's section with the
// commit (seq, actor, row) and nextCursor at the commit; a client on
// another list gets nothing; the ack is stored as B's cursor.
func TestDeltaAndAck(t *testing.T) {
	f := newFixture(t, fixtureOpts{flush: 10 * time.Millisecond})
	ctx := ctxT(t)
	a := f.replica("ada", "a", "groceries")
	b := f.replica("bob", "b", "groceries")
	c := f.replica("cy", "c", "hardware")
	for _, r := range []interface{ CatchUp(context.Context) error }{a, b, c} {
		if err := r.CatchUp(ctx); err != nil {
			t.Fatal(err)
		}
	}
	bs := f.mustDial(ctx, "bob", "b")
	cs := f.mustDial(ctx, "cy", "c")
	if bs.Hello().RequiresSync || cs.Hello().RequiresSync {
		t.Fatalf("synced clients told to sync: %+v %+v", bs.Hello(), cs.Hello())
	}
	f.waitLive(t, "b")
	f.waitLive(t, "c")

	seq := push(t, ctx, a.Client, "t1", "groceries", "milk")
	d := nextDelta(t, ctx, bs)
	hdr := d.Message.Frames[0].(*ssp2.RespHeader)
	if hdr.LogEpoch != a.Client.Epoch || hdr.ResetRequired || d.Message.WireVersion != ssp2.WireV3 {
		t.Fatalf("delta header %+v (wire %d), want epoch %s", hdr, d.Message.WireVersion, a.Client.Epoch)
	}
	st := d.Message.Frames[1].(*ssp2.SubStart)
	if st.ID != "sub-groceries" || st.Status != ssp2.SubActive || st.Bootstrap || st.EffectiveScopes["list_id"][0] != "groceries" {
		t.Fatalf("delta section %+v", st)
	}
	cm := commits(d.Message)
	if len(cm) != 1 || cm[0].CommitSeq != seq || cm[0].ActorID != "ada" || len(cm[0].Changes) != 1 ||
		cm[0].Changes[0].RowID != "t1" || !bytes.Equal(cm[0].Changes[0].Row, fullTodo("t1", "groceries", "milk")) {
		t.Fatalf("delta commits %+v", cm)
	}
	if d.Cursor() != seq {
		t.Fatalf("delta nextCursor %d, want %d", d.Cursor(), seq)
	}
	if err := b.ApplyDelta(d.Message); err != nil {
		t.Fatal(err)
	}
	if got := b.Rows["todos"]["t1"]; got.Version != 1 || got.Values[2] != "milk" {
		t.Fatalf("B's row after the delta: %+v", got)
	}
	if err := bs.Ack(ctx, seq); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B's stored cursor", 5*time.Second, func() bool {
		rec, err := f.store.Backend().Clients.GetClient(ctx, auth.DefaultPartition, "b")
		return err == nil && rec != nil && rec.Cursor == seq
	})

	// C heard nothing of groceries: its first event is its own list's commit.
	seq2 := push(t, ctx, a.Client, "h1", "hardware", "nails")
	d2 := nextDelta(t, ctx, cs)
	if cm := commits(d2.Message); len(cm) != 1 || cm[0].CommitSeq != seq2 || cm[0].Changes[0].RowID != "h1" {
		t.Fatalf("C's first delta: %+v", cm)
	}
	// B's deltas stay contiguous: the hardware commit is not B's, the next
	// groceries commit is.
	seq3 := push(t, ctx, a.Client, "t2", "groceries", "bread")
	d3 := nextDelta(t, ctx, bs)
	if cm := commits(d3.Message); len(cm) != 1 || cm[0].CommitSeq != seq3 || d3.Cursor() != seq3 {
		t.Fatalf("B's second delta: %+v up to %d", cm, d3.Cursor())
	}
	// A reconnect starts from the acked cursor.
	bs.CloseNow()
	bs2 := f.mustDial(ctx, "bob", "b")
	if h := bs2.Hello(); h.Cursor != seq || h.LatestCursor != seq3 || !h.RequiresSync {
		t.Fatalf("hello after reconnect: %+v", h)
	}
}

// A client that reads but never acks gets MaxUnackedDeltas deltas, then
// catch-up wake-ups; after it pulls and acks, deltas flow again. A socket
// that does not read at all is closed and its send buffer never exceeds
// its bound.
func TestSlowReader(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	f := newFixture(t, fixtureOpts{hub: realtime.Options{MaxUnackedDeltas: 3, MaxQueuedMessages: 4,
		HeartbeatInterval: 50 * time.Millisecond, PingTimeout: 200 * time.Millisecond, WriteTimeout: time.Second, Logger: zap.New(core)}})
	ctx := ctxT(t)
	w := f.httpClient("ada", "w")
	b := f.replica("bob", "b", "groceries")
	if err := b.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	bs := f.mustDial(ctx, "bob", "b")
	f.waitLive(t, "b") // (live from the hello: its cursor is current)
	// Each of the first three commits is received as its own delta before
	// the next is made (commits made while a delta is being built may share
	// it, which would leave no commit for the wake-up below).
	var seqs []int64
	for i := range 3 {
		seqs = append(seqs, push(t, ctx, w, "t"+string(rune('a'+i)), "groceries", "x"))
		d := nextDelta(t, ctx, bs)
		if d.Cursor() != seqs[i] {
			t.Fatalf("delta %d up to %d, want %d", i, d.Cursor(), seqs[i])
		}
		if err := b.ApplyDelta(d.Message); err != nil {
			t.Fatal(err)
		}
	}
	for i := 3; i < 6; i++ {
		seqs = append(seqs, push(t, ctx, w, "t"+string(rune('a'+i)), "groceries", "x"))
	}
	wk := nextWake(t, ctx, bs)
	if wk.Reason != ssp2.WakeCatchupRequired || wk.Cursor < seqs[3] {
		t.Fatalf("after 3 unacked deltas: %+v", wk)
	}
	// Pull and ack: live again.
	if err := b.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if len(b.Rows["todos"]) != 6 {
		t.Fatalf("B holds %d rows after catching up, want 6", len(b.Rows["todos"]))
	}
	if err := bs.Ack(ctx, b.Cursor()); err != nil {
		t.Fatal(err)
	}
	// Wake-ups for commits it was told about may still be queued; the
	// first delta after the ack is the next commit.
	f.waitLive(t, "b")
	s7 := push(t, ctx, w, "tg", "groceries", "x")
	for {
		ev := next(t, ctx, bs)
		if d, ok := ev.(*realtime.Delta); ok {
			if d.Cursor() != s7 || commits(d.Message)[0].CommitSeq != s7 {
				t.Fatalf("delta after catching up: up to %d, want %d", d.Cursor(), s7)
			}
			break
		}
		if wk, ok := ev.(*ssp2.Wake); !ok || wk.Cursor > seqs[5] {
			t.Fatalf("before the next delta: %s", describe(ev))
		}
	}

	// A socket that never reads.
	q := f.replica("cy", "c", "groceries")
	if err := q.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	conn, _, err := websocket.Dial(ctx, f.srv.URL+"/realtime?clientId=c", &websocket.DialOptions{HTTPHeader: f.header("cy")})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	before := f.hub.Stats()
	maxQueued := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			if f.hub.Stats().Closed["ping"]+f.hub.Stats().Closed["slow"] > before.Closed["ping"]+before.Closed["slow"] {
				return
			}
			_, err := w.Push(ctx, &ssp2.PushCommit{ClientCommitID: "big-" + uuid.NewString(),
				Operations: []ssp2.Operation{{Table: "todos", RowID: "big", Op: ssp2.OpUpsert, Payload: todo("big", "groceries", string(bytes.Repeat([]byte{'x'}, 20_000+i)))}}})
			if err != nil {
				t.Error(err)
				return
			}
		}
	}()
	waitFor(t, "the non-reading socket to be closed", 20*time.Second, func() bool {
		for _, s := range f.hub.Sessions(auth.DefaultPartition) {
			if s.ClientID == "c" {
				maxQueued = max(maxQueued, s.Queued)
			}
		}
		st := f.hub.Stats()
		return st.Closed["ping"]+st.Closed["slow"] > before.Closed["ping"]+before.Closed["slow"]
	})
	<-done
	if maxQueued > 4 {
		t.Fatalf("the non-reading socket's send buffer held %d messages; the bound is 4", maxQueued)
	}
	if e := closedLog(logs, "c"); len(e) != 1 || e[0].ContextMap()["reason"] == nil {
		t.Fatalf("the non-reading socket's close is logged %d times (want once, at info, with a reason): %+v", len(e), e)
	}
	waitFor(t, "the closed socket to be unregistered", 15*time.Second, func() bool {
		for _, s := range f.hub.Sessions(auth.DefaultPartition) {
			if s.ClientID == "c" {
				return false
			}
		}
		return true
	})
}

// Rotating the partition's log epoch turns the next delta into a
// reset-required wake-up.
func TestEpochRotationWakesReset(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := ctxT(t)
	b := f.replica("bob", "b", "groceries")
	if err := b.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	bs := f.mustDial(ctx, "bob", "b")
	f.waitLive(t, "b")
	if _, err := f.store.Backend().Log.RotateLogEpoch(ctx, auth.DefaultPartition, time.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	w := f.httpClient("ada", "w") // acquires the new epoch
	seq := push(t, ctx, w, "t1", "groceries", "milk")
	wk := nextWake(t, ctx, bs)
	if wk.Reason != ssp2.WakeResetRequired || wk.Cursor != seq {
		t.Fatalf("after an epoch rotation: %+v, want reset-required at %d", wk, seq)
	}
	// Follow resets, re-bootstraps and is live again.
	if err := b.ResetEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if err := bs.Ack(ctx, b.Cursor()); err != nil {
		t.Fatal(err)
	}
	f.waitLive(t, "b")
	seq2 := push(t, ctx, w, "t2", "groceries", "eggs")
	if d := nextDelta(t, ctx, bs); d.Cursor() != seq2 || d.Message.Frames[0].(*ssp2.RespHeader).LogEpoch != w.Epoch {
		t.Fatalf("delta after the reset: up to %d with %+v", d.Cursor(), d.Message.Frames[0])
	}
}

// A delta over MaxDeltaBytes becomes a delta-too-large wake-up.
func TestDeltaTooLarge(t *testing.T) {
	f := newFixture(t, fixtureOpts{hub: realtime.Options{MaxDeltaBytes: 400}})
	ctx := ctxT(t)
	b := f.replica("bob", "b", "groceries")
	if err := b.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	bs := f.mustDial(ctx, "bob", "b")
	f.waitLive(t, "b")
	w := f.httpClient("ada", "w")
	seq := push(t, ctx, w, "t1", "groceries", string(bytes.Repeat([]byte{'x'}, 1000)))
	if wk := nextWake(t, ctx, bs); wk.Reason != ssp2.WakeDeltaTooLarge || wk.Cursor != seq {
		t.Fatalf("big delta: %+v", wk)
	}
	// Small ones flow again once it caught up and acked.
	if err := b.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if err := bs.Ack(ctx, b.Cursor()); err != nil {
		t.Fatal(err)
	}
	f.waitLive(t, "b")
	seq2 := push(t, ctx, w, "t2", "groceries", "s")
	if d := nextDelta(t, ctx, bs); d.Cursor() != seq2 {
		t.Fatalf("small delta up to %d, want %d", d.Cursor(), seq2)
	}
}

// Upgrades are refused before the socket opens: no credentials (401), a
// clientId bound to another actor (400 sync.invalid_client_id), the
// connection limit (429 sync.websocket_connection_limit).
func TestUpgradeRefusals(t *testing.T) {
	f := newFixture(t, fixtureOpts{hub: realtime.Options{MaxConnections: 2}})
	ctx := ctxT(t)
	if _, err := realtime.Dial(ctx, f.srv.URL+"/realtime", "x", realtime.DialOptions{}); syncerr.CodeOf(err) != syncerr.AuthRequired {
		t.Fatalf("no credentials: %v", err)
	}
	r := f.replica("ada", "owned", "groceries")
	if err := r.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.dial(ctx, "eve", "owned"); syncerr.CodeOf(err) != syncerr.InvalidClientID {
		t.Fatalf("another actor's clientId: %v", err)
	}
	if _, err := f.dial(ctx, "ada", ""); syncerr.CodeOf(err) != syncerr.InvalidRequest {
		t.Fatalf("empty clientId: %v", err)
	}
	f.mustDial(ctx, "ada", "one")
	f.mustDial(ctx, "ada", "two")
	_, err := f.dial(ctx, "ada", "three")
	if syncerr.CodeOf(err) != syncerr.WebsocketConnLimit {
		t.Fatalf("over the limit: %v", err)
	}
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/realtime?clientId=x", nil)
	req.Header.Set("x-actor", "ada")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUpgradeRequired {
		t.Fatalf("GET without upgrade: %d", res.StatusCode)
	}
}
