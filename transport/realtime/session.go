package realtime

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/bodybudget"
)

// Binary message tags (§8.7).
const (
	// TagDelta prefixes a server→client delta: one whole SSP2 response.
	TagDelta byte = 0x00
	// TagRound prefixes a socket round chunk, both directions.
	TagRound byte = 0x01
)

const (
	stateConnecting = iota
	stateStarted
	stateClosed
)

// sub is one registered subscription of a socket.
type sub struct {
	id, table string
	eff       map[string][]string
	cursor    int64
	active    bool // registered: its scope keys count for presence
	ready     bool // deltas continue it from cursor
}

// session is one socket. Its registration and flow-control fields are
// guarded by its partition's mutex; its send queue by qmu.
type session struct {
	h        *Hub
	p        *part
	id       string
	ident    engine.Identity
	clientID string
	conn     *websocket.Conn
	aconn    atomic.Pointer[websocket.Conn] // conn, for shut (which may run before the upgrade finished)
	ctx      context.Context
	cancel   context.CancelFunc

	// guarded by p.mu
	state    int
	wire     uint16
	epoch    string
	subs     []sub
	groupKey string
	keys     map[string]struct{}
	gen      uint64  // bumped when registrations are replaced
	live     bool    // deltas flow; otherwise wake-ups
	reset    bool    // the epoch changed: reset-required sent, nothing more until a new registration
	inRound  bool    // a socket round is being served: no deltas
	building bool    // part of a delta build in flight
	highest  int64   // newest commit seq this socket was told about (hello, delta or wake-up)
	checked  int64   // commits up to it were weighed: told (hello, delta, wake-up) or, while not live, touching none of its keys
	sent     []int64 // seqs of deltas sent and not yet acked
	// roundWake is the cursor of the catchup-required wake-up owed to the
	// round in flight (-1: none): commits made durable during a round that
	// touch the socket's keys, sent with the round's answer (endRound).
	roundWake int64

	qmu    sync.Mutex
	queue  []outMsg
	qbytes int
	// pbytes estimates the queued presence events (documents plus an
	// envelope each): they are bounded by MaxQueuedBytes on their own, not
	// by the message count, so a join burst on a busy key fits.
	pbytes  int
	pcount  int // queued presence events (not counted toward MaxQueuedMessages)
	writing bool

	writeSince atomic.Int64 // UnixNano when the write in progress started (0: none)

	shutOnce  sync.Once
	shutting  atomic.Bool
	beatTimer *time.Timer
	beatMu    sync.Mutex

	// refreshSeen is the partition's RefreshScopes count when the socket
	// registered (guarded by part.mu; read by connect).
	refreshSeen uint64

	// pendingReg is the newest registration of this socket's client that
	// arrived while the socket was connecting (guarded by part.mu; applied
	// by connect after the upgrade).
	pendingReg *engine.Registration

	// round state, owned by the reader goroutine (roundBusy is shared with
	// the round's goroutine): the request so far (roundBuf, its charge on
	// the body budget), or the refusal of a round the budget had no room
	// for (roundRefused: its bytes are dropped as they come); the bytes
	// seen, the envelope header, and where END is.
	roundBuf    []byte
	roundCharge *bodybudget.Charge
	// ctlBuf is the reader's buffer for control messages (readControl).
	ctlBuf       []byte
	roundRefused error
	roundLen     int64
	roundHdr     [envelopeLen]byte
	roundScan    roundScanner
	roundBusy    atomic.Bool
	// watch follows the reader from the connection's side (readwatch.go):
	// a round's chunks wait for it to catch up.
	watch readWatch
	// roundSince is when the incomplete round in roundBuf began (UnixNano;
	// 0: none), for the heartbeat's RoundTimeout check.
	roundSince atomic.Int64
}

