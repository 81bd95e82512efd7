package realtime_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/bodybudget"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
	"github.com/synclane/synclane/transport/realtime"
)

// rawDial opens a socket without the client library and reads its hello.
func (f *fixture) rawDial(ctx context.Context, actor, clientID string) *websocket.Conn {
	f.t.Helper()
	conn, _, err := websocket.Dial(ctx, f.srv.URL+"/realtime?clientId="+clientID, &websocket.DialOptions{HTTPHeader: f.header(actor)})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { conn.CloseNow() })
	conn.SetReadLimit(64 << 20)
	if _, _, err := conn.Read(ctx); err != nil { // hello
		f.t.Fatal(err)
	}
	return conn
}

// closeOf reads conn until the server closes it and returns the close.
func closeOf(t *testing.T, ctx context.Context, conn *websocket.Conn) websocket.CloseError {
	t.Helper()
	for {
		_, _, err := conn.Read(ctx)
		if err == nil {
			continue
		}
		var ce websocket.CloseError
		if !errors.As(err, &ce) {
			t.Fatalf("socket ended with %v, want a close frame", err)
		}
		return ce
	}
}

// closedLog returns the info entries logged for clientID's socket closes.
func closedLog(logs *observer.ObservedLogs, clientID string) []observer.LoggedEntry {
	var out []observer.LoggedEntry
	for _, e := range logs.FilterField(zap.String("client_id", clientID)).All() {
		if e.Level == zapcore.InfoLevel && bytes.HasPrefix([]byte(e.Message), []byte("realtime socket closed")) {
			out = append(out, e)
		}
	}
	return out
}

// Bytes past a request's END in the message that carries it close the
// socket (1008 "pipelining", logged at info with the client id); the
// pipelined request is not run (its push is not applied), and the server
// keeps serving other sockets and the same client.
func TestPipelinedRoundClosesTheSocket(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	f := newFixture(t, fixtureOpts{hub: realtime.Options{Logger: zap.New(core)}})
	ctx := ctxT(t)
	w := f.httpClient("ada", "w")
	if err := w.Handshake(ctx); err != nil {
		t.Fatal(err)
	}
	pushReq := encodeReq(t, "w", w.Epoch, &ssp2.PushCommit{ClientCommitID: "cc-piped",
		Operations: []ssp2.Operation{{Table: "todos", RowID: "piped", Op: ssp2.OpUpsert, Payload: todo("piped", "groceries", "milk")}}})
	pullReq := encodeReq(t, "w", w.Epoch, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows})
	for _, c := range []struct {
		name string
		msg  []byte
	}{
		{"a whole second request", append(append([]byte{realtime.TagRound}, pushReq...), pullReq...)},
		{"one byte", append(append([]byte{realtime.TagRound}, pushReq...), 0)},
	} {
		conn := f.rawDial(ctx, "ada", "w")
		if err := conn.Write(ctx, websocket.MessageBinary, c.msg); err != nil {
			t.Fatal(err)
		}
		if ce := closeOf(t, ctx, conn); ce.Code != websocket.StatusPolicyViolation || ce.Reason != "pipelining" {
			t.Fatalf("%s past END: closed with %v, want 1008 pipelining", c.name, ce)
		}
	}
	entries := closedLog(logs, "w")
	if len(entries) != 2 || entries[0].ContextMap()["reason"] != "pipelining" || entries[0].ContextMap()["partition"] != auth.DefaultPartition {
		t.Fatalf("close logs: %+v", entries)
	}

	// The pipelined push was not applied: sent again, it applies now.
	s := f.mustDial(ctx, "ada", "w")
	got, err := s.Round(ctx, pushReq)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ssp2.DecodeResponse(got)
	if err != nil {
		t.Fatal(err)
	}
	if prs := httpsync.PushResults(m); len(prs) != 1 || prs[0].Status != ssp2.CommitApplied {
		t.Fatalf("the push after the pipelining close: %+v (want applied: the pipelined one never ran)", prs)
	}
	// Another client's socket works throughout.
	r := f.replica("bob", "b", "groceries")
	r.Client.Rounds = f.mustDial(ctx, "bob", "b")
	if err := r.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if len(r.Rows["todos"]) != 1 {
		t.Fatalf("another client's replica holds %d rows", len(r.Rows["todos"]))
	}
}

// A 20 MB push over a socket round, in the official client's shape, is
// applied with the default limits (the old 8 MiB default closed the
// socket, and the client looped on reconnects).
func TestLargeSocketRoundAcceptedWithDefaultLimits(t *testing.T) {
	budget := bodybudget.New(bodybudget.Options{})
	f := newFixture(t, fixtureOpts{hub: realtime.Options{BodyBudget: budget}})
	ctx := ctxT(t)
	c := f.httpClient("ada", "w")
	c.Rounds = f.mustDial(ctx, "ada", "w")
	p := httpsynctest.LargePush{Commits: 1, OpsPerCommit: 100, TitleBytes: 200_000}
	prs, err := c.Push(ctx, p.Build("round", "groceries")...)
	if err != nil {
		t.Fatalf("a %s push over a socket round: %v", p, err)
	}
	if len(prs) != 1 || prs[0].Status != ssp2.CommitApplied {
		t.Fatalf("push results %+v", prs)
	}
	if st := budget.Stats(); st.InUse != 0 {
		t.Fatalf("after the round %d bytes are still charged", st.InUse)
	}
}

