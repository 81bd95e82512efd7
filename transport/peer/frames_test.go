package peer

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
)

// Heads round-trip through their encoding, and the frame reader refuses
// unknown types and payloads over their type's limit.
func TestFrameCodec(t *testing.T) {
	heads := []struct {
		name string
		req  bool
		h    head
	}{
		{"call", true, head{path: pathSync, header: http.Header{"Synclane-Identity": {"abc"}, "Traceparent": {"00-1-2-01"}}}},
		{"call without headers", true, head{path: pathAck, header: http.Header{}}},
		{"answer streamed", false, head{status: 200, size: -1, header: http.Header{"Content-Type": {"x"}}}},
		{"answer whole", false, head{status: 421, size: 1234, header: http.Header{"A": {"1", "2"}}}},
	}
	for _, tc := range heads {
		t.Run(tc.name, func(t *testing.T) {
			b := appendHead(nil, tc.req, &tc.h)
			got, err := parseHead(b, tc.req)
			if err != nil || !reflect.DeepEqual(got, tc.h) {
				t.Fatalf("round trip: %+v, %v, want %+v", got, err, tc.h)
			}
			if _, err := parseHead(b[:len(b)-1], tc.req); err == nil && len(b) > 1 {
				t.Fatal("a truncated head was accepted")
			}
		})
	}
	frames := []struct {
		name string
		raw  []byte
		ok   bool
	}{
		{"data", append(appendFrameHeader(nil, frameData, flagEnd, 3, 2), 'h', 'i'), true},
		{"unknown type", appendFrameHeader(nil, 9, 0, 3, 0), false},
		{"data over the limit", appendFrameHeader(nil, frameData, 0, 3, maxDataPayload+1), false},
		{"reset over the limit", appendFrameHeader(nil, frameReset, 0, 3, maxCtlPayload+1), false},
		{"truncated payload", append(appendFrameHeader(nil, frameData, 0, 3, 5), 'h'), false},
	}
	for _, tc := range frames {
		t.Run(tc.name, func(t *testing.T) {
			h, p, err := readFrame(bufio.NewReader(bytes.NewReader(tc.raw)), make([]byte, 16))
			if (err == nil) != tc.ok {
				t.Fatalf("readFrame = %+v %q %v, want ok %v", h, p, err, tc.ok)
			}
		})
	}
}

// The frame decoder never panics and never returns a payload over its
// type's limit; every head it accepts re-encodes to one it decodes equal.
func FuzzReadFrame(f *testing.F) {
	f.Add(append(appendFrameHeader(nil, frameReq, 0, 1, 0), appendHead(nil, true, &head{path: pathSync, header: http.Header{"K": {"v"}}})...), true)
	f.Add(append(appendFrameHeader(nil, frameRes, 0, 1, 0), appendHead(nil, false, &head{status: 200, size: -1, header: http.Header{}})...), false)
	f.Add(append(appendFrameHeader(nil, frameWindow, 0, 0, 4), 0, 0, 1, 0), false)
	f.Add(append(appendFrameHeader(nil, frameReset, 0, 5, 3), 1, 'n', 'o'), false)
	f.Fuzz(func(t *testing.T, in []byte, req bool) {
		br := bufio.NewReader(bytes.NewReader(in))
		buf := make([]byte, 64)
		for range 64 {
			h, p, err := readFrame(br, buf)
			if err != nil {
				return
			}
			if uint32(len(p)) != h.length || h.length > maxPayload(h.typ) {
				t.Fatalf("frame %+v with a payload of %d bytes", h, len(p))
			}
			switch h.typ {
			case frameReq, frameRes:
				hd, err := parseHead(p, req)
				if err != nil {
					continue
				}
				again, err := parseHead(appendHead(nil, req, &hd), req)
				if err != nil || !reflect.DeepEqual(again, hd) {
					t.Fatalf("head %+v re-decoded as %+v (%v)", hd, again, err)
				}
			case frameReset:
				_, _, _ = parseReset(p)
			case frameWindow:
				_, _ = parseWindow(p)
			}
		}
	})
}

