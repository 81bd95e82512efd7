package peer

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Limits of a frames connection.
const (
	// connWindow is each direction's connection-level credit: at most this
	// many bytes of bodies are in flight (sent, not yet read by their
	// reader) on one connection, across its streams.
	connWindow = 16 << 20
	// minStreamWindow and maxStreamWindow bound the stream window the
	// caller announces (ClientOptions.MaxReceiveBufferPerStream).
	minStreamWindow = 16 << 10
	maxStreamWindow = 16 << 20
	// maxStreamsPerConn caps the calls in flight on one connection (the
	// caller opens another connection past it, the callee refuses more).
	maxStreamsPerConn = 256
	// framesWriteTimeout fails a connection whose writes make no progress
	// for this long (the other member stopped reading it): after half to
	// all of it.
	framesWriteTimeout = 10 * time.Second
)

var (
	// errConnClosed is the error of the streams of a connection closed by
	// this member (its client or handler closing).
	errConnClosed = errors.New("peer: member connection closed")
	// errStreamRefused is a call the callee refused before running it
	// (it is closing, or has too many calls on the connection).
	errStreamRefused = errors.New("peer: the member refused the call on this connection (closing or busy)")
)

// bufPool holds the receive buffers of streams.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// fconn is one frames connection, either side: a reader goroutine
// (readLoop, run by the connection's owner) dispatching frames to the
// streams, and writes from any goroutine under wmu.
type fconn struct {
	nc     net.Conn
	br     *bufio.Reader
	client bool
	window int // the stream window, both directions
	log    *zap.Logger
	peer   string
	// onReq (callee side) starts a call; it runs on the reader goroutine
	// and must not block.
	onReq func(s *fstream, h head)

	wmu     sync.Mutex
	bw      *bufio.Writer
	hdr     []byte    // scratch for frame headers, under wmu
	renewAt time.Time // when the write deadline is renewed, under wmu

	mu       sync.Mutex
	streams  map[uint32]*fstream
	nextID   uint32
	sendConn int64         // connection credit to send
	credit   chan struct{} // closed (and replaced) when credit grows
	err      error         // why the connection ended; nil while up
	goaway   bool          // no new stream (the callee said so, or ids ran out)
	unacked  int           // bytes read by readers not yet granted back to the peer (connection)
	done     chan struct{} // closed when the connection ended
}

func newFconn(nc net.Conn, br *bufio.Reader, client bool, window int, peer string, log *zap.Logger) *fconn {
	return &fconn{nc: nc, br: br, client: client, window: window, peer: peer, log: log,
		bw: bufio.NewWriterSize(nc, 16<<10), streams: map[uint32]*fstream{}, nextID: 1,
		sendConn: connWindow, credit: make(chan struct{}), done: make(chan struct{})}
}

// fstream is one call on a connection.
type fstream struct {
	c  *fconn
	id uint32

	// receive side (the answer on the caller, the call's body on the callee)
	rmu     sync.Mutex
	buf     *[]byte // pooled; nil until bytes arrive
	roff    int
	rend    bool  // the peer sent flagEnd
	rerr    error // the stream failed (reset, connection lost)
	unacked int   // bytes read, not yet granted back
	rsig    chan struct{}

	// send side, under c.mu
	sendCredit int64
	stopSend   bool // the peer reset the stream (any code)

	head   chan head          // caller: the answer's start
	failed chan struct{}      // closed when rerr is set
	cancel context.CancelFunc // callee: ends the call's context (under rmu)
	closed bool               // under c.mu: unregistered
}

func (c *fconn) newStream(id uint32) *fstream {
	return &fstream{c: c, id: id, sendCredit: int64(c.window), rsig: make(chan struct{}, 1), failed: make(chan struct{})}
}

// open registers a new caller stream; false when the connection takes no
// new stream.
func (c *fconn) open() (*fstream, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil || c.goaway || len(c.streams) >= maxStreamsPerConn {
		return nil, false
	}
	id := c.nextID
	c.nextID += 2
	if c.nextID > 1<<31 {
		c.goaway = true
	}
	s := c.newStream(id)
	s.head = make(chan head, 1)
	c.streams[id] = s
	return s, true
}

// usable reports whether the connection takes new streams, and how many
// are open.
func (c *fconn) usable() (bool, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err == nil && !c.goaway && len(c.streams) < maxStreamsPerConn, len(c.streams)
}

