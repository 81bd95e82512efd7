package ssp2

import (
	"encoding/binary"
	"io"
)

// flushThreshold is the buffered size above which the Encoder writes out.
const flushThreshold = 32 << 10

// Encoder writes one SSP2 message frame by frame. It keeps only a reused
// buffer of roughly one frame (flushed past ~32 KiB), never the whole
// message, and enforces the same rules as Encode: frame kind, grammar order,
// field validity. The first error is sticky; after it nothing more is
// written.
type Encoder struct {
	w       io.Writer
	version uint16
	kind    MsgKind
	buf     []byte
	g       grammar
	started bool
	closed  bool
	err     error
}

// NewEncoder returns an Encoder writing a message of the given wire version
// and kind to w. Nothing is written before the first WriteFrame or Close.
func NewEncoder(w io.Writer, wireVersion uint16, kind MsgKind) *Encoder {
	e := &Encoder{w: w, version: wireVersion, kind: kind, g: grammar{kind: kind}}
	e.err = checkEnvelope(wireVersion, kind)
	return e
}

// Reset reuses e (and its buffer) for a new message to w.
func (e *Encoder) Reset(w io.Writer, wireVersion uint16, kind MsgKind) {
	*e = Encoder{w: w, version: wireVersion, kind: kind, g: grammar{kind: kind}, buf: e.buf[:0]}
	e.err = checkEnvelope(wireVersion, kind)
}

// WriteFrame encodes f after the envelope header (written lazily before the
// first frame). It refuses frames of the other message kind, frames out of
// grammar order, and an *UnknownFrame whose Type is a registered type.
// On a validation error nothing of f is written.
func (e *Encoder) WriteFrame(f Frame) error {
	if e.err != nil {
		return e.err
	}
	if e.closed {
		return encFail("WriteFrame after Close")
	}
	if !e.started {
		e.buf = appendHeader(e.buf, e.version, e.kind)
		e.started = true
	}
	if v, ok := f.(verbatimFrame); ok && len(v.verbatimPayload()) > flushThreshold {
		return e.writeLargeVerbatim(v)
	}
	b, err := appendFrame(e.buf, f, e.version, &e.g)
	e.buf = b
	if err != nil {
		return err
	}
	if len(e.buf) > flushThreshold {
		return e.flush()
	}
	return nil
}

// Close writes END and flushes. It fails (writing no END) when the message
// is grammatically incomplete, e.g. an open section without ERROR or a
// request with neither push nor pull.
func (e *Encoder) Close() error {
	if e.err != nil {
		return e.err
	}
	if e.closed {
		return nil
	}
	if why := e.g.end(); why != "" {
		e.err = encFail("%s", why)
		return e.err
	}
	if !e.started {
		e.buf = appendHeader(e.buf, e.version, e.kind)
		e.started = true
	}
	e.buf = append(e.buf, 0, 0, 0, 0, 0)
	e.closed = true
	return e.flush()
}

// writeLargeVerbatim writes a verbatim frame larger than the flush
// threshold (a SEGMENT_INLINE bootstrap page: hundreds of KiB) as its frame
// header followed by the payload itself, written straight to w instead of
// copied into the buffer, so the encoder's buffer stays about 32 KiB
// whatever the page size. The bytes are those appendFrame would produce;
// the payload is validated and the grammar checked before anything of the
// frame is written.
func (e *Encoder) writeLargeVerbatim(f verbatimFrame) error {
	payload := f.verbatimPayload()
	if uint64(len(payload)) > 0xFFFFFFFF {
		return encFail("frame payload of %d bytes exceeds u32", len(payload))
	}
	if err := f.checkPayload(); err != nil {
		return err
	}
	t := f.FrameType()
	if why := e.g.step(t, f); why != "" {
		return encFail("%s", why)
	}
	e.buf = append(e.buf, byte(t), 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(e.buf[len(e.buf)-4:], uint32(len(payload)))
	if err := e.flush(); err != nil {
		return err
	}
	if _, err := e.w.Write(payload); err != nil {
		e.err = err
		return err
	}
	return nil
}

// Flush writes the frames buffered so far to the writer; the message stays
// open for more frames. A streaming server calls it so that what it has
// written reaches the client before it builds more.
func (e *Encoder) Flush() error {
	if e.err != nil {
		return e.err
	}
	return e.flush()
}

func (e *Encoder) flush() error {
	if len(e.buf) == 0 {
		return nil
	}
	_, err := e.w.Write(e.buf)
	e.buf = e.buf[:0]
	if err != nil {
		e.err = err
	}
	return err
}
