package peer

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// The frames member transport (ProtocolFrames): after a signed HTTP/1.1
// upgrade (GET pathFrames, "Upgrade: synclane-frames/1", answered 101 once
// the signature is verified), the connection carries many member calls at
// once as streams of binary frames. Every frame is a 10-byte header
//
//	length uint32 (big-endian: the payload's bytes) | type uint8 | flags uint8 | stream uint32
//
// followed by the payload. The calling member opens streams (odd ids,
// increasing); the callee answers on the same id:
//
//	frameReq     a call: its route and headers (encodeHead); flagEnd when it has no body
//	frameRes     the answer's start: status, length (-1: streamed) and headers; flagEnd when no body follows
//	frameData    body bytes (at most maxDataPayload); flagEnd on the last
//	frameReset   the stream ends abnormally (code, then a reason); resetDone
//	             from the callee after a complete answer whose call body it did not read
//	frameWindow  the receiver read this many more bytes (uint32) of stream (0: of the connection)
//	frameGoAway  (stream 0) the callee takes no new call on this connection
//
// Flow control is per stream and per connection, as HTTP/2's: a sender
// sends DATA only within the credit the receiver granted (the stream
// window the caller announced at the upgrade, and connWindow), and the
// receiver grants it back as its reader consumes the bytes. A frame over
// its type's limit, an unknown type, or DATA beyond the credit is a
// protocol error that closes the connection.
const (
	frameHeaderLen = 10

	frameReq    byte = 1
	frameRes    byte = 2
	frameData   byte = 3
	frameReset  byte = 4
	frameWindow byte = 5
	frameGoAway byte = 6

	flagEnd byte = 1

	// maxDataPayload caps a DATA frame; maxHeadPayload a REQ or RES frame
	// (the headers of one call, as net/http's default MaxHeaderBytes);
	// maxCtlPayload the others.
	maxDataPayload = 32 << 10
	maxHeadPayload = 1 << 20
	maxCtlPayload  = 1 << 10
	// maxHeadFields caps the headers of one head.
	maxHeadFields = 256
)

// Reset codes.
const (
	resetCancel  = 1 // the caller gave up the call (its context ended, or it closed the answer early)
	resetRefused = 2 // the callee took no call (closing, or too many streams): nothing ran
	resetFailed  = 3 // the callee's handler failed mid-answer (the answer is cut off)
	resetDone    = 4 // the answer is complete; the caller stops sending the call's body
)

var errFrameProtocol = errors.New("peer: member frames protocol error")

// frameHeader is a decoded frame header.
type frameHeader struct {
	length uint32
	typ    byte
	flags  byte
	stream uint32
}

func appendFrameHeader(b []byte, typ, flags byte, stream uint32, n int) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	b = append(b, typ, flags)
	return binary.BigEndian.AppendUint32(b, stream)
}

// maxPayload is the largest payload a frame of typ may carry; 0 for an
// unknown type.
func maxPayload(typ byte) uint32 {
	switch typ {
	case frameData:
		return maxDataPayload
	case frameReq, frameRes:
		return maxHeadPayload
	case frameReset, frameWindow, frameGoAway:
		return maxCtlPayload
	}
	return 0
}

// readFrame reads one frame from r. The payload is read into buf when it
// fits (buf's capacity), else into a new slice; it is valid until the next
// call with the same buf. A frame of an unknown type or over its type's
// limit is an error wrapping errFrameProtocol.
func readFrame(r *bufio.Reader, buf []byte) (frameHeader, []byte, error) {
	var hb [frameHeaderLen]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return frameHeader{}, nil, err
	}
	h := frameHeader{length: binary.BigEndian.Uint32(hb[0:4]), typ: hb[4], flags: hb[5], stream: binary.BigEndian.Uint32(hb[6:10])}
	lim := maxPayload(h.typ)
	if lim == 0 {
		return h, nil, fmt.Errorf("%w: unknown frame type %d", errFrameProtocol, h.typ)
	}
	if h.length > lim {
		return h, nil, fmt.Errorf("%w: frame type %d of %d bytes (at most %d)", errFrameProtocol, h.typ, h.length, lim)
	}
	var p []byte
	if int(h.length) <= cap(buf) {
		p = buf[:h.length]
	} else {
		p = make([]byte, h.length)
	}
	if _, err := io.ReadFull(r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return h, nil, err
	}
	return h, p, nil
}