// Many calls at once over the frames transport share one connection and
// each gets its own answer: concurrent pushes (each its own commit id)
// and concurrent pulls whose answers are many times the stream window
// (so they flow under flow control, interleaved on the connection).
func TestFramesManyCallsOneConnection(t *testing.T) {
	secret, _ := NewSecret([]byte("cluster secret"))
	eng, srv, h := memberHandler(t, secret)
	t.Cleanup(func() { h.Close(context.Background()) })
	c, err := NewClient(ClientOptions{Self: "http://caller", Secret: secret, Protocol: ProtocolFrames, MaxReceiveBufferPerStream: minStreamWindow})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	id := engine.Identity{ActorID: "u1", Partition: "p-many", Grants: map[string][]string{"list_id": {"L"}}}
	first := decodeResponse(t, must(c.Sync(ctx, srv.URL, id, request(t, "c-seed", "", &ssp2.PullHeader{Accept: 1}))))
	epoch := first.Frames[0].(*ssp2.RespHeader).LogEpoch
	codec := ssp2.NewRowCodec(eng.Schema().Table("todos").Columns)
	pushOne := func(cid, commit, row string) error {
		payload, err := codec.AppendSparse(nil, ssp2.Row{row, "L", strings.Repeat("x", 500) + row, false, int64(1), int64(2)}, nil, 0)
		if err != nil {
			return err
		}
		push := &ssp2.PushCommit{ClientCommitID: commit, Operations: []ssp2.Operation{{Table: "todos", RowID: row, Op: ssp2.OpUpsert, Payload: payload}}}
		rc, err := c.Sync(ctx, srv.URL, id, request(t, cid, epoch, push))
		if err != nil {
			return err
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			return err
		}
		m, err := ssp2.DecodeResponse(b)
		if err != nil {
			return err
		}
		for _, f := range m.Frames {
			if p, ok := f.(*ssp2.PushResult); ok {
				if p.ClientCommitID != commit || p.Status != ssp2.CommitApplied {
					return fmt.Errorf("push %s answered %+v", commit, p)
				}
				return nil
			}
		}
		return fmt.Errorf("push %s: no push result in %+v", commit, m.Frames)
	}
	const pushes, pulls = 64, 32
	var wg sync.WaitGroup
	errs := make([]error, pushes)
	for i := range pushes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = pushOne(fmt.Sprintf("c%d", i), fmt.Sprintf("k%d", i), fmt.Sprintf("r%d", i))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	sizes := make([]int, pulls)
	perrs := make([]error, pulls)
	for i := range pulls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub := &ssp2.Subscription{ID: "s", Table: "todos", Scopes: map[string][]string{"list_id": {"L"}}, Cursor: 0}
			rc, err := c.Sync(ctx, srv.URL, id, request(t, fmt.Sprintf("puller%d", i), epoch, &ssp2.PullHeader{Accept: 1, LimitCommits: 1000}, sub))
			if err != nil {
				perrs[i] = err
				return
			}
			defer rc.Close()
			b, err := io.ReadAll(rc)
			if err == nil {
				_, err = ssp2.DecodeResponse(b)
			}
			perrs[i], sizes[i] = err, len(b)
		}()
	}
	wg.Wait()
	if err := errors.Join(perrs...); err != nil {
		t.Fatal(err)
	}
	for i, n := range sizes {
		if n < 2*minStreamWindow || n != sizes[0] {
			t.Fatalf("pull %d: %d bytes (the first: %d), want the same answer, over twice the %d-byte window", i, n, sizes[0], minStreamWindow)
		}
	}
	if d, o := c.frames.dials.Load(), c.frames.open.Load(); d != 1 || o != 1 {
		t.Fatalf("%d dials, %d connections open for %d calls, want one", d, o, pushes+pulls+1)
	}
	if f := c.frames.fallbacks.Load(); f != 0 {
		t.Fatalf("%d calls fell back to HTTP", f)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewTransportCollector(c, h))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			k := mf.GetName()
			for _, l := range m.GetLabel() {
				k += "/" + l.GetValue()
			}
			got[k] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{"synclane_cluster_peer_connections/out": 1, "synclane_cluster_peer_connections/in": 1,
		"synclane_cluster_peer_dials_total": 1, "synclane_cluster_peer_dial_failures_total": 0, "synclane_cluster_peer_http_fallbacks_total": 0}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("metrics %v, want %v", got, want)
	}
}

