package realtime

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"strings"

	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/httperr"
)

// maxRefusalText bounds the refusal text a refusalWriter keeps.
const maxRefusalText = 1 << 10

// refusalWriter stands between websocket.Accept and the response: Accept
// answers a bad handshake (426, 400, 405) or a refused Origin (403) with
// plain text, which refusalWriter holds back so that the upgrade is
// refused with the protocol's JSON error instead (see answer). The 101
// passes through (Unwrap); the hijack too, with the connection's reads
// watched (Hijack).
type refusalWriter struct {
	http.ResponseWriter
	status int
	text   []byte
	// watch, when set, follows the hijacked connection's reads.
	watch *readWatch
}

// Hijack hijacks the connection; with watch set, the socket reads it
// through a watchedConn: the bytes net/http read ahead of the handshake's
// end first, then the network. net/http's 4 KiB buffers are dropped: a
// connection with a file descriptor gets small ones (sockbuf.go), any
// other a 4 KiB reader of its own and net/http's writer.
func (w *refusalWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil || w.watch == nil {
		return conn, brw, err
	}
	var head []byte
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		head = bytes.Clone(b)
	}
	wc := w.watch.wrap(conn, head)
	if wc.raw != nil {
		return wc, bufio.NewReadWriter(bufio.NewReaderSize(wc, smallReadBuf), newFrameWriter(conn)), nil
	}
	return wc, bufio.NewReadWriter(bufio.NewReaderSize(wc, 4096), brw.Writer), nil
}

// WriteHeader holds back an error status; others pass through.
func (w *refusalWriter) WriteHeader(code int) {
	if code >= http.StatusBadRequest {
		w.status = code
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write keeps the body of a held-back refusal (its first
// maxRefusalText bytes); otherwise it passes through.
func (w *refusalWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		return w.ResponseWriter.Write(b)
	}
	if room := maxRefusalText - len(w.text); room > 0 {
		w.text = append(w.text, b[:min(len(b), room)]...)
	}
	return len(b), nil
}

// Unwrap exposes the response for the hijack and http.ResponseController.
func (w *refusalWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// answer writes the held-back refusal as the JSON error (with Accept's
// status): sync.forbidden for a refused Origin, sync.invalid_request for
// a bad handshake. It reports whether there was one.
func (w *refusalWriter) answer() bool {
	if w.status == 0 {
		return false
	}
	code := syncerr.InvalidRequest
	if w.status == http.StatusForbidden {
		code = syncerr.Forbidden
	}
	msg := strings.TrimSpace(string(w.text))
	if msg == "" {
		msg = http.StatusText(w.status)
	}
	httperr.WriteStatus(w.ResponseWriter, w.status, syncerr.New(code, "WebSocket upgrade refused: %s", msg))
	return true
}
