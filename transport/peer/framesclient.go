package peer

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ProtocolFrames is the frames member transport (frames.go): one
// long-lived connection per member pair (more only past
// maxStreamsPerConn calls in flight, up to maxConnsPerPair) carrying every
// call as a stream of binary frames.
const ProtocolFrames = "frames"

const (
	// pathFrames is the upgrade route of the frames transport.
	pathFrames = "/_cluster/v1/frames"
	// framesUpgrade is its Upgrade token.
	framesUpgrade = "synclane-frames/1"
	// windowHeader carries the stream window the caller announces.
	windowHeader = "Synclane-Frames-Window"
	// maxConnsPerPair caps the frames connections from one member to
	// another; a call finding them all at maxStreamsPerConn travels over
	// HTTP/1.1 instead.
	maxConnsPerPair = 4
)

var (
	// errNoFrames: the member does not serve the frames route (a member
	// older than it answers 404); the call travels over HTTP/1.1.
	errNoFrames = errors.New("peer: the member does not serve the frames transport")
	// errFramesBusy: every connection to the member is at its stream cap.
	errFramesBusy = errors.New("peer: every frames connection to the member is busy")
)

// framesPool is a client's frames connections, by member.
type framesPool struct {
	c *Client

	mu      sync.Mutex
	closed  bool
	members map[string]*framesMember
	wg      sync.WaitGroup // the connections' reader goroutines

	dials, dialFailures, fallbacks atomic.Int64
	open                           atomic.Int64
}

type framesMember struct {
	conns    []*fconn
	dialing  chan struct{} // closed when the dial in flight ends; nil when none
	dialErr  error         // the last dial's error
	noFrames time.Time     // when the member last answered 404 to the upgrade
}

// noFramesRetry is how long a member that answered 404 to the upgrade is
// called over HTTP/1.1 before the upgrade is tried again (it may have
// been upgraded meanwhile).
const noFramesRetry = time.Minute

func newFramesPool(c *Client) *framesPool {
	return &framesPool{c: c, members: map[string]*framesMember{}}
}

// get returns a connection to member to with room for a call, dialing one
// when none has (single-flight per member).
func (p *framesPool) get(ctx context.Context, to string) (*fconn, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, errConnClosed
		}
		m := p.members[to]
		if m == nil {
			m = &framesMember{}
			p.members[to] = m
		}
		if !m.noFrames.IsZero() && time.Since(m.noFrames) < noFramesRetry {
			p.mu.Unlock()
			return nil, errNoFrames
		}
		var best *fconn
		bestN := 0
		live := m.conns[:0]
		for _, c := range m.conns {
			if c.Err() != nil {
				continue
			}
			live = append(live, c)
			if ok, n := c.usable(); ok && (best == nil || n < bestN) {
				best, bestN = c, n
			}
		}
		clear(m.conns[len(live):])
		m.conns = live
		if best != nil {
			p.mu.Unlock()
			return best, nil
		}
		if len(m.conns) >= maxConnsPerPair {
			p.mu.Unlock()
			return nil, errFramesBusy
		}
		ch := m.dialing
		if ch == nil {
			ch = make(chan struct{})
			m.dialing = ch
			p.wg.Add(1)
			go p.dialFor(to, m, ch) // owned by p: ends within the dial timeout or at close
		}
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		p.mu.Lock()
		err := m.dialErr
		p.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
}

// dialFor dials member to for m and records the outcome.
func (p *framesPool) dialFor(to string, m *framesMember, done chan struct{}) {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), max(p.c.opts.UnresponsiveTimeout, time.Second))
	stop := context.AfterFunc(p.ctxClosed(), cancel)
	c, err := p.dial(ctx, to)
	stop()
	cancel()
	p.dials.Add(1)
	p.mu.Lock()
	m.dialing, m.dialErr = nil, err
	switch {
	case errors.Is(err, errNoFrames):
		m.noFrames = time.Now()
	case err != nil:
		p.dialFailures.Add(1)
	case p.closed:
		c.fail(errConnClosed)
	default:
		m.noFrames = time.Time{}
		m.conns = append(m.conns, c)
		p.open.Add(1)
		p.wg.Add(1)
		go func() { // owned by p: ends when the connection does (Close fails it)
			defer p.wg.Done()
			_ = c.readLoop()
			p.open.Add(-1)
		}()
	}
	p.mu.Unlock()
	close(done)
}

// ctxClosed returns a context that ends when the pool closes.
func (p *framesPool) ctxClosed() context.Context { return p.c.live.ctx }

