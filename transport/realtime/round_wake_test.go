package realtime_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/coder/websocket"

	"github.com/synclane/synclane/protocol/ssp2"
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
