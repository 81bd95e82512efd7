package ssp2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/synclane/synclane/protocol/syncerr"
)

// Decoder reads an SSP2 message frame by frame from a stream, so that a
// client can act on a response's first frames (decode and apply a
// bootstrap page) while the server still writes the next ones. It applies
// the checks of DecodeResponse and DecodeRequest: envelope header, frame
// grammar, field validity, and a final END with nothing after it.
type Decoder struct {
	r        io.Reader
	want     MsgKind
	maxFrame int
	d        dec
	g        grammar
	off      int
	started  bool
	done     bool
	err      error
	kind     MsgKind
	hdr      [HeaderSize]byte
}

// DefaultMaxFrameBytes bounds one frame's payload for a Decoder created
// with maxFrame <= 0 (64 MiB: larger than any page a server sends).
const DefaultMaxFrameBytes = 64 << 20

// NewDecoder returns a Decoder reading a message of kind want (0: either)
// from r. A frame whose payload exceeds maxFrame bytes (<= 0 means
// DefaultMaxFrameBytes) fails with ErrTooLarge.
func NewDecoder(r io.Reader, want MsgKind, maxFrame int) *Decoder {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrameBytes
	}
	return &Decoder{r: r, want: want, maxFrame: maxFrame}
}

// DecodeSegments makes every SEGMENT_INLINE frame Next returns carry its
// payload decoded (SegmentInline.Segment), built in the same pass that
// checks it; call it before the first Next. Errors are unchanged.
func (d *Decoder) DecodeSegments() { d.d.buildSegments = true }

// WireVersion reports the message's wire version (0 before the first Next).
func (d *Decoder) WireVersion() uint16 { return d.d.version }

// Next returns the next frame. After the END frame it returns io.EOF, once
// it has checked that the grammar is complete and nothing follows END.
// Errors are *syncerr.Error values (sync.invalid_request) wrapping a
// *DecodeError, or the reader's error, wrapped; the first one is sticky.
// Byte-slice fields of a frame alias a buffer of that frame only.
func (d *Decoder) Next() (Frame, error) {
	if d.err != nil {
		return nil, d.err
	}
	if d.done {
		return nil, io.EOF
	}
	f, err := d.next()
	if err != nil {
		d.err = err
	}
	return f, err
}

func (d *Decoder) next() (Frame, error) {
	if !d.started {
		if _, err := io.ReadFull(d.r, d.hdr[:]); err != nil {
			return nil, d.readFail(err, "envelope header")
		}
		v, k, err := decodeHeader(d.hdr[:], d.want)
		if err != nil {
			return nil, err
		}
		d.d.version, d.kind, d.g, d.off, d.started = v, k, grammar{kind: k}, HeaderSize, true
	}
	var fh [5]byte
	if _, err := io.ReadFull(d.r, fh[:]); err != nil {
		return nil, d.readFail(err, "frame header")
	}
	t := FrameType(fh[0])
	n := binary.LittleEndian.Uint32(fh[1:])
	if t == FrameEnd {
		if n != 0 {
			return nil, decodeFail(d.off+1, fmt.Sprintf("END frame length %d, must be 0", n))
		}
		if why := d.g.end(); why != "" {
			return nil, decodeFail(d.off, why)
		}
		var one [1]byte
		if k, err := d.r.Read(one[:]); k > 0 {
			return nil, decodeFail(d.off+5, "bytes after END")
		} else if err != nil && !errors.Is(err, io.EOF) {
			return nil, syncerr.Wrap(syncerr.InvalidRequest, err, "reading after END")
		}
		d.done = true
		return nil, io.EOF
	}
	if uint64(n) > uint64(d.maxFrame) {
		return nil, syncerr.Wrap(syncerr.InvalidRequest, ErrTooLarge, "frame of %d bytes at offset %d exceeds the %d byte frame limit", n, d.off, d.maxFrame)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(d.r, payload); err != nil {
		return nil, d.readFail(err, "frame payload")
	}
	f, err := d.d.frame(t, payload, d.off+5, &d.g)
	if err != nil {
		return nil, err
	}
	d.off += 5 + int(n)
	return f, nil
}

// readFail renders a short read: a stream that ends early is truncated.
func (d *Decoder) readFail(err error, what string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return decodeFail(d.off, "truncated: message ends without an END frame ("+what+")")
	}
	return syncerr.Wrap(syncerr.InvalidRequest, err, "reading the %s", what)
}