// outMsg is one queued message. Wake-ups are rendered when written, so a
// queued one can be brought up to date instead of queuing another.
type outMsg struct {
	typ  websocket.MessageType
	data []byte
	wake *ssp2.Wake
	// presence, set for a presence event, is rendered when written, so a
	// queued one can take a later update of the same document instead of
	// queuing another.
	presence *ssp2.PresenceFanout
}

func (h *Hub) newSession(id engine.Identity, clientID string) *session {
	ctx, cancel := context.WithCancel(h.ctx)
	return &session{h: h, id: uuid.NewString(), ident: id, clientID: clientID, ctx: ctx, cancel: cancel,
		highest: -1, checked: -1, roundWake: -1, watch: readWatch{tick: make(chan struct{}, 1)}}
}

// behind reports whether a ready subscription's cursor is below seq.
func (s *session) behind(seq int64) bool {
	for i := range s.subs {
		if s.subs[i].ready && s.subs[i].cursor < seq {
			return true
		}
	}
	return false
}

// enqueue queues m. Data (a delta) is refused when it does not fit the
// send buffer; a control message is refused only when the buffer holds
// MaxQueuedMessages already, and then the socket is closed: it is not
// reading. Wake-ups coalesce with a wake-up still queued.
func (s *session) enqueue(m outMsg, control bool) bool {
	o := &s.h.opts
	s.qmu.Lock()
	if m.wake != nil && len(s.queue) > 0 {
		if last := &s.queue[len(s.queue)-1]; last.wake != nil {
			if last.wake.Reason != ssp2.WakeResetRequired || m.wake.Reason == ssp2.WakeResetRequired {
				*last.wake = *m.wake
			} else {
				last.wake.Cursor = max(last.wake.Cursor, m.wake.Cursor)
			}
			s.qmu.Unlock()
			return true
		}
	}
	if p := m.presence; p != nil && p.Kind == ssp2.PresenceUpdate {
		// An update replaces the document of a join or update of the same
		// client on the same key still queued: a publisher flooding a key
		// costs its receivers one queued message, not one per update.
		for i := len(s.queue) - 1; i >= 0; i-- {
			q := s.queue[i].presence
			if q == nil || q.ScopeKey != p.ScopeKey || q.ClientID != p.ClientID {
				continue
			}
			if q.Kind == ssp2.PresenceJoin || q.Kind == ssp2.PresenceUpdate {
				s.pbytes += len(p.Doc) - len(q.Doc)
				q.Doc, q.Timestamp = p.Doc, p.Timestamp
				s.qmu.Unlock()
				return true
			}
			break // a leave: the update follows it
		}
	}
	full := len(s.queue)-s.pcount >= o.MaxQueuedMessages
	if m.presence != nil {
		full = s.pbytes+presenceSize(m.presence) > o.MaxQueuedBytes
	}
	if !control && (full || s.qbytes+len(m.data) > o.MaxQueuedBytes) {
		s.qmu.Unlock()
		return false
	}
	if control && full {
		s.qmu.Unlock()
		if !s.shutting.Load() { // counted once per socket, not per refused message
			s.h.stats.closedSlow.Add(1)
			s.logClosed("realtime socket closed: the client is not reading", zap.String("reason", "send buffer full"),
				zap.Int("queued_messages", o.MaxQueuedMessages))
		}
		s.shut(websocket.StatusPolicyViolation, "send buffer full: the client is not reading")
		return false
	}
	s.queue = append(s.queue, m)
	s.qbytes += len(m.data)
	if m.presence != nil {
		s.pbytes += presenceSize(m.presence)
		s.pcount++
	}
	start := !s.writing
	s.writing = true
	s.qmu.Unlock()
	if start && !s.h.spawn(s.writeLoop) {
		s.qmu.Lock()
		s.writing = false
		s.qmu.Unlock()
	}
	return true
}

// queued reports the messages and bytes waiting in the send buffer.
func (s *session) queued() (int, int) {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	return len(s.queue), s.qbytes
}

