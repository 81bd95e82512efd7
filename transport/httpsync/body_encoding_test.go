package httpsync_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
)

// zstdFrameWithWindow is a zstd frame that declares a window of
// 2^(10+exp) bytes and carries payload as one raw block (last unless
// more is set).
func zstdFrameWithWindow(exp byte, payload []byte, more bool) []byte {
	b := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, exp << 3} // no content size, not single segment
	hdr := uint32(len(payload)) << 3                    // raw block
	if !more {
		hdr |= 1 // last block
	}
	b = append(b, byte(hdr), byte(hdr>>8), byte(hdr>>16))
	return append(b, payload...)
}

// TestZstdRequestWindowIsCapped: a frame of a few dozen bytes declaring a
// 64 MiB window is refused as invalid without the decoder allocating the
// window; one declaring 8 MiB (zstd's default) is decoded.
func TestZstdRequestWindowIsCapped(t *testing.T) {
	srv := newMemoryServer(t, 64<<10)
	if st, _, b := rawPost(t, srv.URL, zstdFrameWithWindow(13, handshakeBody(t), false), "zstd", "identity"); st != http.StatusOK {
		t.Fatalf("8 MiB window: HTTP %d %s", st, b)
	}
	body := zstdFrameWithWindow(16, handshakeBody(t), false) // 64 MiB window
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	st, _, b := rawPost(t, srv.URL, body, "zstd", "identity")
	runtime.ReadMemStats(&after)
	if st != http.StatusBadRequest || !strings.Contains(string(b), "sync.invalid_request") {
		t.Errorf("64 MiB window: HTTP %d %s, want 400 sync.invalid_request", st, b)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("a %d-byte zstd request made the process allocate %d MiB", len(body), alloc>>20)
	}
}

// waitingBody signals once the handler asks for body bytes a second
// time: it has taken what the client sent and waits for more.
type waitingBody struct {
	io.ReadCloser
	reads   int
	waiting func()
}

func (b *waitingBody) Read(p []byte) (int, error) {
	if b.reads++; b.reads == 2 {
		b.waiting()
	}
	return b.ReadCloser.Read(p)
}

// TestStalledZstdBodiesHoldNoWindow: clients that send the first block of
// a zstd body and stall hold only what they sent, not a decoder window.
func TestStalledZstdBodiesHoldNoWindow(t *testing.T) {
	s := schema.MustDemo()
	eng, err := engine.New(context.Background(), engine.Config{Schema: s, Backend: memory.New().Backend(), Resolver: engine.AllowAll(s)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	const conns = 6
	waiting := make(chan struct{}, conns)
	h := httpsync.NewHandler(eng, httpsync.Options{Auth: auth.DevAuth{}, MaxBodyBytes: 64 << 10})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = &waitingBody{ReadCloser: r.Body, waiting: func() { waiting <- struct{}{} }}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	var base, now runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&base)
	for range conns {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nX-Actor: ada\r\nContent-Encoding: zstd\r\nContent-Length: 1000\r\n\r\n", httpsync.ContentType)
		if _, err := c.Write(zstdFrameWithWindow(13, []byte("S"), true)); err != nil { // 8 MiB window, first block only
			t.Fatal(err)
		}
	}
	for range conns {
		select {
		case <-waiting:
		case <-time.After(10 * time.Second):
			t.Fatal("the requests never waited for the rest of their bodies")
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&now)
	if grown := int64(now.HeapAlloc) - int64(base.HeapAlloc); grown > 16<<20 {
		t.Fatalf("%d stalled zstd requests of 10 body bytes each hold %d MiB of live heap", conns, grown>>20)
	}
}

// TestCompressedLateBodyGets408: a body that stops arriving gets 408
// sync.invalid_request whatever its encoding, also when the read timeout
// passes before a gzip or zstd header is complete.
func TestCompressedLateBodyGets408(t *testing.T) {
	s := schema.MustDemo()
	eng, err := engine.New(context.Background(), engine.Config{Schema: s, Backend: memory.New().Backend(), Resolver: engine.AllowAll(s)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	srv := httptest.NewUnstartedServer(httpsync.NewHandler(eng, httpsync.Options{Auth: auth.DevAuth{}}))
	srv.Config.ReadTimeout = 300 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)

	plain := handshakeBody(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(plain); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	zenc, _ := zstd.NewWriter(nil)
	zs := zenc.EncodeAll(plain, nil)
	for _, c := range []struct {
		enc  string
		body []byte
		cut  int
	}{{"identity", plain, len(plain) / 2}, {"gzip", gz.Bytes(), gz.Len() / 2}, {"zstd", zs, len(zs) / 2},
		{"gzip", gz.Bytes(), 0}, {"zstd", zs, 0}, {"gzip", gz.Bytes(), 3}, {"zstd", zs, 3}} {
		t.Run(fmt.Sprintf("%s-%d-bytes", c.enc, c.cut), func(t *testing.T) {
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST /sync HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nX-Actor: ada\r\nContent-Encoding: %s\r\nContent-Length: 10000\r\n\r\n",
				httpsync.ContentType, c.enc)
			if _, err := conn.Write(c.body[:c.cut]); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), "sync.invalid_request") {
				t.Fatalf("HTTP %d %s, want 408 sync.invalid_request", res.StatusCode, b)
			}
		})
	}
}