// writeFrames writes frames under the write lock (fn appends to the
// buffered writer) and flushes them, within framesWriteTimeout; a failed
// write ends the connection.
func (c *fconn) writeFrames(fn func(w *bufio.Writer) error) error {
	c.wmu.Lock()
	if err := c.Err(); err != nil {
		c.wmu.Unlock()
		return err
	}
	// The deadline is renewed at most every half timeout (setting it costs
	// a timer update): a write that makes no progress fails after half to
	// all of framesWriteTimeout.
	if now := time.Now(); now.After(c.renewAt) {
		_ = c.nc.SetWriteDeadline(now.Add(framesWriteTimeout))
		c.renewAt = now.Add(framesWriteTimeout / 2)
	}
	err := fn(c.bw)
	if err == nil {
		err = c.bw.Flush()
	}
	c.wmu.Unlock()
	if err != nil {
		c.fail(fmt.Errorf("peer: write to member %s: %w", c.peer, err))
		return c.Err()
	}
	return nil
}

func (c *fconn) frame(w *bufio.Writer, typ, flags byte, stream uint32, p []byte) error {
	c.hdr = appendFrameHeader(c.hdr[:0], typ, flags, stream, len(p))
	if _, err := w.Write(c.hdr); err != nil {
		return err
	}
	_, err := w.Write(p)
	return err
}

// Err returns why the connection ended (nil while it is up).
func (c *fconn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// fail ends the connection with err (the first error is kept): the
// socket is closed and every stream fails.
func (c *fconn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	streams := c.streams
	c.streams = map[uint32]*fstream{}
	close(c.credit)
	c.credit = make(chan struct{})
	close(c.done)
	c.mu.Unlock()
	_ = c.nc.Close()
	for _, s := range streams {
		s.fail(err)
	}
}

// readLoop reads frames until the connection ends; it returns why.
func (c *fconn) readLoop() error {
	buf := make([]byte, maxDataPayload)
	for {
		h, p, err := readFrame(c.br, buf)
		if err == nil {
			err = c.dispatch(h, p)
		}
		if err != nil {
			if errors.Is(err, errFrameProtocol) {
				c.log.Warn("member connection closed: protocol error", zap.String("peer", c.peer), zap.Error(err))
			}
			if err == io.EOF && c.active() > 0 {
				err = io.ErrUnexpectedEOF // calls were cut off, as an HTTP/1.1 answer's body would be
			}
			c.fail(fmt.Errorf("peer: member connection to %s lost: %w", c.peer, err))
			return c.Err()
		}
	}
}

func (c *fconn) stream(id uint32) *fstream {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[id]
}

func (c *fconn) dispatch(h frameHeader, p []byte) error {
	switch h.typ {
	case frameReq:
		if c.client || h.stream%2 == 0 {
			return fmt.Errorf("%w: call frame on stream %d", errFrameProtocol, h.stream)
		}
		hd, err := parseHead(p, true)
		if err != nil {
			return err
		}
		c.mu.Lock()
		// Calls may arrive out of id order (the caller allocates ids and
		// writes calls on different goroutines): only an open id is refused.
		if c.streams[h.stream] != nil {
			c.mu.Unlock()
			return fmt.Errorf("%w: stream %d reused", errFrameProtocol, h.stream)
		}
		if c.goaway || len(c.streams) >= maxStreamsPerConn {
			c.mu.Unlock()
			c.reset(h.stream, resetRefused, "refused")
			return nil
		}
		s := c.newStream(h.stream)
		s.rend = h.flags&flagEnd != 0
		c.streams[h.stream] = s
		c.mu.Unlock()
		c.onReq(s, hd)
	case frameRes:
		if !c.client {
			return fmt.Errorf("%w: answer frame from a caller", errFrameProtocol)
		}
		hd, err := parseHead(p, false)
		if err != nil {
			return err
		}
		s := c.stream(h.stream)
		if s == nil {
			return nil // the caller gave up the call
		}
		if h.flags&flagEnd != 0 {
			s.rmu.Lock()
			s.rend = true
			s.rmu.Unlock()
		}
		select {
		case s.head <- hd:
		default:
			return fmt.Errorf("%w: two answers on stream %d", errFrameProtocol, h.stream)
		}
	case frameData:
		s := c.stream(h.stream)
		if s == nil {
			c.consumed(len(p)) // a stream already closed: give the credit back
			return nil
		}
		return s.push(p, h.flags&flagEnd != 0)
	case frameReset:
		code, reason, err := parseReset(p)
		if err != nil {
			return err
		}
		if s := c.stream(h.stream); s != nil {
			s.peerReset(code, reason)
		}
	case frameWindow:
		n, err := parseWindow(p)
		if err != nil {
			return err
		}
		c.mu.Lock()
		if h.stream == 0 {
			c.sendConn += int64(n)
		} else if s := c.streams[h.stream]; s != nil {
			s.sendCredit += int64(n)
		}
		close(c.credit)
		c.credit = make(chan struct{})
		c.mu.Unlock()
	case frameGoAway:
		c.mu.Lock()
		c.goaway = true
		c.mu.Unlock()
	}
	return nil
}

// reset sends a RESET of stream (best effort).
func (c *fconn) reset(stream uint32, code uint64, reason string) {
	var b [64]byte
	p := appendReset(b[:0], code, reason)
	_ = c.writeFrames(func(w *bufio.Writer) error { return c.frame(w, frameReset, 0, stream, p) })
}

// consumed grants n bytes read (or dropped) back to the peer's
// connection credit, in batches of a quarter window.
func (c *fconn) consumed(n int) {
	if n <= 0 {
		return
	}
	c.mu.Lock()
	c.unacked += n
	grant := 0
	if c.unacked >= connWindow/4 {
		grant, c.unacked = c.unacked, 0
	}
	c.mu.Unlock()
	if grant > 0 {
		c.window0(0, grant)
	}
}

func (c *fconn) window0(stream uint32, n int) {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(n))
	_ = c.writeFrames(func(w *bufio.Writer) error { return c.frame(w, frameWindow, 0, stream, b[:]) })
}