// writeLoop writes queued messages until the queue is empty; it runs only
// while there is something to send.
func (s *session) writeLoop() {
	for {
		s.qmu.Lock()
		if len(s.queue) == 0 || s.ctx.Err() != nil {
			s.queue, s.qbytes, s.pbytes, s.pcount, s.writing = nil, 0, 0, 0, false
			s.qmu.Unlock()
			return
		}
		m := s.queue[0]
		s.queue[0] = outMsg{}
		s.queue = s.queue[1:]
		s.qbytes -= len(m.data)
		if m.presence != nil {
			s.pbytes -= presenceSize(m.presence)
			s.pcount--
		}
		switch {
		case m.wake != nil:
			m.data, _ = ssp2.MarshalControl(m.wake)
		case m.presence != nil:
			m.data, _ = ssp2.MarshalControl(m.presence)
		}
		s.qmu.Unlock()
		if err := s.write(m.typ, m.data); err != nil {
			s.qmu.Lock()
			s.queue, s.qbytes, s.pbytes, s.pcount, s.writing = nil, 0, 0, 0, false
			s.qmu.Unlock()
			return
		}
	}
}

// write writes one message. A write that does not finish within the
// write timeout is cut off by the heartbeat's watchdog (which closes the
// socket); a failed write closes it too. (No timer per message: a
// deadline context costs a timer and a registration on every write.)
func (s *session) write(typ websocket.MessageType, data []byte) error {
	s.writeSince.Store(time.Now().UnixNano())
	err := s.conn.Write(context.Background(), typ, data)
	s.writeSince.Store(0)
	return err
}

// writeParts writes one message made of parts (each part its own
// WebSocket fragment, so no part is copied into a message buffer), under
// the same watchdog as write.
func (s *session) writeParts(typ websocket.MessageType, parts ...[]byte) error {
	s.writeSince.Store(time.Now().UnixNano())
	defer s.writeSince.Store(0)
	mw, err := s.conn.Writer(context.Background(), typ)
	if err != nil {
		return err
	}
	for _, p := range parts {
		if _, err := mw.Write(p); err != nil {
			_ = mw.Close()
			return err
		}
	}
	return mw.Close()
}

// stuck reports whether a write has been going on longer than the write
// timeout.
func (s *session) stuck() bool {
	t := s.writeSince.Load()
	return t != 0 && time.Since(time.Unix(0, t)) > s.h.opts.WriteTimeout
}

// wake queues a sync wake-up (with p.mu held) and records it.
func (s *session) wake(reason string, cursor int64) {
	s.checked = max(s.checked, cursor)
	s.highest = max(s.highest, cursor)
	switch reason {
	case ssp2.WakeDeltaTooLarge:
		s.h.stats.wakeTooLarge.Add(1)
	case ssp2.WakeResetRequired:
		s.h.stats.wakeReset.Add(1)
	default:
		s.h.stats.wakeCatchup.Add(1)
	}
	s.enqueue(outMsg{typ: websocket.MessageText, wake: &ssp2.Wake{Cursor: cursor, Reason: reason, Timestamp: s.h.nowMs()}}, true)
}

// owe records a catchup-required wake-up owed to the round in flight
// (p.mu held); the round sends it with its answer (endRound).
func (s *session) owe(cursor int64) {
	s.checked = max(s.checked, cursor)
	s.highest = max(s.highest, cursor)
	s.roundWake = max(s.roundWake, cursor)
}

// control queues a control message (with or without p.mu held).
func (s *session) control(v any) {
	b, err := ssp2.MarshalControl(v)
	if err != nil {
		s.h.log.Error("realtime control message not encodable", zap.Error(err))
		return
	}
	s.enqueue(outMsg{typ: websocket.MessageText, data: b}, true)
}

