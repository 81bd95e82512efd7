package realtime

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
)

// writeLog is a connection that records each write.
type writeLog struct {
	net.Conn
	writes [][]byte
}

func (w *writeLog) Write(p []byte) (int, error) {
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

// frame is a server frame (unmasked) of a payload of n bytes.
func frame(op byte, n int) []byte {
	b := []byte{0x80 | op}
	switch {
	case n > 65535:
		b = append(b, 127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	case n > 125:
		b = append(b, 126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, byte(n))
	}
	for i := range n {
		b = append(b, byte(i*7+n))
	}
	return b
}

// frameWriter passes every frame's bytes through unchanged however they
// are split, holds nothing once a frame is complete, and never writes the
// bytes of two frames in one write (a frame is sent whole before Write
// returns).
func TestFrameWriter(t *testing.T) {
	sizes := []int{0, 1, 5, 6, 7, 20, 125, 126, 300, 65535, 65536, 70000}
	splits := []struct {
		name  string
		split func(f []byte) [][]byte
	}{
		{"whole", func(f []byte) [][]byte { return [][]byte{f} }},
		{"byte by byte", func(f []byte) [][]byte {
			var out [][]byte
			for i := range f {
				out = append(out, f[i:i+1])
			}
			return out
		}},
		{"through a 16-byte bufio.Writer", nil},
	}
	for _, sp := range splits {
		t.Run(sp.name, func(t *testing.T) {
			for _, n := range sizes {
				w := &writeLog{}
				fw := &frameWriter{conn: w}
				f := frame(0x2, n)
				if sp.split == nil {
					bw := newFrameWriter(w)
					// as coder/websocket writes a frame: two header bytes, the
					// extended length, the payload, Flush
					hl := len(f) - n
					_ = bw.WriteByte(f[0])
					_ = bw.WriteByte(f[1])
					_, _ = bw.Write(f[2:hl])
					_, _ = bw.Write(f[hl:])
					if err := bw.Flush(); err != nil {
						t.Fatal(err)
					}
				} else {
					for _, piece := range sp.split(f) {
						if _, err := fw.Write(piece); err != nil {
							t.Fatal(err)
						}
					}
					if fw.nheld != 0 || fw.inBody {
						t.Fatalf("payload %d: bytes held after the frame (%d)", n, fw.nheld)
					}
				}
				if got := bytes.Join(w.writes, nil); !bytes.Equal(got, f) {
					t.Fatalf("payload %d: wrote %d bytes, want the frame's %d", n, len(got), len(f))
				}
				if sp.name == "whole" && n > 0 && len(w.writes) != 2 {
					// with a plain net.Conn the writev is one write per part
					t.Fatalf("payload %d: %d writes, want header and payload", n, len(w.writes))
				}
			}
		})
	}
	// Two frames written in one call go out as two sends, in order.
	w := &writeLog{}
	fw := &frameWriter{conn: w}
	a, b := frame(0x1, 3), frame(0x9, 0)
	if _, err := fw.Write(append(append([]byte{}, a...), b...)); err != nil {
		t.Fatal(err)
	}
	if got := bytes.Join(w.writes, nil); !bytes.Equal(got, append(a, b...)) || bytes.Equal(w.writes[len(w.writes)-1], append(a, b...)) {
		t.Fatalf("writes %q", w.writes)
	}
}

// A socket read through a raw reader takes a pooled buffer only while it
// holds bytes the WebSocket has not read, reads the bytes net/http read
// ahead first, and marks itself idle only when it waits on the network.
func TestWatchedConnPooledRead(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	w := &readWatch{tick: make(chan struct{}, 1)}
	c := w.wrap(server, []byte("head"))
	if c.raw == nil {
		t.Skip("no raw reader on this platform (by design: only Unix sockets have one; no variable enables it)")
	}
	p := make([]byte, 3)
	if n, err := c.Read(p); err != nil || string(p[:n]) != "hea" || w.idle.Load() {
		t.Fatalf("read %q %v idle %v", p[:n], err, w.idle.Load())
	}
	if n, err := c.Read(p); err != nil || string(p[:n]) != "d" || c.pend != nil {
		t.Fatalf("read %q %v, pend %q", p[:n], err, c.pend)
	}
	msg := bytes.Repeat([]byte("0123456789"), 10)
	if _, err := client.Write(msg); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for len(got) < len(msg) {
		n, err := c.Read(p)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p[:n]...)
		if held := c.buf != nil; held != (len(got) < len(msg)) {
			t.Fatalf("after %d of %d bytes: pooled buffer held %v", len(got), len(msg), held)
		}
	}
	if !bytes.Equal(got, msg) || w.idle.Load() {
		t.Fatalf("read %q, idle %v", got, w.idle.Load())
	}
	// A large read goes to the caller's slice.
	big := make([]byte, netReadDirect)
	if _, err := client.Write(msg); err != nil {
		t.Fatal(err)
	}
	n, err := c.Read(big)
	if err != nil || n == 0 || !bytes.Equal(big[:n], msg[:n]) || c.buf != nil || w.idle.Load() {
		t.Fatalf("direct read %d %v, pooled %v, idle %v", n, err, c.buf != nil, w.idle.Load())
	}
	_ = client.Close()
	var rest bytes.Buffer
	if _, err := io.Copy(&rest, readerOnly{c}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(append(big[:n:n], rest.Bytes()...), msg) {
		t.Fatalf("read %d+%d bytes, want %d", n, rest.Len(), len(msg))
	}
	if _, err := c.Read(p); err != io.EOF || !w.idle.Load() {
		t.Fatalf("read after the end: %v, idle %v", err, w.idle.Load())
	}
}

// readerOnly hides watchedConn's other methods from io.Copy.
type readerOnly struct{ r io.Reader }

func (r readerOnly) Read(p []byte) (int, error) { return r.r.Read(p) }