// A round the budget has no room for within its wait is answered in-band
// with sync.rate_limited (retryable, retryLater); the socket stays open
// and the same push succeeds once the budget has room. A request over
// MaxRequestBytes still closes the socket (1009, logged).
func TestSocketRoundOverTheBodyBudget(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	waiting := make(chan struct{}, 4)
	budget := bodybudget.New(bodybudget.Options{Limit: 1 << 20, Wait: 20 * time.Millisecond, OnWait: func() { waiting <- struct{}{} }})
	f := newFixture(t, fixtureOpts{hub: realtime.Options{BodyBudget: budget, MaxRequestBytes: 4 << 20, Logger: zap.New(core)}})
	ctx := ctxT(t)
	c := f.httpClient("ada", "w")
	c.Rounds = f.mustDial(ctx, "ada", "w")
	p := httpsynctest.LargePush{Commits: 4, OpsPerCommit: 1, TitleBytes: 50_000}
	commits := p.Build("budget", "groceries")
	filler := budget.Charge()
	if err := filler.Grow(ctx, 1<<20); err != nil {
		t.Fatal(err)
	}
	_, err := c.Push(ctx, commits...)
	var se *syncerr.Error
	if !errors.As(err, &se) || se.Code != syncerr.RateLimited || !se.Spec().Retryable || !bytes.Contains(se.Details, []byte(`"retryAfterMs":1000`)) {
		t.Fatalf("a round over the budget: %v", err)
	}
	select {
	case <-waiting:
	default:
		t.Fatal("the refused round never waited")
	}
	if st := budget.Stats(); st.InUse != 1<<20 {
		t.Fatalf("after the refusal %d bytes are charged, want the filler's only", st.InUse)
	}
	filler.Release()
	prs, err := c.Push(ctx, commits...)
	if err != nil || len(prs) != p.Commits || prs[0].Status != ssp2.CommitApplied {
		t.Fatalf("the same push once the budget has room: %+v %v", prs, err)
	}

	conn := f.rawDial(ctx, "ada", "big")
	big := encodeReq(t, "big", c.Epoch, httpsynctest.LargePush{Commits: 1, OpsPerCommit: 50, TitleBytes: 100_000}.Build("big", "groceries")[0])
	for off := 0; off < len(big); off += 1 << 20 {
		if err := conn.Write(ctx, websocket.MessageBinary, append([]byte{realtime.TagRound}, big[off:min(off+1<<20, len(big))]...)); err != nil {
			break // closed before the whole request went out
		}
	}
	if ce := closeOf(t, ctx, conn); ce.Code != websocket.StatusMessageTooBig {
		t.Fatalf("a round over MaxRequestBytes: closed with %v", ce)
	}
	if e := closedLog(logs, "big"); len(e) != 1 || e[0].ContextMap()["max_request_bytes"] != int64(4<<20) {
		t.Fatalf("close log of the oversize round: %+v", e)
	}
	f.hub.Close() // every reader done: nothing may stay charged
	if st := budget.Stats(); st.InUse != 0 {
		t.Fatalf("after the hub closed %d bytes are charged", st.InUse)
	}
}

// A socket that goes away in the middle of a round (here while the round
// waits for the budget) gives back what its round held.
func TestRoundChargeReleasedWhenTheSocketGoes(t *testing.T) {
	// The charge is read on the waiting goroutine as its wait starts: read
	// after the wait (50 ms) it could already be given back.
	waiting := make(chan int64, 4)
	var budget *bodybudget.Budget
	budget = bodybudget.New(bodybudget.Options{Limit: 1 << 20, Wait: 50 * time.Millisecond, OnWait: func() { waiting <- budget.Stats().InUse }})
	f := newFixture(t, fixtureOpts{hub: realtime.Options{BodyBudget: budget}})
	ctx := ctxT(t)
	filler := budget.Charge()
	if err := filler.Grow(ctx, 1<<20); err != nil {
		t.Fatal(err)
	}
	conn := f.rawDial(ctx, "ada", "w")
	req := encodeReq(t, "w", "", httpsynctest.LargePush{Commits: 1, OpsPerCommit: 1, TitleBytes: 300_000}.Build("gone", "groceries")[0])
	if err := conn.Write(ctx, websocket.MessageBinary, append([]byte{realtime.TagRound}, req[:200_000]...)); err != nil {
		t.Fatal(err)
	}
	// the round holds its free allowance and waits for more
	if inUse := <-waiting; inUse != 1<<20+bodybudget.FreeBytes {
		t.Fatalf("while the round waits %d bytes are charged, want the filler's and the round's %d", inUse, bodybudget.FreeBytes)
	}
	conn.CloseNow()
	f.hub.Close() // waits for the socket's reader
	if st := budget.Stats(); st.InUse != 1<<20 {
		t.Fatalf("after the socket went %d bytes are charged, want the filler's only", st.InUse)
	}
}