// shut closes the socket with a close frame (the handshake runs on its own
// goroutine: a peer that does not read cannot hold the caller).
func (s *session) shut(code websocket.StatusCode, reason string) {
	s.shutOnce.Do(func() {
		s.shutting.Store(true)
		if code == websocket.StatusGoingAway {
			s.h.stats.closedShutdown.Add(1)
		}
		conn := s.aconn.Load()
		if conn == nil {
			s.cancel()
			return
		}
		if !s.h.spawn(func() { _ = conn.Close(code, reason) }) {
			_ = conn.CloseNow() // the hub has stopped: no handshake
		}
	})
}

// scheduleBeat arms the next heartbeat.
func (s *session) scheduleBeat() {
	s.beatMu.Lock()
	defer s.beatMu.Unlock()
	if s.ctx.Err() != nil {
		return
	}
	if s.beatTimer == nil {
		s.beatTimer = time.AfterFunc(s.h.opts.HeartbeatInterval, s.beat)
	} else {
		s.beatTimer.Reset(s.h.opts.HeartbeatInterval)
	}
}

// beat sends a heartbeat event and a ping; a pong that does not come back
// within PingTimeout closes the socket.
func (s *session) beat() {
	if !s.h.enter() {
		return
	}
	defer s.h.wg.Done()
	if s.ctx.Err() != nil {
		return
	}
	if t := s.roundSince.Load(); t != 0 && time.Since(time.Unix(0, t)) > s.h.opts.RoundTimeout {
		s.protocolError(websocket.StatusPolicyViolation, "socket round request not completed within the round timeout")
		return
	}
	if s.stuck() {
		s.h.stats.closedSlow.Add(1)
		s.logClosed("realtime socket closed: the client is not reading", zap.String("reason", "a write did not finish within the write timeout"),
			zap.Duration("write_timeout", s.h.opts.WriteTimeout))
		_ = s.conn.CloseNow()
		return
	}
	s.control(&ssp2.Heartbeat{Timestamp: s.h.nowMs()})
	ctx, cancel := context.WithTimeout(s.ctx, s.h.opts.PingTimeout)
	err := s.conn.Ping(ctx)
	cancel()
	if err != nil {
		if s.ctx.Err() == nil && !s.shutting.Load() {
			s.h.stats.closedPing.Add(1)
			s.logClosed("realtime socket closed: no pong", zap.String("reason", "no pong within the ping timeout"), zap.Error(err))
			_ = s.conn.CloseNow()
		}
		return
	}
	s.scheduleBeat()
}

// readLoop reads the client's messages until the socket ends, then
// unregisters the socket. On a connection read through pooled buffers
// (sockbuf.go) the socket's goroutine only waits for the network (park,
// readwatch.go) and for a short-lived goroutine that reads and handles
// what arrived (readMessages): coder/websocket's read path and the
// handling of a message take more than the 2 KiB a goroutine starts
// with, and a stack that grew once stays grown (the runtime shrinks a
// parked stack only while it uses less than a quarter of it), so an idle
// socket's goroutine keeps its 2 KiB stack this way instead of 4 KiB.
func (s *session) readLoop() {
	defer s.finish()
	wc := s.watch.conn
	if wc == nil || wc.raw == nil {
		for s.readMessage() == readDone {
		}
		return
	}
	done := make(chan int, 1)
	work := func() { done <- s.readMessages() }
	for {
		if !s.h.spawn(work) {
			return
		}
		if <-done == readEnd {
			return
		}
		if err := wc.park(); err != nil {
			return
		}
	}
}

// readMessages reads messages until there is nothing to read yet
// (readPark) or the socket ended (readEnd).
func (s *session) readMessages() int {
	for {
		if r := s.readMessage(); r != readDone {
			return r
		}
	}
}

// What readMessage did.
const (
	readDone = iota // read a message
	readPark        // nothing to read yet: park
	readEnd         // the socket ended
)

