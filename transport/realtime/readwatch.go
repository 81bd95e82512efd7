package realtime

import (
	"errors"
	"net"
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
}

// wrap returns conn with its reads watched by w.
func (w *readWatch) wrap(conn net.Conn) net.Conn {
	raw := conn
	if nc, ok := conn.(interface{ NetConn() net.Conn }); ok { // TLS: the socket under it
		raw = nc.NetConn()
	}
	w.raw = raw
	return &watchedConn{Conn: conn, w: w}
}

// watchedConn is a socket's connection as its WebSocket reads it.
type watchedConn struct {
	net.Conn
	w *readWatch
}

func (c *watchedConn) Read(p []byte) (int, error) {
	c.w.idle.Store(true)
	select {
	case c.w.tick <- struct{}{}:
	default:
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.w.idle.Store(false)
	}
	return n, err
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
