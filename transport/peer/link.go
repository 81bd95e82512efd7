package peer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/httperr"
)

// Timeouts of the follow link.
const (
	// linkWriteTimeout closes a link when one message cannot be written
	// within it (the peer is not reading).
	linkWriteTimeout = 10 * time.Second
	// linkHelloTimeout bounds a dial (or an upgrade) until the peer's hello.
	linkHelloTimeout = 10 * time.Second
	// minBackoff and maxBackoff bound the wait before re-dialing a failed
	// link (doubling from the first to the second; reset once a link
	// stayed up for stableLink).
	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second
	stableLink = 10 * time.Second
	// linkPingInterval and linkPingTimeout: both sides ping the link; a
	// pong that does not come back in time closes it (a peer gone without
	// a close, or one whose relay stopped reading).
	linkPingInterval = 15 * time.Second
	linkPingTimeout  = 10 * time.Second
)

// link is one follow-link connection, either way: a send queue drained by
// its writer goroutine, and the reader run by whoever owns the
// connection (the dialer's goroutine, or ServeHTTP). The writer alone
// closes the connection, when the link fails (fail) or the relay closes.
type link struct {
	r    *Relay
	peer string // the other member
	conn *websocket.Conn
	log  *zap.Logger

	ctx    context.Context // ends when the link fails
	cancel context.CancelFunc

	mu       sync.Mutex
	queue    []queued
	qbytes   int // bytes of the live messages queued
	nbulk    int // bulk messages queued
	failed   bool
	reason   string
	signal   chan struct{}
	finished chan struct{} // closed when the writer has closed the connection
}

// queued is one message waiting in a link's send queue.
type queued struct {
	b    []byte
	bulk bool
}

func (r *Relay) newLink(parent context.Context, conn *websocket.Conn, peer string) *link {
	ctx, cancel := context.WithCancel(parent)
	return &link{r: r, peer: peer, conn: conn, ctx: ctx, cancel: cancel,
		log: r.log.With(zap.String("peer", peer)), signal: make(chan struct{}, 1), finished: make(chan struct{})}
}

// send queues an encoded message; it never blocks. Live messages (bulk
// false: relayed hooks and presence changes) are bounded: a queue already
// holding QueueMessages of them, or QueueBytes of their bytes, fails the
// link (overflow: the peer is not keeping up; a follower re-dials and
// starts over, see RelayLimits). Bulk messages (a link's resync: follows
// and unfollows, follow answers with their presence snapshots and seqs)
// are not counted: their number follows the state they carry, which is
// bounded already (FollowsPerLink, PresencePerPartition), and a resync of
// many partitions must not overflow the link it resyncs. false when the
// message was not queued.
func (l *link) send(b []byte, bulk bool) bool {
	lim := &l.r.lim
	l.mu.Lock()
	if l.failed {
		l.mu.Unlock()
		l.r.stats.dropped.Add(1)
		return false
	}
	if !bulk && (len(l.queue)-l.nbulk >= lim.QueueMessages || l.qbytes+len(b) > lim.QueueBytes) {
		n, nb := len(l.queue)-l.nbulk, l.qbytes
		l.mu.Unlock()
		l.r.stats.overflows.Add(1)
		l.r.stats.dropped.Add(1)
		l.log.Warn("cluster follow link closed: send queue full", zap.Int("queued_messages", n), zap.Int("queued_bytes", nb))
		l.fail("send queue overflow")
		return false
	}
	l.queue = append(l.queue, queued{b: b, bulk: bulk})
	if bulk {
		l.nbulk++
	} else {
		l.qbytes += len(b)
	}
	l.mu.Unlock()
	select {
	case l.signal <- struct{}{}:
	default:
	}
	return true
}

// sendMsg encodes m and sends it as a bulk message (a message over
// MessageBytes is dropped and logged: the peer would close the link on
// it).
func (l *link) sendMsg(m *message) bool {
	b, err := encode(m, l.r.lim.MessageBytes)
	if err != nil {
		l.r.stats.dropped.Add(1)
		l.log.Error("cluster message not sent", zap.String("op", m.Op), zap.String("partition", m.P), zap.Error(err))
		return false
	}
	return l.send(b, true)
}

func encode(m *message, max int64) ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("peer: %s message of %d bytes is over the %d-byte limit", m.Op, len(b), max)
	}
	return b, nil
}

// fail ends the link (the first reason is kept, for the logs): the
// queue is dropped, the reader and the writer stop and the connection is
// closed (without a close handshake: the peer may not be reading). It
// never blocks.
func (l *link) fail(reason string) {
	l.mu.Lock()
	if l.failed {
		l.mu.Unlock()
		return
	}
	l.failed = true
	l.reason = reason
	l.queue, l.qbytes, l.nbulk = nil, 0, 0
	l.mu.Unlock()
	l.cancel()
}

// failure returns the reason fail was called with ("" while the link is
// up).
func (l *link) failure() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reason
}