// dial opens a frames connection to member to: a signed upgrade request,
// answered 101 by a member that accepts the signature.
func (p *framesPool) dial(ctx context.Context, to string) (*fconn, error) {
	u, err := url.Parse(strings.TrimRight(to, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("peer: member %q is not an http(s) URL", to)
	}
	addr := u.Host
	if u.Port() == "" {
		if u.Scheme == "https" {
			addr = net.JoinHostPort(u.Hostname(), "443")
		} else {
			addr = net.JoinHostPort(u.Hostname(), "80")
		}
	}
	d := &net.Dialer{KeepAlive: 15 * time.Second}
	var nc net.Conn
	if u.Scheme == "https" {
		td := &tls.Dialer{NetDialer: d, Config: &tls.Config{ServerName: u.Hostname(), NextProtos: []string{"http/1.1"}}}
		nc, err = td.DialContext(ctx, "tcp", addr)
	} else {
		nc, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String()+pathFrames, nil)
	if err != nil {
		_ = nc.Close()
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", framesUpgrade)
	req.Header.Set(windowHeader, strconv.Itoa(p.c.opts.MaxReceiveBufferPerStream))
	p.c.Sign(req)
	if err := req.Write(nc); err != nil {
		_ = nc.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(nc, 32<<10)
	res, err := http.ReadResponse(br, req)
	if err != nil {
		_ = nc.Close()
		return nil, err
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
		_ = res.Body.Close()
		_ = nc.Close()
		switch res.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return nil, refusalError(to, res.StatusCode, b)
		}
		// A member older than the frames transport (404, or 405: its
		// member routes are POST), or one not serving it now (503 while
		// it stops): its calls travel over HTTP/1.1 for a while.
		return nil, fmt.Errorf("%w: %s answered the frames upgrade HTTP %d: %.200s", errNoFrames, to, res.StatusCode, b)
	}
	if !strings.EqualFold(res.Header.Get("Upgrade"), framesUpgrade) {
		_ = nc.Close()
		return nil, fmt.Errorf("peer: %s upgraded to %q, not %s", to, res.Header.Get("Upgrade"), framesUpgrade)
	}
	if stop() {
		_ = nc.SetDeadline(time.Time{})
	} else {
		_ = nc.Close()
		return nil, context.Cause(ctx)
	}
	return newFconn(nc, br, true, p.c.opts.MaxReceiveBufferPerStream, to, p.c.opts.Logger), nil
}

// close fails every connection and waits for their readers.
func (p *framesPool) close() {
	p.mu.Lock()
	p.closed = true
	var conns []*fconn
	for _, m := range p.members {
		conns = append(conns, m.conns...)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.fail(errConnClosed)
	}
	p.wg.Wait()
}

// roundTrip sends a call (path, hdr, body) to member to on a frames
// connection and returns its answer once it starts (within
// ClientOptions.Timeout; ctx ending cancels the call at the callee). The
// answer's body streams; closing it before its end cancels the rest.
// errNoFrames and errFramesBusy: nothing was sent, call over HTTP/1.1.
func (p *framesPool) roundTrip(ctx context.Context, to, path string, hdr http.Header, body []byte) (*http.Response, error) {
	var s *fstream
	var c *fconn
	for attempt := 0; ; attempt++ {
		var err error
		c, err = p.get(ctx, to)
		if err != nil {
			return nil, err
		}
		var ok bool
		if s, ok = c.open(); ok {
			break
		}
		if attempt == 2 {
			return nil, errFramesBusy
		}
	}
	stop := context.AfterFunc(ctx, func() {
		s.fail(context.Cause(ctx))
		c.reset(s.id, resetCancel, "the caller gave up")
	})
	fail := func(err error) (*http.Response, error) {
		stop()
		if !s.release() && c.Err() == nil {
			c.reset(s.id, resetCancel, "the caller gave up")
		}
		return nil, err
	}
	hb := appendHead(make([]byte, 0, 256+len(path)), true, &head{path: path, header: hdr})
	var err error
	if len(body) == 0 {
		err = c.writeFrames(func(w *bufio.Writer) error { return c.frame(w, frameReq, flagEnd, s.id, hb) })
	} else {
		err = s.sendData(ctx, func(w *bufio.Writer) error { return c.frame(w, frameReq, 0, s.id, hb) }, body, true)
		if errors.Is(err, errStopSend) {
			err = nil // the callee answered without reading all of it
		}
	}
	if err != nil {
		return fail(s.cause(err))
	}
	t := time.NewTimer(p.c.opts.Timeout)
	defer t.Stop()
	select {
	case hd := <-s.head:
		return &http.Response{StatusCode: hd.status, Header: hd.header, ContentLength: hd.size,
			Body: &framesBody{s: s, stop: stop}}, nil
	case <-s.failed:
		select {
		case hd := <-s.head: // the answer came with the failure (a short answer, then the connection ended)
			return &http.Response{StatusCode: hd.status, Header: hd.header, ContentLength: hd.size,
				Body: &framesBody{s: s, stop: stop}}, nil
		default:
		}
		return fail(s.cause(nil))
	case <-t.C:
		return fail(fmt.Errorf("peer: %s: no answer started within %v", to, p.c.opts.Timeout))
	}
}

// cause returns the stream's failure (else err).
func (s *fstream) cause(err error) error {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if s.rerr != nil {
		return s.rerr
	}
	return err
}

// framesBody is an answer's body.
type framesBody struct {
	s    *fstream
	stop func() bool
	done bool
}

func (b *framesBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.s.read(p)
	if err == io.EOF {
		b.done = true
		b.stop()
		b.s.release()
	}
	return n, err
}

func (b *framesBody) Close() error {
	b.stop()
	if !b.s.release() && !b.done && b.s.c.Err() == nil {
		b.s.c.reset(b.s.id, resetCancel, "the caller closed the answer")
	}
	b.done = true
	return nil
}
