package realtime_test

import (
	"errors"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/httpsync"
)

// roundV2 is encodeReq in wire version 2.
func roundV2(t *testing.T, clientID, epoch string, frames ...ssp2.Frame) []byte {
	t.Helper()
	b := encodeReq(t, clientID, epoch, frames...)
	b[4], b[5] = byte(ssp2.WireV2), 0 // v2's layouts of these frames are v3's
	return b
}

// By default a socket round in wire version 2 is answered in-band with
// sync.invalid_request (no frame read, nothing registered) and the socket
// serves the next round; with the window 2,3 a v2 client's round is served
// and its deltas come in version 2 while a v3 client's come in version 3
// (the version each client's requests were in, SPEC §8.1).
func TestSocketWireVersions(t *testing.T) {
	t.Run("default", func(t *testing.T) {
		f := newFixture(t, fixtureOpts{})
		ctx := ctxT(t)
		s := f.mustDial(ctx, "ada", "r")
		got, err := s.Round(ctx, roundV2(t, "r", "", &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows}))
		if err != nil {
			t.Fatal(err)
		}
		m, err := ssp2.DecodeResponse(got)
		if err != nil {
			t.Fatal(err)
		}
		var ef *ssp2.ErrorFrame
		for _, fr := range m.Frames {
			if e, ok := fr.(*ssp2.ErrorFrame); ok {
				ef = e
			}
		}
		if ef == nil || ef.Code != string(syncerr.InvalidRequest) {
			t.Fatalf("a v2 round by default: %+v, want an ERROR sync.invalid_request", m.Frames)
		}
		c := &httpsync.Client{ClientID: "r", Rounds: s}
		if err := c.Handshake(ctx); err != nil {
			t.Fatalf("a v3 round on the same socket after the refusal: %v", err)
		}
	})
	t.Run("2,3", func(t *testing.T) {
		f := newFixture(t, fixtureOpts{wire: []uint16{ssp2.WireV2, ssp2.WireV3}})
		ctx := ctxT(t)
		old := f.replica("bob", "old", "groceries")
		old.Client.WireVersion = ssp2.WireV2
		if err := old.CatchUp(ctx); err != nil {
			t.Fatal(err)
		}
		oldSock := f.mustDial(ctx, "bob", "old")
		cur := f.follow(ctx, "cy", "groceries")
		f.waitLive(t, "old")
		f.waitLive(t, "cy")

		w := f.httpClient("ada", "w")
		seq := push(t, ctx, w, "t1", "groceries", "milk")
		for _, c := range []struct {
			name string
			want uint16
			d    func() uint16
		}{
			{"v2 client", ssp2.WireV2, func() uint16 { return nextDelta(t, ctx, oldSock).Message.WireVersion }},
			{"v3 client", ssp2.WireV3, func() uint16 { return nextDelta(t, ctx, cur).Message.WireVersion }},
		} {
			if got := c.d(); got != c.want {
				t.Errorf("%s's delta of commit %d in wire version %d, want %d", c.name, seq, got, c.want)
			}
		}
		// The v2 client's own push is a full row, under v3's rules.
		row, err := rowCodec.Append(nil, ssp2.Row{"t1", "groceries", "oat milk", true, int64(2), int64(2)})
		if err != nil {
			t.Fatal(err)
		}
		prs, err := old.Client.Push(ctx, &ssp2.PushCommit{ClientCommitID: "old-1",
			Operations: []ssp2.Operation{{Table: "todos", RowID: "t1", Op: ssp2.OpUpsert, Payload: row}}})
		if err != nil || prs[0].Status != ssp2.CommitApplied {
			t.Fatalf("v2 push of a full row: %+v %v", prs, err)
		}
		// A v1 round is outside the window.
		v1 := &httpsync.Client{ClientID: "old", Rounds: oldSock, WireVersion: ssp2.WireV1}
		var se *syncerr.Error
		if _, err := v1.Do(ctx, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows}); !errors.As(err, &se) || se.Code != syncerr.InvalidRequest {
			t.Fatalf("a v1 round with window 2,3: %v, want sync.invalid_request", err)
		}
	})
}