// writeLoop writes queued messages until the link fails or the relay
// closes, then closes the connection.
func (l *link) writeLoop() {
	defer close(l.finished)
	defer func() { _ = l.conn.CloseNow() }()
	for {
		l.mu.Lock()
		for !l.failed && len(l.queue) == 0 && l.ctx.Err() == nil {
			l.mu.Unlock()
			select {
			case <-l.signal:
			case <-l.ctx.Done():
			}
			l.mu.Lock()
		}
		if l.failed || l.ctx.Err() != nil {
			l.mu.Unlock()
			return
		}
		q := l.queue[0]
		l.queue[0] = queued{}
		l.queue = l.queue[1:]
		if q.bulk {
			l.nbulk--
		} else {
			l.qbytes -= len(q.b)
		}
		b := q.b
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(l.ctx, linkWriteTimeout)
		err := l.conn.Write(ctx, websocket.MessageText, b)
		cancel()
		if err != nil {
			if l.ctx.Err() == nil {
				l.log.Warn("cluster follow link write failed", zap.Error(err))
			}
			l.fail("write failed")
			return
		}
		l.r.stats.sent.Add(1)
	}
}

// pingLoop pings the peer until the link ends; a missing pong fails it.
func (l *link) pingLoop() {
	t := time.NewTicker(linkPingInterval)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(l.ctx, linkPingTimeout)
		err := l.conn.Ping(ctx)
		cancel()
		if err != nil {
			if l.ctx.Err() == nil {
				l.log.Warn("cluster follow link closed: no pong", zap.Duration("ping_timeout", linkPingTimeout), zap.Error(err))
				l.fail("no pong")
			}
			return
		}
	}
}

// start runs the link's writer and pinger; false (the connection closed)
// when the relay is closing.
func (l *link) start() bool {
	if !l.r.spawn(l.writeLoop) {
		_ = l.conn.CloseNow()
		return false
	}
	l.r.spawn(l.pingLoop)
	return true
}

// readLoop reads the peer's messages and hands each to handle until the
// link ends; it returns why.
func (l *link) readLoop(handle func(*message) bool) error {
	for {
		typ, data, err := l.conn.Read(l.ctx)
		if err != nil {
			return err
		}
		m, err := decode(typ, data)
		if err != nil {
			l.fail("malformed message")
			return err
		}
		l.r.stats.received.Add(1)
		if !handle(m) {
			return l.ctx.Err()
		}
	}
}

func decode(typ websocket.MessageType, data []byte) (*message, error) {
	if typ != websocket.MessageText {
		return nil, errors.New("peer: binary message on the follow link")
	}
	var m message
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("peer: malformed follow-link message: %w", err)
	}
	if m.Op == "" {
		return nil, errors.New("peer: follow-link message without op")
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	return &m, nil
}

// hello sends this member's hello and reads the peer's (within ctx),
// which must name want (when set) and speak WireVersion.
func (r *Relay) hello(ctx context.Context, conn *websocket.Conn, want string) (string, error) {
	b, err := json.Marshal(&message{Op: OpHello, V: WireVersion, Member: r.cfg.Self})
	if err != nil {
		return "", err
	}
	if err := conn.Write(ctx, websocket.MessageText, b); err != nil {
		return "", fmt.Errorf("peer: hello not sent: %w", err)
	}
	typ, data, err := conn.Read(ctx)
	if err != nil {
		return "", fmt.Errorf("peer: no hello: %w", err)
	}
	m, err := decode(typ, data)
	if err != nil {
		return "", err
	}
	switch {
	case m.Op != OpHello:
		return "", fmt.Errorf("peer: first message is %q, not hello", m.Op)
	case m.V != WireVersion:
		_ = conn.Close(websocket.StatusPolicyViolation, "unsupported follow-link version")
		return "", fmt.Errorf("peer: follow-link version %d, this member speaks %d", m.V, WireVersion)
	case want != "" && m.Member != want:
		_ = conn.Close(websocket.StatusPolicyViolation, "member mismatch")
		return "", fmt.Errorf("peer: member %q answered as %q", want, m.Member)
	}
	return m.Member, nil
}

