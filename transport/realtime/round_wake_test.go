package realtime_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/realtime"
)

// rawRound is what a raw socket saw during one round: the answer's bytes,
// the number of answer chunks, and the wake-ups that arrived before the
// chunk holding END, each with the number of answer chunks before it.
type rawRound struct {
	answer []byte
	chunks int
	wakes  []rawWake
}

type rawWake struct {
	wake   *ssp2.Wake
	chunks int // answer chunks received before it
}

// roundOver sends req as one TagRound message and reads until the answer's
// END, keeping the wake-ups that arrive meanwhile.
func roundOver(t *testing.T, ctx context.Context, conn *websocket.Conn, req []byte) rawRound {
	t.Helper()
	if err := conn.Write(ctx, websocket.MessageBinary, append([]byte{realtime.TagRound}, req...)); err != nil {
		t.Fatal(err)
	}
	var r rawRound
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("reading the round's answer: %v", err)
		}
		if typ == websocket.MessageText {
			msg, err := ssp2.ParseServerControl(data)
			if err != nil {
				t.Fatalf("control message %q: %v", data, err)
			}
			if w, ok := msg.(*ssp2.Wake); ok {
				r.wakes = append(r.wakes, rawWake{wake: w, chunks: r.chunks})
			}
			continue
		}
		switch data[0] {
		case realtime.TagDelta:
			t.Fatalf("a delta during a round (SPEC §8.7 forbids it)")
		case realtime.TagRound:
			r.answer = append(r.answer, data[1:]...)
			r.chunks++
			if _, err := ssp2.DecodeResponse(r.answer); err == nil {
				return r
			}
		}
	}
}

// TestCommitDuringRoundWakes is the catalog scenario
// ws-round/commit-during-round-wakes-then-deltas-resume run 200 times: a
// socket round whose push commits on the socket's own key gets a
// catchup-required wake-up for that commit during the round's answer
// (after its first chunk, before END), never a delta; after the post-round
// ack, deltas resume.
func TestCommitDuringRoundWakes(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := ctxT(t)
	w := f.httpClient("ada", "w")
	if err := w.Handshake(ctx); err != nil {
		t.Fatal(err)
	}
	conn := f.rawDial(ctx, "bob", "b")
	sub := func(cursor int64) *ssp2.Subscription {
		return &ssp2.Subscription{ID: "s1", Table: "todos", Scopes: map[string][]string{"list_id": {"groceries"}}, Cursor: cursor}
	}
	// The first round registers the socket (§8.7).
	r := roundOver(t, ctx, conn, encodeReq(t, "b", w.Epoch, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows}, sub(-1)))
	cursor := nextCursor(t, r.answer)
	const rounds = 200
	missed, early := 0, 0
	for i := range rounds {
		id := fmt.Sprintf("own-%d", i)
		req := encodeReq(t, "b", w.Epoch, &ssp2.PushCommit{ClientCommitID: "cc-" + id,
			Operations: []ssp2.Operation{{Table: "todos", RowID: id, Op: ssp2.OpUpsert, Payload: todo(id, "groceries", "own")}}},
			&ssp2.PullHeader{Accept: ssp2.AcceptInlineRows}, sub(cursor))
		r := roundOver(t, ctx, conn, req)
		seq := appliedSeq(t, r.answer)
		woke := 0
		for _, wk := range r.wakes {
			if wk.wake.Reason == ssp2.WakeCatchupRequired && wk.wake.Cursor >= seq {
				woke++
				if wk.chunks == 0 {
					early++
				}
			}
		}
		switch {
		case woke == 0:
			missed++
		case woke > 1 || len(r.wakes) > 1:
			t.Fatalf("round %d: %d wake-ups, want one", i, len(r.wakes))
		}
		cursor = nextCursor(t, r.answer)
		if err := conn.Write(ctx, websocket.MessageText, fmt.Appendf(nil, `{"type":"ack","cursor":%d}`, cursor)); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d rounds: %d without a wake-up for their own commit before END, %d woken before the answer's first chunk", rounds, missed, early)
	if missed != 0 || early != 0 {
		t.Fatalf("%d of %d rounds got no wake-up before END; %d got it before the answer began", missed, rounds, early)
	}

	// The post-round ack covered the commit: deltas resume.
	f.waitLive(t, "b")
	seq := push(t, ctx, w, "resumed", "groceries", "after the rounds")
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if typ == websocket.MessageText {
			msg, _ := ssp2.ParseServerControl(data)
			if _, hb := msg.(*ssp2.Heartbeat); !hb {
				t.Fatalf("after the ack, %q before the delta", data)
			}
			continue
		}
		m, err := ssp2.DecodeResponse(data[1:])
		if err != nil || data[0] != realtime.TagDelta {
			t.Fatalf("after the ack: tag %d, %v", data[0], err)
		}
		if cm := commits(m); len(cm) != 1 || cm[0].CommitSeq != seq {
			t.Fatalf("resumed delta %+v, want commit %d", cm, seq)
		}
		break
	}
}

