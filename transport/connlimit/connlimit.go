// Package connlimit caps the open connections of an HTTP listener, so one
// client opening connections cannot take the process's file descriptors
// from everyone else.
//
// A Listener wraps a net.Listener and counts every connection it hands out
// until that connection is closed (an upgraded WebSocket keeps counting
// after its hijack: the hijacker closes the same net.Conn). When the cap is
// reached, a new connection first evicts the oldest connection that is idle
// (a keep-alive connection between requests, or one that has not sent a
// byte yet), as reported by http.Server.ConnState; idle connections are the
// cheapest to drop (a client reconnects). When none is idle, the new
// connection is answered with a minimal HTTP/1.1 503 carrying the
// protocol's sync.rate_limited error and Retry-After as soon as its request
// head arrived, and closed: never a hang. Reading the head and writing the
// answer each have a short deadline, and at most MaxRefusing
// refusals are being written at a time (more are closed without an
// answer), so clients that do not read cannot pin descriptors.
package connlimit

import (
	"bytes"
	"container/list"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/httperr"
)

// Defaults of Options.
const (
	DefaultRefuseTimeout = time.Second
	DefaultMaxRefusing   = 64
	DefaultRetryAfter    = time.Second
)

// Options configure a Listener.
type Options struct {
	// Max is the most connections open at once; 0 or negative: no cap
	// (they are still counted).
	Max int
	// RefuseTimeout bounds reading a refused connection's request head,
	// and then again writing the 503 and reading what else it sent
	// (default DefaultRefuseTimeout).
	RefuseTimeout time.Duration
	// MaxRefusing bounds the refused connections being answered at once
	// (default DefaultMaxRefusing); beyond it a refused connection is
	// closed without an answer.
	MaxRefusing int
	// RetryAfter is the refusal's Retry-After (default DefaultRetryAfter,
	// rounded up to whole seconds).
	RetryAfter time.Duration
	// Logger receives the listener's logs (default: no-op).
	Logger *zap.Logger
}

// Listener is a net.Listener with a cap on its open connections. Set its
// ConnState as the http.Server's ConnState (or call it from the server's
// own), so it knows which connections are idle; without it nothing is
// evicted and the cap refuses.
type Listener struct {
	net.Listener
	opts   Options
	answer []byte // the refusal, whole

	mu   sync.Mutex
	open int
	idle *list.List // of *conn, idle longest first

	refusing chan struct{}
	wg       sync.WaitGroup

	accepted, refused, evicted atomic.Uint64
}

// New wraps ln.
func New(ln net.Listener, opts Options) *Listener {
	if opts.RefuseTimeout <= 0 {
		opts.RefuseTimeout = DefaultRefuseTimeout
	}
	if opts.MaxRefusing <= 0 {
		opts.MaxRefusing = DefaultMaxRefusing
	}
	if opts.RetryAfter <= 0 {
		opts.RetryAfter = DefaultRetryAfter
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &Listener{Listener: ln, opts: opts, answer: refusal(opts.Max, opts.RetryAfter), idle: list.New(),
		refusing: make(chan struct{}, opts.MaxRefusing)}
}

// refusal is the whole HTTP/1.1 answer of a connection over the cap.
func refusal(maxConns int, retryAfter time.Duration) []byte {
	sec := int64((retryAfter + time.Second - 1) / time.Second)
	e := syncerr.New(syncerr.RateLimited, "this server holds its maximum of %d open connections; retry in %d s", maxConns, sec).
		WithDetails(map[string]any{"retryAfterMs": sec * 1000, "retryAfterSec": sec, "reason": "connection_limit"})
	spec := e.Spec()
	body, _ := json.Marshal(httperr.Body{Code: string(e.Code), Category: spec.Category, Retryable: spec.Retryable,
		RecommendedAction: spec.RecommendedAction, Message: e.Message, Details: e.Details})
	body = append(body, '\n')
	return fmt.Appendf(nil, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nCache-Control: no-store\r\n"+
		"Retry-After: %d\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", sec, len(body), body)
}

// Accept returns the next connection within the cap; connections over it
// are answered and closed here (see the package doc) and never returned.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if wc := l.admit(c); wc != nil {
			l.accepted.Add(1)
			return wc, nil
		}
		if n := l.refused.Add(1); n == 1 || n%10_000 == 0 {
			l.opts.Logger.Warn("connection cap reached: new connections are refused with 503 until some close",
				zap.Int("max_connections", l.opts.Max), zap.Uint64("refused_total", n))
		}
		l.refuse(c)
	}
}