// ServeHTTP serves GET FollowPath, a follower's follow link: the
// signature is checked first (401 when it is not the cluster secret's),
// then the connection is upgraded and served until it ends or the relay
// closes (503 before Start and after Close). Every refusal is the
// protocol's JSON error body (405 for another method, 426 for a request
// that is not a WebSocket upgrade).
func (r *Relay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	member, err := r.cfg.Secret.Verify(req, time.Now())
	if err != nil {
		r.log.Info("cluster follow link refused", zap.String("peer", req.Header.Get(MemberHeader)), zap.String("remote_addr", req.RemoteAddr), zap.Error(err))
		writeRefusal(w, err)
		return
	}
	if req.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		httperr.WriteStatus(w, http.StatusMethodNotAllowed, syncerr.New(syncerr.InvalidRequest, "the follow link is a GET (a WebSocket upgrade)"))
		return
	}
	if !strings.EqualFold(req.Header.Get("Upgrade"), "websocket") {
		w.Header().Set("Upgrade", "websocket")
		httperr.WriteStatus(w, http.StatusUpgradeRequired, syncerr.New(syncerr.InvalidRequest, "the follow link is a WebSocket: Upgrade: websocket expected"))
		return
	}
	if !r.enter() {
		httperr.Write(w, syncerr.Unavailable("not_serving", nil, "this member is not serving follow links (starting or stopping); retry"))
		return
	}
	defer r.wg.Done()
	// A hijacked connection keeps the server's deadlines: the link has its
	// own timeouts.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	conn, err := websocket.Accept(w, req, &websocket.AcceptOptions{InsecureSkipVerify: true}) // signed: not a browser
	if err != nil {
		r.log.Info("cluster follow link upgrade failed", zap.String("peer", member), zap.Error(err))
		return
	}
	conn.SetReadLimit(r.lim.MessageBytes)
	hctx, cancel := context.WithTimeout(r.ctx, linkHelloTimeout)
	_, err = r.hello(hctx, conn, member)
	cancel()
	if err != nil {
		r.log.Info("cluster follow link failed at hello", zap.String("peer", member), zap.Error(err))
		_ = conn.CloseNow()
		return
	}
	l := r.newLink(r.ctx, conn, member)
	if !l.start() {
		return
	}
	r.stats.inLinks.Add(1)
	r.box.push(func() { r.followerUp(l) })
	l.log.Debug("cluster follow link accepted")
	err = l.readLoop(func(m *message) bool {
		return r.box.pushWait(l.ctx, func() { r.fromFollower(l, m) })
	})
	l.fail("link ended")
	<-l.finished
	r.stats.inLinks.Add(-1)
	r.box.push(func() { r.followerDown(l) })
	if r.ctx.Err() == nil {
		l.log.Info("cluster follow link from a follower ended", zap.Error(err))
	}
}

// dialLoop keeps ol's link up while it has partitions to follow: dial,
// serve the link until it ends, back off (50 ms doubling to 1 s), dial
// again. It ends with ol (removed from the view) or the relay.
func (r *Relay) dialLoop(ol *outLink) {
	backoff := minBackoff
	failures := 0 // dials failed in a row
	for {
		for !ol.wanted.Load() {
			select {
			case <-ol.kick:
			case <-ol.ctx.Done():
				return
			}
		}
		r.stats.dials.Add(1)
		l, err := r.dial(ol)
		if err != nil {
			r.stats.dialFailures.Add(1)
			if ol.ctx.Err() != nil {
				return
			}
			failures++
			log := r.log.Debug
			if failures == 1 || failures%60 == 0 { // at most about once a minute while it keeps failing
				log = r.log.Warn
			}
			log("cluster follow link not dialed", zap.String("peer", ol.member), zap.Int("failures", failures),
				zap.Duration("retry_in", backoff), zap.Error(err))
			if !sleep(ol.ctx, backoff) {
				return
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		up := time.Now()
		failures = 0
		r.stats.outLinks.Add(1)
		r.box.push(func() { r.ownerUp(ol, l) })
		l.log.Debug("cluster follow link dialed")
		err = l.readLoop(func(m *message) bool {
			return r.box.pushWait(l.ctx, func() { r.fromOwner(ol, l, m) })
		})
		l.fail("link ended")
		<-l.finished
		r.stats.outLinks.Add(-1)
		r.box.push(func() { r.ownerDown(ol, l) })
		if ol.ctx.Err() != nil {
			return
		}
		r.log.Info("cluster follow link to the owner ended; re-dialing", zap.String("peer", ol.member), zap.String("reason", l.failure()), zap.Error(err))
		if time.Since(up) >= stableLink {
			backoff = minBackoff
		}
		if !sleep(ol.ctx, backoff) {
			return
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// dial opens a link to ol's member and exchanges hellos.
func (r *Relay) dial(ol *outLink) (*link, error) {
	ctx, cancel := context.WithTimeout(ol.ctx, linkHelloTimeout)
	defer cancel()
	u := strings.TrimSuffix(ol.member, "/") + FollowPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("peer: member %q is not a URL: %w", ol.member, err)
	}
	r.cfg.Secret.Sign(req, r.cfg.Self, time.Now())
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: r.cfg.HTTPClient, HTTPHeader: req.Header})
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusUnauthorized {
			return nil, fmt.Errorf("peer: %s refused this member's signature (is the cluster secret the same?): %w", ol.member, err)
		}
		return nil, err
	}
	conn.SetReadLimit(r.lim.MessageBytes)
	if _, err := r.hello(ctx, conn, ol.member); err != nil {
		_ = conn.CloseNow()
		return nil, err
	}
	l := r.newLink(ol.ctx, conn, ol.member)
	if !l.start() {
		return nil, errors.New("peer: the relay is closing")
	}
	return l, nil
}

// sleep waits d or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
