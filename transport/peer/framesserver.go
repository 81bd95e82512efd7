package peer

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/httperr"
)

// framesConns is the callee side's open frames connections.
type framesConns struct {
	mu     sync.Mutex
	closed bool
	conns  map[*fconn]struct{}
	wg     sync.WaitGroup // connections being served
}

// serveFrames serves GET pathFrames from member from (its signature is
// verified): it upgrades the connection and serves the calls on it until
// it ends or the handler closes.
func (h *Handler) serveFrames(w http.ResponseWriter, r *http.Request, from string) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		httperr.WriteStatus(w, http.StatusMethodNotAllowed, syncerr.New(syncerr.InvalidRequest, "the frames transport is a GET (an upgrade)"))
		return
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), framesUpgrade) {
		w.Header().Set("Upgrade", framesUpgrade)
		httperr.WriteStatus(w, http.StatusUpgradeRequired, syncerr.New(syncerr.InvalidRequest, "the frames transport needs Upgrade: %s", framesUpgrade))
		return
	}
	window, err := strconv.Atoi(r.Header.Get(windowHeader))
	if err != nil {
		window = 256 << 10
	}
	window = min(max(window, minStreamWindow), maxStreamWindow)
	fc := &h.frames
	fc.mu.Lock()
	if fc.closed {
		fc.mu.Unlock()
		httperr.Write(w, syncerr.Unavailable("not_serving", nil, "this member is stopping"))
		return
	}
	fc.wg.Add(1)
	fc.mu.Unlock()
	defer fc.wg.Done()
	rc := http.NewResponseController(w)
	// A hijacked connection keeps the server's deadlines: the transport
	// has its own.
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	nc, brw, err := rc.Hijack()
	if err != nil {
		h.opts.Logger.Warn("member frames connection not upgraded", zap.String("member", from), zap.Error(err))
		httperr.Write(w, syncerr.Wrap(syncerr.InternalError, err, "the connection cannot be upgraded"))
		return
	}
	_, err = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + framesUpgrade + "\r\n\r\n")
	if err == nil {
		err = brw.Flush()
	}
	if err != nil {
		_ = nc.Close()
		return
	}
	c := newFconn(nc, brw.Reader, false, window, from, h.opts.Logger)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls sync.WaitGroup
	c.onReq = func(s *fstream, hd head) {
		sctx, scancel := context.WithCancel(ctx)
		s.rmu.Lock()
		s.cancel = scancel
		failed := s.rerr != nil
		s.rmu.Unlock()
		if failed {
			scancel()
		}
		calls.Add(1)
		go func() { // owned by this connection: waited for below
			defer calls.Done()
			defer scancel()
			h.serveStream(sctx, c, s, hd, from)
		}()
	}
	fc.mu.Lock()
	if fc.closed {
		fc.mu.Unlock()
		_ = nc.Close()
		return
	}
	if fc.conns == nil {
		fc.conns = map[*fconn]struct{}{}
	}
	fc.conns[c] = struct{}{}
	fc.mu.Unlock()
	h.opts.Logger.Debug("member frames connection accepted", zap.String("member", from))
	err = c.readLoop()
	cancel()
	calls.Wait()
	fc.mu.Lock()
	delete(fc.conns, c)
	fc.mu.Unlock()
	h.opts.Logger.Debug("member frames connection ended", zap.String("member", from), zap.Error(err))
}

