package realtime

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"sync"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/bodybudget"
)

const textMessage = websocket.MessageText

// Socket rounds (§8.7): the client sends an SSP2 request as TagRound
// chunks; once its END frame has arrived the request runs through
// engine.Sync, exactly as POST /sync would run it, and the answer goes
// back as TagRound chunks, one frame per chunk (the envelope header with
// the first frame; a frame larger than maxChunk is split), whose
// concatenation is byte for byte the HTTP answer's body. While a round
// runs the socket gets wake-ups, never deltas, until the client's ack
// after the round; a commit made durable during the round that touches
// the socket's keys (its own push included) gets one catchup-required
// wake-up, sent right before the answer's END (endRound).
//
// One round at a time, no pipelining: bytes past a request's END, in the
// message that carries the END or in one that arrives before the answer's
// END went out, close the socket (1008, "pipelining"), and the answer
// stops. A request whose END arrives with more bytes behind it in the
// same message is not run at all: its answer could not be delivered, and
// the client resends it (push idempotency makes that safe) on its next
// socket. Each chunk of an answer waits for the socket's reader to take
// what the client sent before it (read while you write, readwatch.go), so
// that no scheduling lets an answer end before a pipelined request that
// arrived during it is seen.
//
// The request's bytes are charged to the hub's body budget as its buffer
// grows (bodybudget.DecodedFactor per byte), like a POST /sync body. A round that finds no room within the
// budget's wait is refused: the rest of its request is read and dropped,
// and once its END has arrived it is answered RESP_HEADER, ERROR
// sync.rate_limited (retryable, retryLater, details.retryAfterMs), END;
// the socket stays open. A request larger than MaxRequestBytes closes the
// socket (1009), as soon as a frame header declares a frame that would
// take it past the limit.

// maxChunk bounds one chunk of an answer.
const maxChunk = 1 << 20

// envelopeLen is the SSP2 envelope header's length.
const envelopeLen = 8

// dropScratch holds the bytes of a refused round's request while they are
// read and dropped.
var dropScratch = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// roundMessage takes one TagRound message, its tag read, from r (reader
// goroutine). It returns false when it closed the socket, leaving the
// rest of the message for the caller to drain, or when r failed.
func (s *session) roundMessage(r io.Reader) bool {
	if s.roundBusy.Load() {
		s.protocolError(websocket.StatusPolicyViolation, reasonPipelining, zap.String("detail", "a round's bytes arrived while the previous round's answer was being produced"))
		return false
	}
	limit := int(min(s.h.opts.MaxRequestBytes, math.MaxInt-1)) + 1
	var scratch *[]byte
	defer func() {
		if scratch != nil {
			dropScratch.Put(scratch)
		}
	}()
	for {
		var piece []byte
		var rerr error
		if s.roundRefused == nil {
			if len(s.roundBuf) == cap(s.roundBuf) {
				if s.roundCharge == nil {
					s.roundCharge = s.h.opts.BodyBudget.Charge()
				}
				b, err := s.roundCharge.GrowBuffer(s.ctx, s.roundBuf, limit, bodybudget.DecodedFactor)
				switch {
				case errors.Is(err, bodybudget.ErrBusy):
					s.refuseRound(err)
					continue
				case err != nil: // the socket is closing
					return false
				}
				s.roundBuf = b
			}
			n := len(s.roundBuf)
			if n == cap(s.roundBuf) { // at the limit (not reached: roundLen is checked below)
				return s.roundTooLarge()
			}
			var k int
			k, rerr = r.Read(s.roundBuf[n:cap(s.roundBuf)])
			s.roundBuf = s.roundBuf[:n+k]
			piece = s.roundBuf[n : n+k]
		} else {
			if scratch == nil {
				scratch = dropScratch.Get().(*[]byte)
			}
			var k int
			k, rerr = r.Read(*scratch)
			piece = (*scratch)[:k]
		}
		if len(piece) > 0 {
			if s.roundLen == 0 {
				s.roundSince.Store(time.Now().UnixNano())
			}
			s.roundLen += int64(len(piece))
			if s.roundLen > s.h.opts.MaxRequestBytes {
				return s.roundTooLarge()
			}
			if !s.roundHeader(piece) {
				return false
			}
			end, done := s.roundScan.feed(piece)
			if !done && s.roundScan.atLeast() > s.h.opts.MaxRequestBytes {
				// A frame header declared more than the limit allows: no
				// need to wait for its bytes.
				return s.roundTooLarge()
			}
			if done {
				if end < len(piece) {
					s.pipelined()
					return false
				}
				if rerr == nil { // END ends the piece: nothing may follow it in the message
					more, err := hasMore(r)
					if err != nil {
						return false
					}
					if more {
						s.pipelined()
						return false
					}
				}
				s.startRound()
				return true
			}
		}
		if errors.Is(rerr, io.EOF) {
			return true // the request continues in the next message
		}
		if rerr != nil {
			return false
		}
	}
}