// nextCursor is the SUB_END nextCursor of a one-subscription answer.
func nextCursor(t *testing.T, answer []byte) int64 {
	t.Helper()
	m, err := ssp2.DecodeResponse(answer)
	if err != nil {
		t.Fatal(err)
	}
	for _, fr := range m.Frames {
		if e, ok := fr.(*ssp2.SubEnd); ok {
			return e.NextCursor
		}
	}
	t.Fatalf("no SUB_END in %+v", m.Frames)
	return 0
}

// appliedSeq is the commit seq of an answer's applied push.
func appliedSeq(t *testing.T, answer []byte) int64 {
	t.Helper()
	m, err := ssp2.DecodeResponse(answer)
	if err != nil {
		t.Fatal(err)
	}
	for _, fr := range m.Frames {
		if p, ok := fr.(*ssp2.PushResult); ok && p.Status == ssp2.CommitApplied {
			return *p.CommitSeq
		}
	}
	t.Fatalf("no applied PUSH_RESULT in %+v", m.Frames)
	return 0
}

// seedLarge pushes n todos on groceries with titles of size bytes each,
// 50 to a commit.
func seedLarge(t *testing.T, ctx context.Context, c *httpsync.Client, n, size int) {
	t.Helper()
	title := strings.Repeat("x", size)
	for i := 0; i < n; i += 50 {
		cm := &ssp2.PushCommit{ClientCommitID: fmt.Sprintf("seed-%d", i)}
		for j := i; j < min(n, i+50); j++ {
			id := fmt.Sprintf("big-%d", j)
			cm.Operations = append(cm.Operations, ssp2.Operation{Table: "todos", RowID: id, Op: ssp2.OpUpsert, Payload: todo(id, "groceries", title)})
		}
		prs, err := c.Push(ctx, cm)
		if err != nil || prs[0].Status != ssp2.CommitApplied {
			t.Fatalf("seed: %+v %v", prs, err)
		}
	}
}

// corkConn is a client connection whose writes can be held back and sent
// in one write (cork, uncork): two WebSocket messages then reach the
// server together.
type corkConn struct {
	net.Conn
	mu     sync.Mutex
	corked bool
	held   []byte
}

func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corked {
		c.held = append(c.held, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *corkConn) cork() {
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

func (c *corkConn) uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	_, err := c.Conn.Write(c.held)
	c.held = nil
	return err
}

// corkDial opens a socket whose writes can be corked and reads its
// hello; readBuffer, when not 0, is the client's TCP receive buffer.
func (f *fixture) corkDial(ctx context.Context, actor, clientID string, readBuffer int) (*websocket.Conn, *corkConn) {
	f.t.Helper()
	var cc *corkConn
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if readBuffer > 0 {
			if err := c.(*net.TCPConn).SetReadBuffer(readBuffer); err != nil {
				return nil, err
			}
		}
		cc = &corkConn{Conn: c}
		return cc, nil
	}}
	f.t.Cleanup(tr.CloseIdleConnections)
	conn, _, err := websocket.Dial(ctx, f.srv.URL+"/realtime?clientId="+clientID,
		&websocket.DialOptions{HTTPHeader: f.header(actor), HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { conn.CloseNow() })
	conn.SetReadLimit(64 << 20)
	if _, _, err := conn.Read(ctx); err != nil { // hello
		f.t.Fatal(err)
	}
	return conn, cc
}

