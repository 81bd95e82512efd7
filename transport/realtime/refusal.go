package realtime

import (
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
// refused with the protocol's JSON error instead (see answer). Everything
// else, the 101 and the hijack, passes through (Unwrap).
type refusalWriter struct {
	http.ResponseWriter
	status int
	text   []byte
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
