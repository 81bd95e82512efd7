package realtime

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Read while you write (SPEC §8.7: a server that receives round bytes
// while an answer is in flight must not process them; synclane closes the
// socket, 1008 "pipelining"). The socket's reader runs on its own
// goroutine, but a busy writer can keep it from running: on a loaded
// machine a whole answer was written before the reader saw a second
// request that had arrived after the answer's first chunk, which was then
// served as the next round. So a round's writer checks, before each chunk,
// that the reader has caught up (session.caughtUp): it is waiting on the
// network having handled every byte received before (readWatch.idle), and
// the kernel holds nothing more for it (unread). If not, the writer waits
// for the reader's next wait on the network (readWatch.tick) and checks
// again; a pipelined request has closed the socket by then. A chunk thus
// never goes out after bytes that arrived before it were left unread.
// Bytes that arrive after the last check before END are indistinguishable
// from the client's next round, and are served as one.

// readWatch follows a socket's reads from the connection's side.
type readWatch struct {
	// idle is set while the reader waits on the network, every byte read
	// before handled (it is set before each read from the network, which
	// happens once the WebSocket's read buffer is empty, and cleared when
	// one returns data).
	idle atomic.Bool
	// tick is sent to (without blocking) each time the reader starts to
	// wait on the network.
	tick chan struct{}
	// raw is the connection the kernel receives on, for unread (nil
	// before the hijack).
	raw net.Conn
	// conn is the socket's watched connection (nil before the hijack).
	conn *watchedConn
}

// wrap returns conn with its reads watched by w; head are bytes read
// ahead of the handshake's end (by net/http), read before the network.
func (w *readWatch) wrap(conn net.Conn, head []byte) *watchedConn {
	raw := conn
	if nc, ok := conn.(interface{ NetConn() net.Conn }); ok { // TLS: the socket under it
		raw = nc.NetConn()
	}
	w.raw = raw
	c := &watchedConn{Conn: conn, w: w, pend: head}
	if raw == conn { // not TLS: the kernel's bytes are the socket's bytes
		c.raw = newRawReader(conn)
	}
	w.conn = c
	return c
}

// watchedConn is a socket's connection as its WebSocket reads it. With a
// raw reader (see sockbuf.go) it reads the network into a pooled buffer
// once the kernel has bytes, and holds that buffer only while bytes the
// WebSocket has not taken are in it; otherwise its reads go to Conn.
// Read is called by the socket's reader only (coder/websocket's read
// lock).
//
// An idle socket's reader waits in park, not inside coder/websocket: the
// frames of coder/websocket's read path (about 2 KiB) would keep every
// idle reader's stack at 4 KiB, where a wait at the top of the reader's
// loop lets the runtime shrink it to its 2 KiB minimum. So while the
// reader waits for the next message (shallow set, session.readMessage),
// a read at a frame boundary with nothing pending returns errPark at once
// (coder/websocket's Reader returns it and keeps the connection as it
// was: the error comes before any byte of a frame); the reader then waits
// for the network in park and asks for the message again.
type watchedConn struct {
	net.Conn
	w *readWatch
	// mu serializes reads: the reader's, and coder/websocket's close
	// handshake, which reads the peer's close frame on its own goroutine
	// while the reader is parked.
	mu sync.Mutex
	// pend are bytes taken from the network (or read ahead by net/http)
	// that the WebSocket has not read yet; buf is the pooled buffer they
	// are in (nil: not pooled).
	pend []byte
	buf  *[netReadBuf]byte
	raw  *rawReader
	// frames follows the frames of the bytes handed out: whether the
	// WebSocket stands at a frame boundary.
	frames frameTracker
	// shallow asks for errPark instead of a wait (taken by the read that
	// returns it).
	shallow atomic.Bool
}

// errPark is returned by a watchedConn read that would wait on the
// network at a frame boundary while the reader asked for it (shallow).
var errPark = errors.New("realtime: nothing to read yet")

func (c *watchedConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pend) > 0 {
		n := copy(p, c.pend)
		c.frames.advance(c.pend[:n])
		c.pend = c.pend[n:]
		if len(c.pend) == 0 {
			c.release()
		}
		return n, nil
	}
	if c.raw != nil && c.frames.boundary() && c.shallow.CompareAndSwap(true, false) {
		return 0, errPark
	}
	c.waiting()
	var n int
	var err error
	switch {
	case c.raw == nil:
		n, err = c.Conn.Read(p)
	case len(p) >= netReadDirect:
		n, _, err = c.raw.read(p)
	default:
		var buf *[netReadBuf]byte
		var m int
		m, buf, err = c.raw.read(nil)
		if m > 0 {
			n = copy(p, buf[:m])
			if n < m {
				c.buf, c.pend = buf, buf[n:m]
			} else {
				readBufs.Put(buf)
			}
		}
	}
	if n > 0 {
		c.frames.advance(p[:n])
		c.w.idle.Store(false)
	}
	return n, err
}