// head is a REQ or RES frame's payload: a call's route and headers, or an
// answer's status, length and headers.
type head struct {
	path   string // REQ
	status int    // RES
	size   int64  // RES: the answer's length, -1 when it streams
	header http.Header
}

// appendHead encodes h (REQ: path, else status and size) as
//
//	REQ: uvarint len, path | uvarint fields | fields × (uvarint len, key, uvarint len, value)
//	RES: uvarint status | varint size | the same fields
//
// A header of several values is sent as several fields.
func appendHead(b []byte, req bool, h *head) []byte {
	if req {
		b = binary.AppendUvarint(b, uint64(len(h.path)))
		b = append(b, h.path...)
	} else {
		b = binary.AppendUvarint(b, uint64(h.status))
		b = binary.AppendVarint(b, h.size)
	}
	n := 0
	for _, vs := range h.header {
		n += len(vs)
	}
	b = binary.AppendUvarint(b, uint64(n))
	for k, vs := range h.header {
		for _, v := range vs {
			b = binary.AppendUvarint(b, uint64(len(k)))
			b = append(b, k...)
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return b
}

// parseHead decodes appendHead's encoding; an error wraps errFrameProtocol.
func parseHead(p []byte, req bool) (head, error) {
	var h head
	bad := func(what string) (head, error) {
		return head{}, fmt.Errorf("%w: malformed head: %s", errFrameProtocol, what)
	}
	str := func() (string, bool) {
		n, k := binary.Uvarint(p)
		if k <= 0 || n > uint64(len(p)-k) {
			return "", false
		}
		s := string(p[k : k+int(n)])
		p = p[k+int(n):]
		return s, true
	}
	if req {
		s, ok := str()
		if !ok {
			return bad("path")
		}
		h.path = s
	} else {
		st, k := binary.Uvarint(p)
		if k <= 0 || st < 100 || st > 999 {
			return bad("status")
		}
		p = p[k:]
		sz, k := binary.Varint(p)
		if k <= 0 || sz < -1 {
			return bad("size")
		}
		p = p[k:]
		h.status, h.size = int(st), sz
	}
	n, k := binary.Uvarint(p)
	if k <= 0 || n > maxHeadFields {
		return bad("field count")
	}
	p = p[k:]
	h.header = make(http.Header, n)
	for range n {
		key, ok := str()
		if !ok || key == "" {
			return bad("field name")
		}
		v, ok := str()
		if !ok {
			return bad("field value")
		}
		h.header[key] = append(h.header[key], v)
	}
	if len(p) != 0 {
		return bad("trailing bytes")
	}
	return h, nil
}

// appendReset encodes a RESET payload: uvarint code, then the reason.
func appendReset(b []byte, code uint64, reason string) []byte {
	b = binary.AppendUvarint(b, code)
	if len(reason) > maxCtlPayload-binary.MaxVarintLen64 {
		reason = reason[:maxCtlPayload-binary.MaxVarintLen64]
	}
	return append(b, reason...)
}

func parseReset(p []byte) (code uint64, reason string, err error) {
	code, k := binary.Uvarint(p)
	if k <= 0 {
		return 0, "", fmt.Errorf("%w: malformed reset", errFrameProtocol)
	}
	return code, string(p[k:]), nil
}

func parseWindow(p []byte) (uint32, error) {
	if len(p) != 4 {
		return 0, fmt.Errorf("%w: malformed window update", errFrameProtocol)
	}
	n := binary.BigEndian.Uint32(p)
	if n == 0 {
		return 0, fmt.Errorf("%w: empty window update", errFrameProtocol)
	}
	return n, nil
}