// fakeFramesMember accepts frames connections (signed with secret) and
// runs each call through onCall on the connection's reader.
func fakeFramesMember(t *testing.T, secret Secret, onCall func(c *fconn, s *fstream, hd head)) *httptest.Server {
	t.Helper()
	var wg sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == pathProbe {
			_, _ = io.WriteString(w, "{}")
			return
		}
		if _, err := secret.Verify(r, time.Now()); err != nil {
			writeRefusal(w, err)
			return
		}
		nc, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + framesUpgrade + "\r\n\r\n")
		_ = brw.Flush()
		c := newFconn(nc, brw.Reader, false, 256<<10, "caller", zap.NewNop())
		c.onReq = func(s *fstream, hd head) { onCall(c, s, hd) }
		wg.Add(1)
		go func() { // owned by the test server: ends when the connection does
			defer wg.Done()
			_ = c.readLoop()
		}()
	}))
	t.Cleanup(func() { srv.Close(); wg.Wait() })
	return srv
}

// A member that dies (its connection closes) before it answers, or in
// the middle of an answer, fails the call as it does over HTTP/1.1: an
// error wrapping engine.ErrPeerUnreachable (not ErrUnresponsive), or an
// answer body whose read fails (never a clean, short end).
func TestFramesMemberDiesMidCall(t *testing.T) {
	secret, _ := NewSecret([]byte("cluster secret"))
	id := engine.Identity{ActorID: "u1", Partition: "p1"}
	ctx := context.Background()
	body := request(t, "c1", "", &ssp2.PullHeader{Accept: 1})
	for _, tc := range []struct {
		name     string
		midwayAt bool // dies after the answer started
	}{{"before the answer", false}, {"mid-answer", true}} {
		// The HTTP/1.1 path against a member that dies the same way.
		httpSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tc.midwayAt {
				w.Header().Set("Content-Length", "100000")
				w.WriteHeader(200)
				_, _ = w.Write(make([]byte, 1000))
				http.NewResponseController(w).Flush()
			}
			nc, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = nc.Close()
			}
		}))
		framesSrv := fakeFramesMember(t, secret, func(c *fconn, s *fstream, hd head) {
			if tc.midwayAt {
				hb := appendHead(nil, false, &head{status: 200, size: 100000, header: http.Header{}})
				_ = c.writeFrames(func(w *bufio.Writer) error {
					if err := c.frame(w, frameRes, 0, s.id, hb); err != nil {
						return err
					}
					return c.frame(w, frameData, 0, s.id, make([]byte, 1000))
				})
			}
			_ = c.nc.Close()
		})
		var got []error
		for _, p := range []struct{ proto, url string }{{ProtocolHTTP1, httpSrv.URL}, {ProtocolFrames, framesSrv.URL}} {
			c, _ := NewClient(ClientOptions{Self: "http://caller", Secret: secret, Protocol: p.proto})
			rc, err := c.Sync(ctx, p.url, id, body)
			if err == nil {
				_, err = io.ReadAll(rc)
				rc.Close()
				if err == nil {
					err = errors.New("the answer ended cleanly")
				}
			}
			c.Close()
			got = append(got, err)
			if tc.midwayAt {
				if errors.Is(err, engine.ErrPeerUnreachable) || err.Error() == "the answer ended cleanly" {
					t.Errorf("%s %s: body read error %v, want a failed read", tc.name, p.proto, err)
				}
				continue
			}
			if !errors.Is(err, engine.ErrPeerUnreachable) || errors.Is(err, ErrUnresponsive) || errors.Is(err, ErrRefused) {
				t.Errorf("%s %s: %v, want engine.ErrPeerUnreachable", tc.name, p.proto, err)
			}
		}
		t.Logf("%s: http1: %v; frames: %v", tc.name, got[0], got[1])
		httpSrv.Close()
	}
}

// A call whose caller gives up (its context ends) is cancelled at the
// callee: the call's context there ends, and the connection carries the
// next call.
func TestFramesCallerCancels(t *testing.T) {
	secret, _ := NewSecret([]byte("cluster secret"))
	cancelled := make(chan struct{})
	var once sync.Once
	srv := fakeFramesMember(t, secret, func(c *fconn, s *fstream, hd head) {
		if hd.path == pathAck {
			hb := appendHead(nil, false, &head{status: 200, size: 2, header: http.Header{}})
			_ = c.writeFrames(func(w *bufio.Writer) error {
				if err := c.frame(w, frameRes, 0, s.id, hb); err != nil {
					return err
				}
				return c.frame(w, frameData, flagEnd, s.id, []byte("{}"))
			})
			s.release()
			return
		}
		go func() { // owned by the test: ends when the stream fails
			<-s.failed
			once.Do(func() { close(cancelled) })
		}()
	})
	c, _ := NewClient(ClientOptions{Self: "http://caller", Secret: secret, Protocol: ProtocolFrames})
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.ClientState(ctx, srv.URL, engine.Identity{ActorID: "u1", Partition: "p1"}, "c1")
		done <- err
	}()
	waitFor(t, "the call to reach the member", 5*time.Second, func() bool { return c.frames.open.Load() == 1 && firstConn(c).active() == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v, want context.Canceled", err)
	}
	<-cancelled
	if err := c.Ack(context.Background(), srv.URL, "p1", nil); err != nil {
		t.Fatalf("the next call on the connection: %v", err)
	}
	if d := c.frames.dials.Load(); d != 1 {
		t.Fatalf("%d dials, want 1", d)
	}
}