// pipeRequest is a socket round's message: a push of row (on hardware),
// then a bootstrap pull of groceries, limit rows a page, 50 pages.
func pipeRequest(t *testing.T, epoch, clientID, row string, limit int32) []byte {
	return append([]byte{realtime.TagRound}, encodeReq(t, clientID, epoch,
		&ssp2.PushCommit{ClientCommitID: "cc-" + row, Operations: []ssp2.Operation{{Table: "todos", RowID: row, Op: ssp2.OpUpsert, Payload: todo(row, "hardware", "x")}}},
		&ssp2.PullHeader{Accept: ssp2.AcceptInlineRows, LimitSnapshotRows: limit, MaxSnapshotPages: 50},
		&ssp2.Subscription{ID: "s1", Table: "todos", Scopes: map[string][]string{"list_id": {"groceries"}}, Cursor: -1})...)
}

// noSecondPush fails t if a push of a pipelined request ("second-…") was
// applied.
func noSecondPush(t *testing.T, ctx context.Context, f *fixture) {
	t.Helper()
	r := f.replica("ada", "check", "hardware")
	if err := r.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	for id := range r.Rows["todos"] {
		if strings.HasPrefix(id, "second-") {
			t.Fatalf("the pipelined request's push %s was applied", id)
		}
	}
}