// admit counts c in, evicting the oldest idle connection when the cap is
// reached; nil when there is no room.
func (l *Listener) admit(c net.Conn) net.Conn {
	var victim *conn
	l.mu.Lock()
	if l.opts.Max > 0 && l.open >= l.opts.Max {
		if e := l.idle.Front(); e != nil {
			victim = e.Value.(*conn)
			l.releaseLocked(victim)
		}
	}
	admitted := l.opts.Max <= 0 || l.open < l.opts.Max
	if admitted {
		l.open++
	}
	l.mu.Unlock()
	if victim != nil {
		l.evicted.Add(1)
		_ = victim.Conn.Close() // its server goroutine sees the read fail and ends
	}
	if !admitted {
		return nil
	}
	return &conn{Conn: c, l: l}
}

// releaseLocked stops counting c (once). Called with l.mu held.
func (l *Listener) releaseLocked(c *conn) {
	if c.released {
		return
	}
	c.released = true
	l.open--
	if c.elem != nil {
		l.idle.Remove(c.elem)
		c.elem = nil
	}
}

// refuse answers c with the 503 and closes it, on a goroutine Close waits
// for (or closes it at once when MaxRefusing answers are being written).
func (l *Listener) refuse(c net.Conn) {
	select {
	case l.refusing <- struct{}{}:
	default:
		_ = c.Close()
		return
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer func() { <-l.refusing }()
		defer c.Close()
		// Read the request's head first: an HTTP client takes bytes that
		// arrive before its request was written for an unsolicited
		// answer and fails the request instead of reading the 503.
		_ = c.SetDeadline(time.Now().Add(l.opts.RefuseTimeout))
		readHead(c)
		_ = c.SetDeadline(time.Now().Add(l.opts.RefuseTimeout))
		if _, err := c.Write(l.answer); err != nil {
			return
		}
		// Half-close, then read what the client sent until it closes (or
		// the deadline): closing with unread bytes would reset the
		// connection and could discard the answer before it is read.
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}()
}

// maxHead bounds what readHead reads.
const maxHead = 16 << 10

// readHead reads from c until the end of an HTTP request head (an empty
// line), maxHead bytes, an error or the deadline.
func readHead(c net.Conn) {
	buf := make([]byte, 0, 4<<10)
	tmp := make([]byte, 4<<10)
	for len(buf) < maxHead {
		n, err := c.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if bytes.Contains(buf, []byte("\r\n\r\n")) || err != nil {
			return
		}
	}
}

// Close closes the listener and waits for the refusals being answered
// (each within twice RefuseTimeout). Connections already accepted stay open.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	l.wg.Wait()
	return err
}

// ConnState tracks which connections are idle, for eviction: pass it as
// http.Server.ConnState. A connection is idle while new (no byte of a
// request read yet) or between requests; it is active while serving one,
// and no longer tracked once hijacked (it still counts until closed).
func (l *Listener) ConnState(nc net.Conn, st http.ConnState) {
	c := unwrap(nc)
	if c == nil || c.l != l {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.released {
		return
	}
	if c.elem != nil {
		l.idle.Remove(c.elem)
		c.elem = nil
	}
	if st == http.StateNew || st == http.StateIdle {
		c.elem = l.idle.PushBack(c)
	}
}

// unwrap finds the Listener's conn under nc (a *tls.Conn wraps it).
func unwrap(nc net.Conn) *conn {
	for range 4 {
		switch v := nc.(type) {
		case *conn:
			return v
		case interface{ NetConn() net.Conn }:
			nc = v.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// Stats are a Listener's counters.
type Stats struct {
	// Open is the connections counted now (idle ones among them), Max
	// the cap (0: none).
	Open, Idle, Max int
	// Accepted, Refused (answered 503 or closed over the cap) and Evicted
	// (idle connections closed to admit a new one) since New.
	Accepted, Refused, Evicted uint64
}

// Stats returns the listener's counters.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	st := Stats{Open: l.open, Idle: l.idle.Len(), Max: max(l.opts.Max, 0)}
	l.mu.Unlock()
	st.Accepted, st.Refused, st.Evicted = l.accepted.Load(), l.refused.Load(), l.evicted.Load()
	return st
}

// conn is a counted connection.
type conn struct {
	net.Conn
	l *Listener
	// guarded by l.mu
	released bool
	elem     *list.Element // in l.idle while idle
}

// Close closes the connection and stops counting it.
func (c *conn) Close() error {
	c.l.mu.Lock()
	c.l.releaseLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// NetConn returns the underlying connection.
func (c *conn) NetConn() net.Conn { return c.Conn }