func firstConn(c *Client) *fconn {
	c.frames.mu.Lock()
	defer c.frames.mu.Unlock()
	for _, m := range c.frames.members {
		if len(m.conns) > 0 {
			return m.conns[0]
		}
	}
	return &fconn{}
}

// A member that does not serve the frames transport (older: its member
// routes answer GET with 405) is called over HTTP/1.1.
func TestFramesFallBackToHTTP(t *testing.T) {
	secret, _ := NewSecret([]byte("cluster secret"))
	_, srv, h := memberHandler(t, secret)
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == pathFrames {
			http.Error(w, "member calls are POST", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer old.Close()
	_ = srv
	c, _ := NewClient(ClientOptions{Self: "http://caller", Secret: secret, Protocol: ProtocolFrames})
	defer c.Close()
	for range 2 {
		if err := c.Ack(context.Background(), old.URL, "p1", nil); err != nil {
			t.Fatal(err)
		}
	}
	if d, f := c.frames.dials.Load(), c.frames.fallbacks.Load(); d != 1 || f != 2 {
		t.Fatalf("%d dials and %d fallbacks, want 1 dial (remembered) and 2 calls over HTTP", d, f)
	}
}

// waitFor polls cond (a condition the test cannot be told about) until it
// holds, failing after limit.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Calls may reach the callee out of stream-id order (ids are taken and
// calls written on different goroutines): each is served.
func TestFramesCallsOutOfIDOrder(t *testing.T) {
	secret, _ := NewSecret([]byte("cluster secret"))
	_, srv, h := memberHandler(t, secret)
	t.Cleanup(func() { h.Close(context.Background()) })
	c, _ := NewClient(ClientOptions{Self: "http://caller", Secret: secret, Protocol: ProtocolFrames})
	defer c.Close()
	ctx := context.Background()
	conn, err := c.frames.get(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := conn.open()
	second, _ := conn.open()
	for _, s := range []*fstream{second, first} {
		hb := appendHead(nil, true, &head{path: pathProbe, header: http.Header{}})
		if err := conn.writeFrames(func(w *bufio.Writer) error { return conn.frame(w, frameReq, flagEnd, s.id, hb) }); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []*fstream{first, second} {
		select {
		case hd := <-s.head:
			b, err := io.ReadAll(framesReqBody{s})
			if hd.status != 200 || err != nil || string(b) != "{}" {
				t.Fatalf("stream %d: %d %q %v", s.id, hd.status, b, err)
			}
		case <-s.failed:
			t.Fatalf("stream %d failed: %v", s.id, s.cause(nil))
		}
		s.release()
	}
}

// A callee closing its frames connections (shutdown) tells its callers
// to open no new call on them: the connection ends, and the next call
// reaches the member over HTTP/1.1 while it still serves HTTP.
func TestFramesCalleeCloses(t *testing.T) {
	secret, _ := NewSecret([]byte("cluster secret"))
	_, srv, h := memberHandler(t, secret)
	c, _ := NewClient(ClientOptions{Self: "http://caller", Secret: secret, Protocol: ProtocolFrames})
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Member(ctx, srv.URL); err != nil {
		t.Fatal(err)
	}
	conn := firstConn(c)
	h.Close(ctx)
	<-conn.done
	if _, err := c.Member(ctx, srv.URL); err != nil {
		t.Fatalf("call after the callee closed its frames connections: %v", err)
	}
	if d, f := c.frames.dials.Load(), c.frames.fallbacks.Load(); d != 2 || f != 1 {
		t.Fatalf("%d dials, %d calls over HTTP; want a second dial (refused: the member is stopping) and the call over HTTP", d, f)
	}
}