// TestPipelinedRoundAlwaysCloses (SPEC §8.7, the catalog's
// ws-round/pipelined-round-drops-connection): a second request closes the
// socket with 1008 "pipelining" every time, and is never run, whether it
// arrives with the first (both requests in one TCP write: no chunk of the
// first answer goes out; 100 runs) or while the first round's answer
// streams (written once its first chunk arrived; 30 runs). The answer,
// 10 MB, is larger than what the server's send buffer and the client's
// 32 KiB receive buffer can hold, so the second request is at the server
// before the answer could end: it must stop, never reaching END.
func TestPipelinedRoundAlwaysCloses(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := ctxT(t)
	w := f.httpClient("ada", "w")
	seedLarge(t, ctx, w, 1000, 10<<10)
	for i := range 100 {
		id := fmt.Sprintf("with-%d", i)
		conn, cc := f.corkDial(ctx, "bob", id, 0)
		cc.cork()
		for _, row := range []string{"first-" + id, "second-" + id} {
			if err := conn.Write(ctx, websocket.MessageBinary, pipeRequest(t, w.Epoch, id, row, 1)); err != nil {
				t.Fatal(err)
			}
		}
		if err := cc.uncork(); err != nil {
			t.Fatal(err)
		}
		var answered int
		ce := readToClose(t, ctx, conn, func([]byte) { answered++ })
		if ce.Code != websocket.StatusPolicyViolation || ce.Reason != "pipelining" || answered != 0 {
			t.Fatalf("run %d, two requests in one write: closed with %v after %d answer chunks; want 1008 pipelining, no answer", i, ce, answered)
		}
	}
	var worst time.Duration
	for i := range 30 {
		id := fmt.Sprintf("streaming-%d", i)
		conn, _ := f.corkDial(ctx, "bob", id, 32<<10)
		if err := conn.Write(ctx, websocket.MessageBinary, pipeRequest(t, w.Epoch, id, "first-"+id, 20)); err != nil {
			t.Fatal(err)
		}
		_, first, err := conn.Read(ctx)
		if err != nil || first[0] != realtime.TagRound {
			t.Fatalf("first answer chunk: %v", err)
		}
		if err := conn.Write(ctx, websocket.MessageBinary, pipeRequest(t, w.Epoch, id, "second-"+id, 20)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		answer := first[1:]
		ended := false
		ce := readToClose(t, ctx, conn, func(chunk []byte) {
			answer = append(answer, chunk...)
			ended = ended || answerEnded(answer)
		})
		if ce.Code != websocket.StatusPolicyViolation || ce.Reason != "pipelining" || ended {
			t.Fatalf("run %d, second request while the answer streams: closed with %v (answer ended: %v); want 1008 pipelining before END", i, ce, ended)
		}
		worst = max(worst, time.Since(start))
	}
	t.Logf("130 pipelined rounds closed 1008; while the answer streamed, the close came within %v of the second request", worst)
	noSecondPush(t, ctx, f)
}

// TestPipelinedRoundWithLaggingReader: both requests arrive together and
// the socket's reader is held right after it took the first (as a loaded
// machine deschedules it) until the first answer has ended or is waiting
// for the reader. The answer must wait: the socket closes with 1008
// "pipelining" and no chunk of the answer goes out. (Before, the round
// answered in full meanwhile, and the second request, read afterwards,
// was served as the next round: no close.)
func TestPipelinedRoundWithLaggingReader(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := ctxT(t)
	w := f.httpClient("ada", "w")
	seedLarge(t, ctx, w, 50, 1<<10)
	var mu sync.Mutex
	var lagging string
	var ended chan struct{}
	var waits uint64
	realtime.SetTookRound(f.hub, func(clientID string) {
		mu.Lock()
		id, done, before := lagging, ended, waits
		mu.Unlock()
		if clientID != id {
			return
		}
		deadline := time.Now().Add(20 * time.Second)
		for f.hub.Stats().RoundReaderWaits == before {
			select {
			case <-done:
				return
			default:
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: the answer neither ended nor waited for the reader", id)
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	for i := range 20 {
		id := fmt.Sprintf("lag-%d", i)
		done := make(chan struct{})
		mu.Lock()
		lagging, ended, waits = id, done, f.hub.Stats().RoundReaderWaits
		mu.Unlock()
		conn, cc := f.corkDial(ctx, "bob", id, 0)
		cc.cork()
		for _, row := range []string{"first-" + id, "second-" + id} {
			if err := conn.Write(ctx, websocket.MessageBinary, pipeRequest(t, w.Epoch, id, row, 1000)); err != nil {
				t.Fatal(err)
			}
		}
		if err := cc.uncork(); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		var answer []byte
		answered := 0
		ce := readToClose(t, rctx, conn, func(chunk []byte) {
			answered++
			if answer = append(answer, chunk...); answerEnded(answer) {
				answer = nil
				select {
				case <-done:
				default:
					close(done)
				}
			}
		})
		cancel()
		if ce.Code != websocket.StatusPolicyViolation || ce.Reason != "pipelining" || answered != 0 {
			t.Fatalf("run %d: closed with %v after %d answer chunks; want 1008 pipelining, no answer", i, ce, answered)
		}
	}
	noSecondPush(t, ctx, f)
}

// readToClose reads conn until the server closes it, handing each round
// chunk (without its tag) to chunk, and returns the close.
func readToClose(t *testing.T, ctx context.Context, conn *websocket.Conn, chunk func([]byte)) websocket.CloseError {
	t.Helper()
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			var ce websocket.CloseError
			if !errors.As(err, &ce) {
				t.Fatalf("socket ended with %v, want a close frame", err)
			}
			return ce
		}
		if len(data) > 0 && data[0] == realtime.TagRound {
			chunk(data[1:])
		}
	}
}

// answerEnded reports whether buf holds a whole SSP2 response, up to its
// END frame.
func answerEnded(buf []byte) bool {
	off := 8
	for off+5 <= len(buf) {
		n := int(binary.LittleEndian.Uint32(buf[off+1 : off+5]))
		if buf[off] == byte(ssp2.FrameEnd) {
			return true
		}
		off += 5 + n
	}
	return false
}
