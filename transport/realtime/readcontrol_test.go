package realtime

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// readControl returns what io.ReadAll of the bounded message would, for
// messages around its buffer's growth steps and the bound, and keeps its
// buffer for the next message only while it is small.
func TestReadControlMatchesReadAll(t *testing.T) {
	h := New(Options{})
	defer h.Close()
	s := &session{h: h}
	limit := h.maxControlBytes()
	for _, n := range []int64{0, 1, 40, 63, 64, 65, 1000, ctlKeep, ctlKeep + 1, 70_000, limit, limit + 1, limit + 5} {
		msg := strings.Repeat("x", int(n))
		want, _ := io.ReadAll(io.LimitReader(strings.NewReader(msg), limit+1))
		got, err := s.readControl(strings.NewReader(msg))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: got %d bytes, %v; want %d", n, len(got), err, len(want))
		}
		if kept := s.ctlBuf != nil; kept != (cap(got) <= ctlKeep) {
			t.Fatalf("%d bytes (buffer %d): buffer kept %v", n, cap(got), kept)
		}
	}
	a, _ := s.readControl(strings.NewReader(`{"type":"ack","cursor":1}`))
	b, _ := s.readControl(strings.NewReader(`{"type":"ack","cursor":22}`))
	if &a[0] != &b[0] || string(b) != `{"type":"ack","cursor":22}` {
		t.Fatalf("the second ack did not reuse the first's buffer (%q)", b)
	}
	if _, err := s.readControl(io.MultiReader(strings.NewReader("abc"), iotestErr{})); err == nil {
		t.Fatal("a failed read returned no error")
	}
}

type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }
