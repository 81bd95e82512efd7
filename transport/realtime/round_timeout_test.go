package realtime_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/synclane/synclane/transport/realtime"
)

// TestIncompleteRoundTimesOut: a socket that sends part of a round's
// request and never its END, while answering pings, is closed with 1008
// once the round timeout has passed; it cannot pin the buffer.
func TestIncompleteRoundTimesOut(t *testing.T) {
	f := newFixture(t, fixtureOpts{hub: realtime.Options{HeartbeatInterval: 50 * time.Millisecond, PingTimeout: time.Second,
		RoundTimeout: 200 * time.Millisecond}})
	ctx := ctxT(t)
	url := strings.Replace(f.srv.URL, "http", "ws", 1) + "/realtime?clientId=slow"
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"X-Actor": {"mallory"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	start := time.Now() // before the round's first chunk
	// The envelope and the header of a frame of 64 KiB, then 1 KiB of it.
	msg := binary.LittleEndian.AppendUint32([]byte{realtime.TagRound, 'S', 'S', 'P', '2', 2, 0, 1, 0, 0x10}, 64<<10)
	if err := c.Write(ctx, websocket.MessageBinary, msg); err != nil {
		t.Fatal(err)
	}
	chunk := append([]byte{realtime.TagRound}, bytes.Repeat([]byte{'x'}, 1<<10)...)
	if err := c.Write(ctx, websocket.MessageBinary, chunk); err != nil {
		t.Fatal(err)
	}
	for {
		// Reading answers the server's pings; the socket must end.
		if _, _, err := c.Read(ctx); err != nil {
			if code := websocket.CloseStatus(err); code != websocket.StatusPolicyViolation {
				t.Fatalf("socket ended with %v (close status %d), want 1008", err, code)
			}
			if !strings.Contains(err.Error(), "round timeout") {
				t.Errorf("close reason %q does not name the round timeout", err)
			}
			break
		}
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("closed after %v, before the 200 ms round timeout", d)
	}
}

// TestRoundFrameOverLimitClosesAtOnce: a round whose frame header declares
// a frame that would take the request past MaxRequestBytes is closed with
// 1009 as soon as that header has arrived, not held until the round
// timeout (30 s here) while the client trickles the frame.
func TestRoundFrameOverLimitClosesAtOnce(t *testing.T) {
	f := newFixture(t, fixtureOpts{hub: realtime.Options{MaxRequestBytes: 1 << 20}})
	ctx := ctxT(t)
	for _, c := range []struct {
		name string
		size uint32 // the declared frame length
	}{
		{"over the limit", 1 << 20},
		{"the largest u32", 1<<32 - 1},
	} {
		conn := f.rawDial(ctx, "mallory", "big")
		// The envelope, a REQ_HEADER frame's header declaring size bytes,
		// and 1 KiB of it.
		msg := binary.LittleEndian.AppendUint32([]byte{realtime.TagRound, 'S', 'S', 'P', '2', 2, 0, 1, 0, 0x01}, c.size)
		msg = append(msg, bytes.Repeat([]byte{'x'}, 1<<10)...)
		start := time.Now()
		if err := conn.Write(ctx, websocket.MessageBinary, msg); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ce := closeOf(t, rctx, conn)
		cancel()
		took := time.Since(start)
		if ce.Code != websocket.StatusMessageTooBig {
			t.Fatalf("%s: closed with %v, want 1009", c.name, ce)
		}
		t.Logf("%s: closed %d after %v", c.name, ce.Code, took)
	}
	// The server keeps serving.
	r := f.replica("ada", "a", "groceries")
	r.Client.Rounds = f.mustDial(ctx, "ada", "a")
	if err := r.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
}
