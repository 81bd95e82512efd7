package realtime

import (
	"bytes"
	"encoding/binary"
	"sync"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
)

const textMessage = websocket.MessageText

// Socket rounds (§8.7): the client sends an SSP2 request as TagRound
// chunks; once its END frame has arrived the request runs through
// engine.Sync, exactly as POST /sync would run it, and the answer goes
// back as TagRound chunks, one frame per chunk (the envelope header with
// the first frame; a frame larger than maxChunk is split), whose
// concatenation is byte for byte the HTTP answer's body. One round at a
// time: a chunk that arrives while an answer is being produced closes the
// socket. While a round runs the socket gets wake-ups, never deltas, until
// the client's ack after the round.

// maxChunk bounds one chunk of an answer.
const maxChunk = 1 << 20

// envelopeLen is the SSP2 envelope header's length.
const envelopeLen = 8

// roundChunk takes one request chunk (reader goroutine).
func (s *session) roundChunk(b []byte) {
	if s.roundBusy.Load() {
		s.protocolError(websocket.StatusPolicyViolation, "one socket round at a time")
		return
	}
	had := len(s.roundBuf)
	if int64(had+len(b)) > s.h.opts.MaxRequestBytes {
		s.dropRound()
		s.protocolError(websocket.StatusMessageTooBig, "socket round request exceeds the request size limit")
		return
	}
	if had == 0 {
		s.roundSince.Store(time.Now().UnixNano())
	}
	s.roundBuf = append(s.roundBuf, b...)
	buf := s.roundBuf
	if had < envelopeLen && len(buf) >= envelopeLen {
		if !bytes.Equal(buf[:4], []byte("SSP2")) || (buf[4] != 1 && buf[4] != 2) || buf[5] != 0 || buf[6] != byte(ssp2.KindRequest) || buf[7] != 0 {
			s.dropRound()
			s.protocolError(websocket.StatusPolicyViolation, "bad SSP2 request header")
			return
		}
	}
	if !requestComplete(buf) {
		return
	}
	s.dropRound()
	s.roundBusy.Store(true)
	p := s.p
	p.mu.Lock()
	s.inRound = true
	s.live = false
	s.highest = max(s.highest, p.latest)
	p.mu.Unlock()
	if !s.h.spawn(func() { s.serveRound(buf) }) {
		s.roundBusy.Store(false)
	}
}

// dropRound forgets the incomplete round (reader goroutine).
func (s *session) dropRound() {
	s.roundBuf = nil
	s.roundSince.Store(0)
}

// requestComplete reports whether buf holds a whole request: the envelope
// header and frames up to an END frame.
func requestComplete(buf []byte) bool {
	off := envelopeLen
	for off+5 <= len(buf) {
		typ := buf[off]
		n := int(binary.LittleEndian.Uint32(buf[off+1 : off+5]))
		if typ == 0 { // END (a non-zero length is the decoder's to refuse)
			return off+5+n <= len(buf) || n < 0
		}
		if n < 0 || off+5+n > len(buf) {
			return false
		}
		off += 5 + n
	}
	return false
}

// serveRound runs one round and writes its answer.
func (s *session) serveRound(req []byte) {
	var once sync.Once
	finish := func() {
		once.Do(func() {
			p := s.p
			p.mu.Lock()
			s.inRound = false
			p.mu.Unlock()
			s.roundBusy.Store(false)
		})
	}
	defer finish()
	s.h.stats.rounds.Add(1)
	wire := binary.LittleEndian.Uint16(req[4:6])
	rep, err := s.runRound(req)
	if err != nil {
		rep = s.errorReply(wire, err)
	}
	w := &chunkWriter{s: s, last: finish}
	if _, err := rep.WriteTo(w); err == nil {
		_ = w.flush()
	}
}

func (s *session) runRound(req []byte) (*engine.Reply, error) {
	msg, err := ssp2.ReadRequest(bytes.NewReader(req), s.h.opts.MaxRequestBytes)
	if err != nil {
		return nil, err
	}
	r, err := msg.Request()
	if err != nil {
		return nil, err
	}
	if r.Header.ClientID != s.clientID {
		return nil, syncerr.New(syncerr.InvalidClientID, "the round's clientId %q is not the socket's clientId", r.Header.ClientID)
	}
	eng := s.h.eng.Load()
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
	if wire != ssp2.WireV1 {
		wire = ssp2.WireV2
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
	return &partition.Reply{WireVersion: wire, Frames: []ssp2.Frame{hdr, &ssp2.ErrorFrame{Code: string(e.Code), Message: e.Message,
		Category: spec.Category, Retryable: spec.Retryable, RecommendedAction: spec.RecommendedAction, Details: e.Details}}}
}

// chunkWriter cuts an encoded answer into round chunks, one frame per
// chunk (the envelope header travels with the first frame).
type chunkWriter struct {
	s      *session
	buf    []byte
	err    error
	headed bool   // the envelope header went out
	rem    int    // bytes of a large frame still to send in pieces
	last   func() // runs before the chunk holding END is sent
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	w.buf = append(w.buf, p...)
	for {
		n, end := w.next()
		if n == 0 {
			return len(p), nil
		}
		if end && w.last != nil {
			// The client may send its next round as soon as END arrives.
			w.last()
			w.last = nil
		}
		if err := w.send(w.buf[:n]); err != nil {
			return 0, err
		}
		w.headed = true
		w.buf = append(w.buf[:0], w.buf[n:]...)
	}
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
	err := w.send(w.buf)
	w.buf = nil
	return err
}
