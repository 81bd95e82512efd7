package realtime_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/coder/websocket"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
)

func encodeReq(t *testing.T, clientID, epoch string, frames ...ssp2.Frame) []byte {
	t.Helper()
	h := &ssp2.ReqHeader{ClientID: clientID, SchemaVersion: 1}
	if epoch != "" {
		h.LogEpoch = &epoch
	}
	b, err := ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: append([]ssp2.Frame{h}, frames...)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func postRaw(t *testing.T, f *fixture, actor string, body []byte) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/sync", bytes.NewReader(body))
	req.Header.Set("Content-Type", httpsync.ContentType)
	req.Header.Set("x-actor", actor)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// A socket round answers exactly the bytes POST /sync answers for the
// same request (epoch acquisition, bootstrap, incremental pull); request
// failures come as RESP_HEADER + ERROR + END; a clientId that is not the
// socket's is sync.invalid_client_id; a round that pulls replaces the
// socket's registrations at once.
func TestSocketRoundEqualsHTTP(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := ctxT(t)
	w := f.httpClient("ada", "w")
	for _, id := range []string{"t1", "t2", "t3"} {
		push(t, ctx, w, id, "groceries", "item "+id)
	}
	s := f.mustDial(ctx, "ada", "r")
	if len(f.hub.Sessions(auth.DefaultPartition)[0].Keys) != 0 {
		t.Fatal("a client that never pulled is registered on keys")
	}

	acquire := encodeReq(t, "r", "", &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows})
	got, err := s.Round(ctx, acquire)
	if err != nil {
		t.Fatal(err)
	}
	status, want := postRaw(t, f, "ada", acquire)
	if status != 200 || !bytes.Equal(got, want) {
		t.Fatalf("epoch acquisition: socket %x, HTTP %d %x", got, status, want)
	}
	m, _ := ssp2.DecodeResponse(got)
	epoch := m.Frames[0].(*ssp2.RespHeader).LogEpoch

	sub := func(cursor int64) *ssp2.Subscription {
		return &ssp2.Subscription{ID: "s1", Table: "todos", Scopes: map[string][]string{"list_id": {"groceries"}}, Cursor: cursor}
	}
	for _, req := range [][]byte{
		encodeReq(t, "r", epoch, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows, LimitSnapshotRows: 2}, sub(-1)),
		encodeReq(t, "r", epoch, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows}, sub(1)),
		encodeReq(t, "r", epoch, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows}, sub(3)),
	} {
		got, err := s.Round(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		status, want := postRaw(t, f, "ada", req)
		if status != 200 || !bytes.Equal(got, want) {
			t.Fatalf("pull: socket and HTTP answers differ:\nsocket %x\nHTTP %d %x", got, status, want)
		}
	}
	// The pull registered the socket on the list's key at once.
	if k := f.hub.Sessions(auth.DefaultPartition)[0].Keys; len(k) != 1 || k[0] != "list:groceries" {
		t.Fatalf("keys after a round with a pull: %v", k)
	}

	// Request-level failures in-band.
	bad := encodeReq(t, "r", epoch, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows},
		&ssp2.Subscription{ID: "n", Table: "notes", Scopes: map[string][]string{}, Cursor: -1})
	checkError := func(req []byte, code syncerr.Code) {
		t.Helper()
		got, err := s.Round(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		m, err := ssp2.DecodeResponse(got)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Frames) != 2 {
			t.Fatalf("error answer has %d frames, want RESP_HEADER and ERROR", len(m.Frames))
		}
		if h := m.Frames[0].(*ssp2.RespHeader); h.LogEpoch != epoch {
			t.Fatalf("error answer header %+v", h)
		}
		if ef := m.Frames[1].(*ssp2.ErrorFrame); ef.Code != string(code) {
			t.Fatalf("error answer %+v, want %s", ef, code)
		}
	}
	checkError(bad, syncerr.UnknownTable)
	checkError(encodeReq(t, "other", epoch, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows}), syncerr.InvalidClientID)
	// A failed round leaves the registrations unchanged.
	if k := f.hub.Sessions(auth.DefaultPartition)[0].Keys; len(k) != 1 {
		t.Fatalf("keys after failed rounds: %v", k)
	}

	// Over a socket, httpsync.Client and the replica work unchanged.
	r := f.replica("ada", "r", "groceries")
	r.Client.Rounds = s
	if err := r.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if len(r.Rows["todos"]) != 3 {
		t.Fatalf("replica over socket rounds holds %d rows", len(r.Rows["todos"]))
	}
}