// goAway tells the caller to open no new stream (callee side).
func (c *fconn) goAway() {
	c.mu.Lock()
	c.goaway = true
	c.mu.Unlock()
	_ = c.writeFrames(func(w *bufio.Writer) error { return c.frame(w, frameGoAway, 0, 0, nil) })
}

// active returns the number of open streams.
func (c *fconn) active() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.streams)
}

// push appends DATA p to the stream's receive buffer (reader goroutine).
func (s *fstream) push(p []byte, end bool) error {
	s.rmu.Lock()
	if s.rerr != nil || s.rend {
		s.rmu.Unlock()
		s.c.consumed(len(p))
		if s.rerr == nil {
			return fmt.Errorf("%w: data after the end of stream %d", errFrameProtocol, s.id)
		}
		return nil
	}
	if len(p) > 0 {
		if s.buf == nil {
			s.buf = bufPool.Get().(*[]byte)
			*s.buf = (*s.buf)[:0]
			s.roff = 0
		}
		b := *s.buf
		if len(b)-s.roff+len(p) > s.c.window {
			s.rmu.Unlock()
			return fmt.Errorf("%w: stream %d sent past its window", errFrameProtocol, s.id)
		}
		if s.roff > 0 && s.roff == len(b) {
			b, s.roff = b[:0], 0
		} else if s.roff > cap(b)/2 {
			b, s.roff = b[:copy(b, b[s.roff:])], 0
		}
		*s.buf = append(b, p...)
	}
	if end {
		s.rend = true
	}
	s.rmu.Unlock()
	select {
	case s.rsig <- struct{}{}:
	default:
	}
	return nil
}

// fail ends the stream's receive side with err (unless it ended already).
func (s *fstream) fail(err error) {
	s.rmu.Lock()
	first := s.rerr == nil
	if first {
		s.rerr = err
		close(s.failed)
	}
	cancel := s.cancel
	s.rmu.Unlock()
	if first {
		select {
		case s.rsig <- struct{}{}:
		default:
		}
		if cancel != nil {
			cancel()
		}
	}
}

