package realtime_test

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/realtime"
)

// A client that sends its first round in the same TCP write as the
// upgrade request (net/http reads those bytes ahead, with the handshake)
// gets that round answered: the bytes read ahead reach the socket before
// the network does.
func TestRoundSentWithTheUpgrade(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := ctxT(t)
	nc, err := net.Dial("tcp", strings.TrimPrefix(f.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	// One masked binary frame (a zero mask) holding the round.
	payload := append([]byte{realtime.TagRound}, encodeReq(t, "h", "", &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows})...)
	if len(payload) >= 126 {
		t.Fatalf("payload of %d bytes needs a longer frame header", len(payload))
	}
	frame := append([]byte{0x82, 0x80 | byte(len(payload)), 0, 0, 0, 0}, payload...)
	upgrade := "GET /realtime?clientId=h HTTP/1.1\r\nHost: synclane\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nX-Actor: ada\r\n\r\n"
	if _, err := nc.Write(append([]byte(upgrade), frame...)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", res, err)
	}
	var answer []byte
	for !answerEnded(answer) {
		var h [2]byte
		if _, err := io.ReadFull(br, h[:]); err != nil {
			t.Fatalf("reading frames (answer so far %d bytes): %v", len(answer), err)
		}
		n := uint64(h[1] & 0x7f)
		switch n {
		case 126:
			var x [2]byte
			_, err = io.ReadFull(br, x[:])
			n = uint64(binary.BigEndian.Uint16(x[:]))
		case 127:
			var x [8]byte
			_, err = io.ReadFull(br, x[:])
			n = binary.BigEndian.Uint64(x[:])
		}
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(br, data); err != nil {
			t.Fatal(err)
		}
		if op := h[0] & 0x0f; op == 0x2 && len(data) > 0 && data[0] == realtime.TagRound {
			answer = append(answer, data[1:]...)
		} else if op == 0x8 {
			t.Fatalf("closed: %q", data)
		}
	}
	m, err := ssp2.DecodeResponse(answer)
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := m.Frames[0].(*ssp2.RespHeader); !ok || h.LogEpoch == "" {
		t.Fatalf("answer %+v", m.Frames)
	}
}
