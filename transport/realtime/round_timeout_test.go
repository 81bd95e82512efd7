package realtime_test

import (
	"bytes"
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