// peerReset handles the peer's RESET of the stream.
func (s *fstream) peerReset(code uint64, reason string) {
	s.c.mu.Lock()
	s.stopSend = true
	close(s.c.credit)
	s.c.credit = make(chan struct{})
	s.c.mu.Unlock()
	s.rmu.Lock()
	complete := s.rend
	s.rmu.Unlock()
	if code == resetDone && complete {
		return // the answer is whole: only the call's body stops
	}
	switch code {
	case resetRefused:
		s.fail(errStreamRefused)
	case resetCancel:
		s.fail(fmt.Errorf("peer: the call was cancelled: %s", reason))
	default:
		s.fail(fmt.Errorf("peer: member %s cut the answer off: %s", s.c.peer, reason))
	}
}

// read reads from the stream's receive buffer, waiting for bytes; io.EOF
// after the peer's end.
func (s *fstream) read(p []byte) (int, error) {
	for {
		s.rmu.Lock()
		if s.buf != nil && s.roff < len(*s.buf) {
			n := copy(p, (*s.buf)[s.roff:])
			s.roff += n
			s.unacked += n
			grant := 0
			if !s.rend && s.unacked >= s.c.window/2 {
				grant, s.unacked = s.unacked, 0
			}
			s.rmu.Unlock()
			if grant > 0 {
				s.c.window0(s.id, grant)
			}
			s.c.consumed(n)
			return n, nil
		}
		if s.rend { // whole: a failure after it changes nothing
			s.rmu.Unlock()
			return 0, io.EOF
		}
		if s.rerr != nil {
			err := s.rerr
			s.rmu.Unlock()
			return 0, err
		}
		s.rmu.Unlock()
		<-s.rsig
	}
}

// release unregisters the stream and frees its buffer, granting the
// bytes never read back to the connection. It returns whether the
// stream had ended cleanly (its peer's end seen, nothing failed).
func (s *fstream) release() (complete bool) {
	c := s.c
	c.mu.Lock()
	if s.closed {
		c.mu.Unlock()
		return true
	}
	s.closed = true
	if c.streams[s.id] == s {
		delete(c.streams, s.id)
	}
	c.mu.Unlock()
	s.rmu.Lock()
	left := 0
	if s.buf != nil {
		left = len(*s.buf) - s.roff
		if cap(*s.buf) <= 64<<10 {
			*s.buf = (*s.buf)[:0]
			bufPool.Put(s.buf)
		}
		s.buf, s.roff = nil, 0
	}
	complete = s.rend && s.rerr == nil
	if s.rerr == nil {
		s.rerr = errConnClosed
		close(s.failed)
	}
	s.rmu.Unlock()
	select {
	case s.rsig <- struct{}{}:
	default:
	}
	c.consumed(left)
	return complete
}

// sendData sends p on the stream within its and the connection's credit
// (flagEnd on the last frame when end), waiting for credit until ctx
// ends. before, when set, is written ahead of the first frame in the same
// flush (the answer's start).
func (s *fstream) sendData(ctx context.Context, before func(w *bufio.Writer) error, p []byte, end bool) error {
	c := s.c
	for {
		n := 0
		if len(p) > 0 {
			c.mu.Lock()
			for {
				if c.err != nil {
					err := c.err
					c.mu.Unlock()
					return err
				}
				if s.stopSend {
					c.mu.Unlock()
					return errStopSend
				}
				if s.sendCredit > 0 && c.sendConn > 0 {
					break
				}
				ch := c.credit
				c.mu.Unlock()
				select {
				case <-ch:
				case <-ctx.Done():
					return context.Cause(ctx)
				}
				c.mu.Lock()
			}
			n = int(min(int64(len(p)), int64(maxDataPayload), s.sendCredit, c.sendConn))
			s.sendCredit -= int64(n)
			c.sendConn -= int64(n)
			c.mu.Unlock()
		}
		last := n == len(p)
		chunk := p[:n]
		b := before
		before = nil
		if !last || end || n > 0 || b != nil {
			var flags byte
			if last && end {
				flags = flagEnd
			}
			err := c.writeFrames(func(w *bufio.Writer) error {
				if b != nil {
					if err := b(w); err != nil {
						return err
					}
				}
				if n == 0 && flags == 0 {
					return nil
				}
				return c.frame(w, frameData, flags, s.id, chunk)
			})
			if err != nil {
				return err
			}
		}
		p = p[n:]
		if last {
			return nil
		}
	}
}

// errStopSend: the peer reset the stream, nothing more is sent on it.
var errStopSend = errors.New("peer: the member stopped reading this call")