// hasMore reports whether r has another byte (it reads it).
func hasMore(r io.Reader) (bool, error) {
	var one [1]byte
	for {
		k, err := r.Read(one[:])
		if k > 0 {
			return true, nil
		}
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
}

// roundHeader copies the envelope header from a piece of the round as it
// arrives and checks it once whole; false when it closed the socket.
func (s *session) roundHeader(piece []byte) bool {
	had := s.roundLen - int64(len(piece))
	if had >= envelopeLen {
		return true
	}
	copy(s.roundHdr[had:], piece)
	if s.roundLen < envelopeLen {
		return true
	}
	h := s.roundHdr
	if string(h[:4]) != "SSP2" || !ssp2.IsKnownWireVersion(uint16(h[4])) || h[5] != 0 || h[6] != byte(ssp2.KindRequest) || h[7] != 0 {
		s.dropRound()
		s.protocolError(websocket.StatusPolicyViolation, "bad SSP2 request header")
		return false
	}
	return true
}

// reasonPipelining is the close reason of bytes past a request's END.
const reasonPipelining = "pipelining"

// pipelined closes the socket for bytes past END in the message that
// carried it; the request is not run.
func (s *session) pipelined() {
	s.dropRound()
	s.protocolError(websocket.StatusPolicyViolation, reasonPipelining, zap.String("detail", "bytes past the request's END frame in the same message"))
}

// roundTooLarge closes the socket for a request over MaxRequestBytes.
func (s *session) roundTooLarge() bool {
	s.dropRound()
	s.protocolError(websocket.StatusMessageTooBig, "socket round request exceeds the request size limit",
		zap.Int64("max_request_bytes", s.h.opts.MaxRequestBytes))
	return false
}

// refuseRound turns the incomplete round into a refused one: its bytes
// and charge are dropped, the rest of its request is read and dropped,
// and its answer will be err.
func (s *session) refuseRound(err error) {
	s.roundRefused = err
	s.roundBuf = nil
	s.roundCharge.Release()
	s.roundCharge = nil
	s.h.log.Info("socket round refused: the in-flight request-body budget is full", zap.String("partition", s.ident.Partition),
		zap.String("client_id", s.clientID), zap.String("session_id", s.id), zap.Int64("received_bytes", s.roundLen),
		zap.Int64("budget_bytes", s.h.opts.BodyBudget.Limit()))
}

// startRound serves the round whose request is complete (reader
// goroutine). Its answer's chunks go out only once the reader has taken
// every byte that arrived before them (caughtUp).
func (s *session) startRound() {
	req, charge, refused, wire := s.roundBuf, s.roundCharge, s.roundRefused, binary.LittleEndian.Uint16(s.roundHdr[4:6])
	s.roundCharge = nil // the round's goroutine releases it
	s.dropRound()
	s.roundBusy.Store(true)
	p := s.p
	p.mu.Lock()
	s.inRound = true
	s.live = false
	s.highest = max(s.highest, p.latest)
	p.mu.Unlock()
	if !s.h.spawn(func() { s.serveRound(req, wire, refused, charge) }) {
		charge.Release()
		_ = s.endRound() // the hub is closing
		return
	}
	if f := s.h.tookRound; f != nil {
		f(s.clientID)
	}
}

// dropRound forgets the incomplete round and releases its charge (reader
// goroutine).
func (s *session) dropRound() {
	s.roundBuf = nil
	s.roundCharge.Release()
	s.roundCharge = nil
	s.roundRefused = nil
	s.roundLen = 0
	s.roundScan = roundScanner{}
	s.roundSince.Store(0)
}

// roundScanner finds the end of a request in the stream of its bytes, fed
// piece by piece: the envelope header, then frames (type byte, u32 length,
// payload) up to the END frame's 5-byte header, whatever END's length says
// (a non-zero one is the decoder's to refuse).
type roundScanner struct {
	pos  int64 // bytes fed so far
	next int64 // where the next frame header starts (0: after the envelope header)
	fh   [5]byte
	fhn  int
}

// atLeast is the least length the request can have, from what was fed:
// the frames whose headers arrived, then END's header.
func (sc *roundScanner) atLeast() int64 {
	return max(sc.next, envelopeLen) + 5
}

// feed takes the next piece; done reports that END's header ends at
// piece[:end].
func (sc *roundScanner) feed(piece []byte) (end int, done bool) {
	if sc.next == 0 {
		sc.next = envelopeLen
	}
	i := 0
	for i < len(piece) {
		if sc.pos < sc.next { // in the envelope header or a frame's payload
			k := int(min(int64(len(piece)-i), sc.next-sc.pos))
			i += k
			sc.pos += int64(k)
			continue
		}
		sc.fh[sc.fhn] = piece[i]
		sc.fhn++
		i++
		sc.pos++
		if sc.fhn == len(sc.fh) {
			sc.fhn = 0
			if sc.fh[0] == byte(ssp2.FrameEnd) {
				return i, true
			}
			sc.next = sc.pos + int64(binary.LittleEndian.Uint32(sc.fh[1:]))
		}
	}
	return i, false
}

// serveRound runs one round (or answers the refusal it was given) and
// writes its answer; the round's charge is released once the engine is
// done with the request.
func (s *session) serveRound(req []byte, wire uint16, refused error, charge *bodybudget.Charge) {
	w := &chunkWriter{s: s, last: s.endRound}
	defer func() {
		if w.last != nil {
			// The answer ended before its END (the socket failed): the
			// round ends here, and a wake-up it owes goes through the send
			// buffer.
			if wk := w.last(); wk != nil {
				s.enqueue(outMsg{typ: websocket.MessageText, data: wk}, true)
			}
		}
	}()
	s.h.stats.rounds.Add(1)
	var rep *engine.Reply
	err := refused
	if err == nil {
		rep, err = s.runRound(req)
	}
	req = nil
	charge.Release()
	if err != nil {
		rep = s.errorReply(wire, err)
	}
	if _, err := rep.WriteTo(w); err == nil {
		_ = w.flush()
	}
}

// endRound ends the round in flight on the socket's side, before the
// chunk holding its answer's END is sent (round goroutine). Every commit
// the hub knows of is weighed for the socket while it is still in the
// round: one made durable during the round (the round's own push
// included, whatever the round's pull answered) that touches the
// socket's keys, before or after the round re-registered it, owes the
// socket a catchup-required wake-up (SPEC §8.2, §8.7), which endRound
// returns rendered (nil: none owed) for the round to send before END.
// Weighing here, not only in the fan-out worker, makes the wake-up
// independent of when that worker runs: it could otherwise run after the
// client's post-round ack had made the socket live, or after the round's
// registration had moved the socket past the commit, and then wake
// nobody. From here on the socket takes its next round and its post-round
// ack.
func (s *session) endRound() []byte {
	p := s.p
	p.mu.Lock()
	if s.state == stateStarted && !s.reset {
		p.weigh(s, p.latest)
	}
	owed := s.roundWake
	s.roundWake = -1
	s.inRound = false
	p.mu.Unlock()
	s.roundBusy.Store(false)
	if owed < 0 {
		return nil
	}
	s.h.stats.wakeCatchup.Add(1)
	b, err := ssp2.MarshalControl(&ssp2.Wake{Cursor: owed, Reason: ssp2.WakeCatchupRequired, Timestamp: s.h.nowMs()})
	if err != nil {
		return nil
	}
	return b
}

func (s *session) runRound(req []byte) (*engine.Reply, error) {
	eng := s.h.eng.Load()
	if err := eng.CheckWireVersion(req); err != nil {
		return nil, err // before any frame is read (SPEC §1.2)
	}
	msg, err := ssp2.DecodeRequest(req) // at most MaxRequestBytes (roundMessage)
	if err != nil {
		return nil, err
	}
	r, err := msg.Request()
	if err != nil {
		return nil, err
	}
	if r.Header.ClientID != s.clientID {
		return nil, syncerr.New(syncerr.InvalidClientID, "the round's clientId %s is not the socket's clientId", syncerr.Quote(r.Header.ClientID))
	}
	rep, err := eng.Sync(s.ctx, s.ident, msg)
	if err != nil && syncerr.As(err).Code == syncerr.InternalError {
		s.h.log.Warn("socket round failed", zap.String("partition", s.ident.Partition), zap.String("client_id", s.clientID),
			zap.String("session_id", s.id), zap.Error(err))
	}
	return rep, err
}

// errorReply is a request-level failure over the socket: RESP_HEADER,
// ERROR, END.
func (s *session) errorReply(wire uint16, err error) *engine.Reply {
	if wire < ssp2.WireV1 || wire > ssp2.WireV3 {
		wire = ssp2.WireV3 // the request's version is not one the codec writes
	}
	var v int32
	if sch := s.h.schema(); sch != nil {
		v = sch.Version
	}
	hdr := &ssp2.RespHeader{LatestSchemaVersion: &v}
	if wire >= ssp2.WireV2 {
		s.p.mu.Lock()
		hdr.LogEpoch = s.epoch
		s.p.mu.Unlock()
		if hdr.LogEpoch == "" {
			hdr.LogEpoch = "unknown"
		}
	}
	e := syncerr.As(err)
	spec := e.Spec()
	return &engine.Reply{WireVersion: wire, Frames: []ssp2.Frame{hdr, &ssp2.ErrorFrame{Code: string(e.Code), Message: syncerr.TrimMessage(e.Message),
		Category: spec.Category, Retryable: spec.Retryable, RecommendedAction: spec.RecommendedAction, Details: e.Details}}}
}

// chunkWriter cuts an encoded answer into round chunks, one frame per
// chunk (the envelope header travels with the first frame).
type chunkWriter struct {
	s      *session
	buf    []byte
	err    error
	headed bool // the envelope header went out
	rem    int  // bytes of a large frame still to send in pieces
	// last runs before the chunk holding END is sent; a message it
	// returns (a wake-up) is sent first.
	last func() []byte
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	total := len(p)
	for len(p) > 0 {
		// A large frame's payload (a bootstrap page: the encoder writes it
		// whole, straight from the page's bytes) goes out from p itself,
		// not copied into buf and again into a message.
		n, end, rest, ok := w.want()
		k := n - len(w.buf)
		if !ok || end || k < directMin || len(p) < k {
			break
		}
		if err := w.s.caughtUp(); err != nil {
			w.err = err
			return 0, err
		}
		if err := w.sendParts(w.buf, p[:k], rest); err != nil {
			return 0, err
		}
		w.headed = true
		w.buf = w.buf[:0]
		p = p[k:]
	}
	if len(p) == 0 {
		return total, nil
	}
	w.buf = append(w.buf, p...)
	for {
		n, end := w.next()
		if n == 0 {
			return len(p), nil
		}
		// Read while you write: a chunk goes out only once the reader has
		// taken what the client sent before it, so a pipelined request
		// closes the socket before the answer goes on (or ends).
		if err := w.s.caughtUp(); err != nil {
			w.err = err
			return 0, err
		}
		if end && w.last != nil {
			// The client may send its next round as soon as END arrives.
			wk := w.last()
			w.last = nil
			if wk != nil {
				if err := w.s.write(websocket.MessageText, wk); err != nil {
					w.err = err
					return 0, err
				}
			}
		}
		if err := w.send(w.buf[:n]); err != nil {
			return 0, err
		}
		w.headed = true
		w.buf = append(w.buf[:0], w.buf[n:]...)
	}
}

// directMin is the least payload a chunk sends straight from the
// caller's bytes (sendParts); smaller chunks are copied into one message.
const directMin = 4 << 10

// want returns the length of the chunk starting at buf's first byte once
// its frame header is in buf (ok), whether or not its bytes are, whether
// it holds END, and the bytes of its frame left for later chunks after it
// (next's rem once the chunk is sent).
func (w *chunkWriter) want() (n int, isEnd bool, rest int, ok bool) {
	if w.rem > 0 {
		n = min(w.rem, maxChunk)
		return n, false, w.rem - n, true
	}
	off := 0
	if !w.headed {
		off = envelopeLen
	}
	if len(w.buf) < off+5 {
		return 0, false, 0, false
	}
	end := off + 5 + int(binary.LittleEndian.Uint32(w.buf[off+1:off+5]))
	if end > maxChunk {
		return maxChunk, false, end - maxChunk, true
	}
	return end, w.buf[off] == 0, 0, true
}

// sendParts sends the chunk head+body (head: what buf holds of it) as one
// round message without copying body: the message goes out as WebSocket
// fragments (the tag and head, then body), which the client's WebSocket
// reassembles into the same message bytes.
func (w *chunkWriter) sendParts(head, body []byte, rest int) error {
	msg := make([]byte, 1+len(head))
	msg[0] = TagRound
	copy(msg[1:], head)
	if err := w.s.writeParts(websocket.MessageBinary, msg, body); err != nil {
		w.err = err
		return err
	}
	w.rem = rest
	return nil
}

// next returns the length of the next chunk ready in buf (0: wait for
// more): the envelope header (first chunk only) and one whole frame, or a
// maxChunk piece of a larger frame.
func (w *chunkWriter) next() (n int, isEnd bool) {
	if w.rem > 0 {
		n := min(w.rem, len(w.buf))
		if n < w.rem && n < maxChunk {
			return 0, false
		}
		n = min(n, maxChunk)
		w.rem -= n
		return n, false
	}
	off := 0
	if !w.headed {
		off = envelopeLen
	}
	if len(w.buf) < off+5 {
		return 0, false
	}
	end := off + 5 + int(binary.LittleEndian.Uint32(w.buf[off+1:off+5]))
	switch {
	case end <= len(w.buf):
		return end, w.buf[off] == 0
	case len(w.buf) >= maxChunk:
		w.rem = end - maxChunk
		return maxChunk, false
	}
	return 0, false
}

func (w *chunkWriter) send(b []byte) error {
	msg := make([]byte, 1+len(b))
	msg[0] = TagRound
	copy(msg[1:], b)
	if err := w.s.write(websocket.MessageBinary, msg); err != nil {
		w.err = err
		return err
	}
	return nil
}

// flush sends what is left (nothing, for a well-formed answer).
func (w *chunkWriter) flush() error {
	if w.err != nil || len(w.buf) == 0 {
		return w.err
	}
	if err := w.s.caughtUp(); err != nil {
		w.err = err
		return err
	}
	err := w.send(w.buf)
	w.buf = nil
	return err
}
