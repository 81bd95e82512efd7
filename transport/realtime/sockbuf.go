package realtime

import (
	"bufio"
	"encoding/binary"
	"errors"
	"net"
	"sync"
)

// Buffers of an idle socket (issue 45: 100,000 sockets on one node).
//
// net/http hands a hijacked connection over with a 4 KiB bufio.Reader and
// a 4 KiB bufio.Writer, and coder/websocket keeps both for the socket's
// life: 8 KiB per socket that an idle socket never uses. On a connection
// with a file descriptor (a plain TCP connection on a Unix system) the
// socket gets small ones instead:
//
//   - reads: a small bufio.Reader over the watchedConn, which reads the
//     network into a pooled buffer taken only once the kernel has bytes
//     (a raw read that parks in the runtime's poller while there are
//     none) and given back as soon as the WebSocket has taken them all;
//   - writes: a small bufio.Writer over a frameWriter, which follows the
//     WebSocket frames coder/websocket writes and sends each frame's
//     header and payload with one writev, without copying the payload.
//
// Other connections (TLS terminated in the process, a connection without
// a file descriptor) keep 4 KiB buffers of their own.

const (
	// smallReadBuf is the bufio.Reader size of a socket read through
	// pooled buffers: a frame header and a short control message.
	smallReadBuf = 64
	// smallWriteBuf is the bufio.Writer size in front of a frameWriter:
	// the longest frame header (10 bytes) and a few payload bytes.
	smallWriteBuf = 16
	// netReadBuf is the size of the pooled buffers the network is read
	// into; reads for at least netReadDirect bytes go to the caller's
	// slice instead.
	netReadBuf    = 4 << 10
	netReadDirect = 1 << 10
)

// readBufs holds the pooled network read buffers (*[netReadBuf]byte).
var readBufs = sync.Pool{New: func() any { return new([netReadBuf]byte) }}

// frameWriter sends the WebSocket frames written to it (in any pieces:
// coder/websocket writes each frame's header, then its payload, through a
// bufio.Writer of smallWriteBuf bytes) with one write per frame where it
// can: the bytes of a frame's start are held (at most the bufio.Writer's
// size plus a header) until the frame's payload arrives, then sent with
// it in one writev. A frame is written in full before Write returns, so
// nothing is held between frames: the bufio.Writer's Flush at a frame's
// end, which does not reach this writer when the bufio.Writer holds no
// bytes, is never needed here. Only one goroutine writes at a time
// (coder/websocket's frame lock).
type frameWriter struct {
	conn net.Conn
	// held are bytes of the current frame not sent yet (its header, and
	// perhaps the start of its payload).
	held  [32]byte
	nheld int
	// hdrLen is the current frame's header length once known (0 while its
	// first two bytes are not in); payload its payload bytes not yet
	// taken.
	hdrLen  int
	payload uint64
	inBody  bool
	vec     [2][]byte
}

// errFrameHeader reports bytes that are not a WebSocket frame header.
var errFrameHeader = errors.New("realtime: malformed frame header written")

func newFrameWriter(conn net.Conn) *bufio.Writer {
	return bufio.NewWriterSize(&frameWriter{conn: conn}, smallWriteBuf)
}

// Write implements io.Writer.
func (f *frameWriter) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		if !f.inBody {
			// A header byte: hold it.
			if f.nheld == len(f.held) { // cannot happen: a header is at most 14 bytes
				return total - len(p), errFrameHeader
			}
			f.held[f.nheld] = p[0]
			f.nheld++
			p = p[1:]
			if f.headerDone() {
				if f.payload == 0 {
					if err := f.flushHeld(); err != nil {
						return total - len(p), err
					}
					f.reset()
					continue
				}
				f.inBody = true
			}
			continue
		}
		k := len(p)
		if uint64(k) > f.payload {
			k = int(f.payload)
		}
		chunk := p[:k]
		p = p[k:]
		f.payload -= uint64(k)
		if f.payload > 0 && f.nheld+k <= len(f.held) {
			// The start of the payload, more to come: hold it too.
			f.nheld += copy(f.held[f.nheld:], chunk)
			continue
		}
		if err := f.send(chunk); err != nil {
			return total - len(p) - k, err
		}
		if f.payload == 0 {
			f.reset()
		}
	}
	return total, nil
}

// headerDone reports whether the held bytes hold the current frame's
// whole header, and sets hdrLen and payload once they do.
func (f *frameWriter) headerDone() bool {
	if f.hdrLen == 0 {
		if f.nheld < 2 {
			return false
		}
		n := 2
		switch f.held[1] & 0x7f {
		case 126:
			n += 2
		case 127:
			n += 8
		}
		if f.held[1]&0x80 != 0 { // masked (a client's frame; not written by a server)
			n += 4
		}
		f.hdrLen = n
	}
	if f.nheld < f.hdrLen {
		return false
	}
	switch l := f.held[1] & 0x7f; l {
	case 126:
		f.payload = uint64(binary.BigEndian.Uint16(f.held[2:4]))
	case 127:
		f.payload = binary.BigEndian.Uint64(f.held[2:10])
	default:
		f.payload = uint64(l)
	}
	return true
}

// send writes the held bytes and chunk with one writev.
func (f *frameWriter) send(chunk []byte) error {
	if f.nheld == 0 {
		_, err := f.conn.Write(chunk)
		return err
	}
	f.vec[0], f.vec[1] = f.held[:f.nheld], chunk
	bufs := net.Buffers(f.vec[:])
	_, err := bufs.WriteTo(f.conn)
	f.vec[0], f.vec[1] = nil, nil
	f.nheld = 0
	return err
}

// flushHeld writes the held bytes.
func (f *frameWriter) flushHeld() error {
	if f.nheld == 0 {
		return nil
	}
	_, err := f.conn.Write(f.held[:f.nheld])
	f.nheld = 0
	return err
}

// reset starts the next frame.
func (f *frameWriter) reset() {
	f.nheld, f.hdrLen, f.payload, f.inBody = 0, 0, 0, false
}