// readMessage reads one client message. A control (text) message is read
// whole, at most maxControlBytes (a longer one closes the socket, 1009); a
// round message is read piece by piece (roundMessage).
//
//go:noinline
func (s *session) readMessage() int {
	wc := s.watch.conn
	shallow := wc != nil && wc.raw != nil
	if shallow {
		wc.shallow.Store(true)
	}
	// Closing the connection ends the read (no context registration per
	// message).
	typ, r, err := s.conn.Reader(context.Background())
	if shallow {
		wc.shallow.Store(false)
	}
	if err != nil {
		if shallow && errors.Is(err, errPark) {
			return readPark
		}
		return readEnd
	}
	ok := true
	if typ == websocket.MessageText {
		data, err := s.readControl(r)
		switch {
		case err != nil:
			return readEnd
		case int64(len(data)) > s.h.maxControlBytes():
			s.protocolError(websocket.StatusMessageTooBig, "control message too large", zap.Int64("max_control_bytes", s.h.maxControlBytes()))
			ok = false
		default:
			s.handleControl(data)
		}
	} else {
		var tag [1]byte
		_, err := io.ReadFull(r, tag[:])
		switch {
		case err != nil && !errors.Is(err, io.EOF):
			return readEnd
		case err != nil || tag[0] != TagRound:
			s.protocolError(websocket.StatusUnsupportedData, "unknown binary tag")
			ok = false
		default:
			ok = s.roundMessage(r)
		}
	}
	if !ok { // the socket is closing: read on until the close ends the reader
		if _, err := io.Copy(io.Discard, r); err != nil {
			return readEnd
		}
	}
	return readDone
}

// ctlKeep is the largest read buffer readControl keeps for the socket's
// next control message (an ack needs ~40 bytes; a larger presence
// document's buffer is not held by an idle socket).
const ctlKeep = 1 << 10