// waiting records that the reader waits on the network, every byte before
// handled.
func (c *watchedConn) waiting() {
	c.w.idle.Store(true)
	select {
	case c.w.tick <- struct{}{}:
	default:
	}
}

// park waits until the network has bytes for the socket (or the
// connection ended: its error) and keeps them for the next read. The
// reader calls it after errPark, from the top of its loop.
func (c *watchedConn) park() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pend) > 0 { // read meanwhile (by a close handshake)
		return nil
	}
	c.waiting()
	n, buf, err := c.raw.read(nil)
	if n > 0 {
		c.buf, c.pend = buf, buf[:n]
		c.w.idle.Store(false)
		return nil
	}
	return err
}

// frameTracker follows WebSocket frames (a client's: masked) through the
// bytes of a stream.
type frameTracker struct {
	hdr  [14]byte
	nhdr int    // header bytes of the current frame seen (0: none yet)
	left uint64 // payload bytes of the current frame still to come
}

// boundary reports whether the bytes so far end a frame.
func (t *frameTracker) boundary() bool { return t.nhdr == 0 && t.left == 0 }

// advance takes the stream's next bytes.
func (t *frameTracker) advance(b []byte) {
	for len(b) > 0 {
		if t.left > 0 {
			k := min(uint64(len(b)), t.left)
			t.left -= k
			b = b[k:]
			continue
		}
		t.hdr[t.nhdr] = b[0]
		t.nhdr++
		b = b[1:]
		if t.nhdr < 2 {
			continue
		}
		need := 2
		switch t.hdr[1] & 0x7f {
		case 126:
			need += 2
		case 127:
			need += 8
		}
		if t.hdr[1]&0x80 != 0 {
			need += 4
		}
		if t.nhdr < need {
			continue
		}
		switch l := t.hdr[1] & 0x7f; l {
		case 126:
			t.left = uint64(binary.BigEndian.Uint16(t.hdr[2:4]))
		case 127:
			t.left = binary.BigEndian.Uint64(t.hdr[2:10])
		default:
			t.left = uint64(l)
		}
		t.nhdr = 0
	}
}

// release gives the pooled read buffer back (c.mu held).
func (c *watchedConn) release() {
	if c.buf != nil {
		readBufs.Put(c.buf)
		c.buf = nil
	}
	c.pend = nil
}

// caughtUp returns once the socket's reader has taken every byte the
// client sent so far, or at once when the socket's reads are not watched
// (round goroutine; see above). It returns errShutting when the socket is
// closing: the answer stops there, and the close frame goes out after the
// chunk being written, not after the rest of the answer. A reader that
// does not catch up within the write timeout (a client streaming control
// messages without pause) does not hold the answer longer.
func (s *session) caughtUp() error {
	w := &s.watch
	var timer *time.Timer
	for {
		if s.shutting.Load() || s.ctx.Err() != nil {
			return errShutting
		}
		if w.raw == nil {
			return nil
		}
		select {
		case <-w.tick:
		default:
		}
		if w.idle.Load() && !unread(w.raw) {
			return nil
		}
		if timer == nil {
			s.h.stats.roundReaderWaits.Add(1)
			timer = time.NewTimer(s.h.opts.WriteTimeout)
			defer timer.Stop()
		}
		select {
		case <-w.tick:
		case <-s.ctx.Done():
		case <-timer.C:
			return nil
		}
	}
}

// errShutting stops an answer whose socket is being closed.
var errShutting = errors.New("realtime: the socket is closing")