// Close stops the frames connections: each is told to take no new call
// (GOAWAY: its caller dials again, or calls over HTTP/1.1, for the next),
// the calls in flight get until ctx ends to finish, then the connections
// close. HTTP routes are not affected (http.Server.Shutdown stops them).
func (h *Handler) Close(ctx context.Context) {
	fc := &h.frames
	fc.mu.Lock()
	fc.closed = true
	conns := make([]*fconn, 0, len(fc.conns))
	for c := range fc.conns {
		conns = append(conns, c)
	}
	fc.mu.Unlock()
	for _, c := range conns {
		c.goAway()
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for _, c := range conns {
		for c.active() > 0 && ctx.Err() == nil {
			select {
			case <-t.C:
			case <-ctx.Done():
			}
		}
		c.fail(errConnClosed)
	}
	fc.wg.Wait()
}

// serveStream runs one call of a frames connection through the member
// routes, as an HTTP request would be.
func (h *Handler) serveStream(ctx context.Context, c *fconn, s *fstream, hd head, from string) {
	r := &http.Request{Method: http.MethodPost, URL: &url.URL{Path: hd.path}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: hd.header, Body: framesReqBody{s}, ContentLength: -1, RemoteAddr: c.nc.RemoteAddr().String(), RequestURI: hd.path}
	r = r.WithContext(ctx)
	w := &framesWriter{s: s, base: ctx, ctx: ctx, hdr: http.Header{}}
	defer func() {
		if v := recover(); v != nil {
			h.opts.Logger.Error("member call panicked", zap.String("member", from), zap.String("path", hd.path), zap.Any("panic", v), zap.Stack("stack"))
			w.err = fmt.Errorf("panic: %v", v)
		}
		w.finish()
		if w.dcancel != nil {
			w.dcancel()
		}
	}()
	h.route(w, r, from)
}

// framesReqBody is a call's body on the callee.
type framesReqBody struct{ s *fstream }

func (b framesReqBody) Read(p []byte) (int, error) { return b.s.read(p) }
func (b framesReqBody) Close() error               { return nil }

// framesWriter is the http.ResponseWriter of a call on a frames
// connection. Like the HTTP/1.1 server, it holds the answer's first
// answerBuffer bytes: an answer complete within them goes out whole, with
// its length; a longer one, or one flushed, streams.
type framesWriter struct {
	s       *fstream
	base    context.Context // the call's
	ctx     context.Context // base, with the write deadline when set
	dcancel context.CancelFunc
	hdr     http.Header
	status  int
	started bool // the answer's start (RES) is sent
	buf     []byte
	err     error // the answer failed; nothing more is sent
}

// answerBuffer is how much of an answer the callee holds before it
// streams it.
const answerBuffer = 32 << 10

var answerPool = sync.Pool{New: func() any { b := make([]byte, 0, answerBuffer); return &b }}

func (w *framesWriter) Header() http.Header { return w.hdr }

func (w *framesWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *framesWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.err != nil {
		return 0, w.err
	}
	if !w.started && len(w.buf)+len(p) <= answerBuffer {
		if w.buf == nil {
			w.buf = (*answerPool.Get().(*[]byte))[:0]
		}
		w.buf = append(w.buf, p...)
		return len(p), nil
	}
	if err := w.send(p, false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush sends what is held (http.Flusher).
func (w *framesWriter) Flush() { _ = w.FlushError() }

// FlushError sends what is held (for http.ResponseController).
func (w *framesWriter) FlushError() error {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.err != nil {
		return w.err
	}
	return w.send(nil, false)
}

// SetWriteDeadline bounds the rest of the answer's writes (for
// http.ResponseController): past it, a write waiting for the caller's
// credit fails.
func (w *framesWriter) SetWriteDeadline(t time.Time) error {
	if w.dcancel != nil {
		w.dcancel()
	}
	if t.IsZero() {
		w.ctx, w.dcancel = w.base, nil
		return nil
	}
	w.ctx, w.dcancel = context.WithDeadline(w.base, t)
	return nil
}

// send sends the held bytes, then p, starting the answer (length -1: it
// streams) when it has not started.
func (w *framesWriter) send(p []byte, end bool) error {
	c, s := w.s.c, w.s
	var before func(*bufio.Writer) error
	if !w.started {
		w.started = true
		hb := appendHead(nil, false, &head{status: w.status, size: -1, header: w.hdr})
		before = func(bw *bufio.Writer) error { return c.frame(bw, frameRes, 0, s.id, hb) }
	}
	var err error
	if len(w.buf) > 0 || before != nil {
		err = s.sendData(w.ctx, before, w.buf, end && len(p) == 0)
		w.putBuf()
	}
	if err == nil && (len(p) > 0 || end) {
		err = s.sendData(w.ctx, nil, p, end)
	}
	if err != nil {
		w.err = err
	}
	return err
}

func (w *framesWriter) putBuf() {
	if w.buf != nil {
		b := w.buf[:0]
		answerPool.Put(&b)
		w.buf = nil
	}
}

// finish ends the answer after the route returned: whole (with its
// length) when it was held entirely, else its end; a failed answer is
// reset (the caller sees it cut off). The stream is then released; a
// call whose body was not read to its end is told to stop sending it.
func (w *framesWriter) finish() {
	s, c := w.s, w.s.c
	switch {
	case w.err != nil:
		w.putBuf()
		if c.Err() == nil {
			c.reset(s.id, resetFailed, w.err.Error())
		}
	case !w.started:
		if w.status == 0 {
			w.status = http.StatusOK
		}
		w.started = true
		hb := appendHead(nil, false, &head{status: w.status, size: int64(len(w.buf)), header: w.hdr})
		if len(w.buf) == 0 {
			_ = c.writeFrames(func(bw *bufio.Writer) error { return c.frame(bw, frameRes, flagEnd, s.id, hb) })
		} else {
			err := s.sendData(w.ctx, func(bw *bufio.Writer) error { return c.frame(bw, frameRes, 0, s.id, hb) }, w.buf, true)
			if err != nil && c.Err() == nil {
				c.reset(s.id, resetFailed, err.Error())
			}
		}
		w.putBuf()
	default:
		if err := w.send(nil, true); err != nil && c.Err() == nil {
			c.reset(s.id, resetFailed, err.Error())
		}
	}
	s.rmu.Lock()
	bodyRead := s.rend
	s.rmu.Unlock()
	s.release()
	if !bodyRead && c.Err() == nil {
		c.reset(s.id, resetDone, "")
	}
}