// readControl reads one control message, up to maxControlBytes+1 bytes
// (one more than the bound tells a longer message apart), into the
// socket's read buffer: the returned bytes are valid until the next call
// (handleControl keeps none of them). One arrives for every delta: io.ReadAll
// would allocate a buffer each time.
func (s *session) readControl(r io.Reader) ([]byte, error) {
	lr := io.LimitedReader{R: r, N: s.h.maxControlBytes() + 1}
	buf := s.ctlBuf[:0]
	if buf == nil {
		buf = make([]byte, 0, 64)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if cap(buf) <= ctlKeep {
		s.ctlBuf = buf
	} else {
		s.ctlBuf = nil
	}
	return buf, nil
}

// finish runs when the reader ends: the socket is closed and forgotten.
func (s *session) finish() {
	s.cancel()
	s.beatMu.Lock()
	if s.beatTimer != nil {
		s.beatTimer.Stop()
	}
	s.beatMu.Unlock()
	if !s.shutting.Load() {
		_ = s.conn.CloseNow()
	}
	s.dropRound() // an incomplete round's charge
	s.p.unregister(s)
	s.h.releasePart(s.p)
	s.h.releaseSlot(s.ident, s.clientID)
	s.h.log.Debug("realtime socket closed", zap.String("partition", s.ident.Partition), zap.String("client_id", s.clientID),
		zap.String("session_id", s.id))
}

// protocolError closes the socket for a client violation (logged at info
// with the reason, which is also the close frame's).
func (s *session) protocolError(code websocket.StatusCode, reason string, fields ...zap.Field) {
	if !s.shutting.Load() {
		s.h.stats.closedProtocol.Add(1)
		s.logClosed("realtime socket closed: protocol violation", append(fields, zap.String("reason", reason), zap.Int("close_code", int(code)))...)
	}
	s.shut(code, reason)
}

// logClosed logs, at info, why the server closes the socket.
func (s *session) logClosed(msg string, fields ...zap.Field) {
	s.h.log.Info(msg, append([]zap.Field{zap.String("partition", s.ident.Partition), zap.String("client_id", s.clientID),
		zap.String("session_id", s.id)}, fields...)...)
}

// handleControl handles a client→server control message: an ack or a
// presence publish; unknown ones are ignored, malformed known ones close
// the socket.
func (s *session) handleControl(data []byte) {
	if c, ok := fastAck(data); ok {
		s.ack(c)
		return
	}
	msg, err := ssp2.ParseClientControl(data)
	if err != nil {
		s.protocolError(websocket.StatusInvalidFramePayloadData, "malformed control message")
		return
	}
	switch m := msg.(type) {
	case *ssp2.Ack:
		s.ack(m.Cursor)
	case *ssp2.PresencePublish:
		s.p.publish(s, m.ScopeKey, m.Doc)
	}
}

// ack takes the client's acknowledgement: unacked deltas up to cursor are
// settled, the stored cursor follows, and a socket that was behind gets
// deltas again once the ack covers the newest commit it was told about.
func (s *session) ack(cursor int64) {
	p := s.p
	p.mu.Lock()
	if cursor < 0 || s.state != stateStarted {
		p.mu.Unlock()
		return
	}
	cursor = min(cursor, max(p.latest, s.highest))
	n := 0
	for _, x := range s.sent {
		if x > cursor {
			s.sent[n] = x
			n++
		}
	}
	s.sent = s.sent[:n]
	if !s.live && !s.reset && !s.inRound && cursor >= s.highest {
		s.live = true
		s.sent = s.sent[:0]
		for i := range s.subs {
			if s.subs[i].ready {
				s.subs[i].cursor = max(s.subs[i].cursor, cursor)
			}
		}
		if s.behind(p.latest) {
			p.kickFanout()
		}
	}
	if p.acks == nil {
		p.acks = map[string]engine.Ack{}
	}
	if a, ok := p.acks[s.clientID]; !ok || a.Cursor < cursor || a.ActorID != s.ident.ActorID || a.LogEpoch != s.epoch {
		// The session's epoch goes with the ack: the actor and storage
		// drop an ack of another epoch than the partition's (SPEC §8.2).
		p.acks[s.clientID] = engine.Ack{ClientID: s.clientID, ActorID: s.ident.ActorID, Cursor: cursor, LogEpoch: s.epoch}
	}
	if !p.ackRunning && p.h.spawn(p.flushAcks) {
		p.ackRunning = true
	}
	p.mu.Unlock()
}

// flushAcks hands acks to the partition's actor, one batch at a time,
// while there are any.
func (p *part) flushAcks() {
	defer p.h.releasePart(p)
	for {
		p.mu.Lock()
		if len(p.acks) == 0 {
			p.ackRunning = false
			p.mu.Unlock()
			return
		}
		batch := make([]engine.Ack, 0, len(p.acks))
		for _, a := range p.acks {
			batch = append(batch, a)
		}
		clear(p.acks) // kept for the next acks: one arrives for every delta
		p.mu.Unlock()
		eng := p.h.eng.Load()
		ctx, cancel := context.WithTimeout(p.h.ctx, 30*time.Second)
		err := eng.Ack(ctx, p.name, batch)
		cancel()
		if err != nil && !errors.Is(err, context.Canceled) {
			p.h.log.Warn("realtime acks not recorded", zap.String("partition", p.name), zap.Int("acks", len(batch)), zap.Error(err))
		}
	}
}

// fastAck recognizes the canonical ack, {"type":"ack","cursor":N}, without
// the general parser (one arrives for every delta).
func fastAck(b []byte) (int64, bool) {
	const pre = `{"type":"ack","cursor":`
	if len(b) < len(pre)+2 || string(b[:len(pre)]) != pre || b[len(b)-1] != '}' {
		return 0, false
	}
	digits := b[len(pre) : len(b)-1]
	if len(digits) == 0 || len(digits) > 16 {
		return 0, false
	}
	var n int64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if len(digits) > 1 && digits[0] == '0' {
		return 0, false
	}
	return n, n <= 1<<53-1
}

// presenceSize estimates a queued presence event's bytes.
func presenceSize(p *ssp2.PresenceFanout) int {
	return 128 + len(p.ScopeKey) + len(p.ActorID) + len(p.ClientID) + len(p.Doc)
}