// Two rounds at once: a request chunk arriving while an answer is being
// produced closes the socket (1008 "pipelining"). A bad envelope header
// closes it too.
func TestTwoRoundsAtOnce(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := ctxT(t)
	w := f.httpClient("ada", "w")
	push(t, ctx, w, "t1", "groceries", "milk")
	conn, _, err := websocket.Dial(ctx, f.srv.URL+"/realtime?clientId=w", &websocket.DialOptions{HTTPHeader: f.header("ada")})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	if _, _, err := conn.Read(ctx); err != nil { // hello
		t.Fatal(err)
	}
	// Hold the first round inside the engine (the scope resolver waits).
	gate := make(chan struct{})
	f.mu.Lock()
	f.gate = gate
	f.mu.Unlock()
	req := encodeReq(t, "w", w.Epoch, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows},
		&ssp2.Subscription{ID: "s", Table: "todos", Scopes: map[string][]string{"list_id": {"groceries"}}, Cursor: -1})
	for range 2 {
		if err := conn.Write(ctx, websocket.MessageBinary, append([]byte{0x01}, req...)); err != nil {
			t.Fatal(err)
		}
	}
	var ce websocket.CloseError
	for {
		_, _, err := conn.Read(ctx)
		if err != nil {
			if !errors.As(err, &ce) {
				t.Fatalf("socket ended with %v, want a close frame", err)
			}
			break
		}
	}
	close(gate)
	if ce.Code != websocket.StatusPolicyViolation || ce.Reason != "pipelining" {
		t.Fatalf("second round at once: closed with %v, want 1008 pipelining", ce)
	}

	conn2, _, err := websocket.Dial(ctx, f.srv.URL+"/realtime?clientId=w", &websocket.DialOptions{HTTPHeader: f.header("ada")})
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.CloseNow()
	if _, _, err := conn2.Read(ctx); err != nil {
		t.Fatal(err)
	}
	if err := conn2.Write(ctx, websocket.MessageBinary, []byte{0x01, 'S', 'S', 'P', '3', 2, 0, 1, 0}); err != nil {
		t.Fatal(err)
	}
	for {
		if _, _, err = conn2.Read(ctx); err != nil {
			break
		}
	}
	if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation {
		t.Fatalf("bad header: %v", err)
	}
}

// Bootstrap pages too large for the encoder's buffer leave a socket round
// from the page's own bytes (chunkWriter.sendParts), in WebSocket
// fragments, and a page over the 1 MiB chunk bound in several chunks; the
// answer is still byte for byte the HTTP answer, for a page under and one
// over the bound, and the socket takes a small round after them.
func TestLargePagesOverASocketRoundEqualHTTP(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := ctxT(t)
	w := f.httpClient("ada", "w")
	title := string(bytes.Repeat([]byte("x"), 8<<10))
	for i := range 200 {
		push(t, ctx, w, fmt.Sprintf("t%03d", i), "groceries", title)
	}
	s := f.mustDial(ctx, "ada", "r")
	acquire := encodeReq(t, "r", "", &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows})
	got, err := s.Round(ctx, acquire)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := ssp2.DecodeResponse(got)
	epoch := m.Frames[0].(*ssp2.RespHeader).LogEpoch
	sub := &ssp2.Subscription{ID: "s1", Table: "todos", Scopes: map[string][]string{"list_id": {"groceries"}}, Cursor: -1}
	for _, rows := range []int32{10, 200} { // ~80 KiB pages; one ~1.6 MiB page
		req := encodeReq(t, "r", epoch, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows, LimitSnapshotRows: rows, MaxSnapshotPages: 3}, sub)
		got, err := s.Round(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		status, want := postRaw(t, f, "ada", req)
		if status != 200 || !bytes.Equal(got, want) {
			t.Fatalf("%d rows a page: socket answer (%d bytes) differs from HTTP's (%d %d bytes)", rows, len(got), status, len(want))
		}
		if len(got) < int(rows)*8<<10 {
			t.Fatalf("%d rows a page: %d bytes", rows, len(got))
		}
	}
	req := encodeReq(t, "r", epoch, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows}, &ssp2.Subscription{ID: "s1", Table: "todos",
		Scopes: map[string][]string{"list_id": {"groceries"}}, Cursor: 200})
	got, err = s.Round(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if status, want := postRaw(t, f, "ada", req); status != 200 || !bytes.Equal(got, want) {
		t.Fatal("the round after the large pages differs from HTTP's")
	}
}
