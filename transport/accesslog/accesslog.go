// Package accesslog writes one log line per HTTP request: the access log
// of synclane serve.
//
// Handler wraps the whole server. For every request it logs, at info
// level, once the handler has returned (for a WebSocket, once the socket
// has closed), the message "http request" with these fields, whose names
// are stable:
//
//	method      the request method
//	route       the pattern of the route that served it (ServeMux syntax, e.g.
//	            "/sync" or "GET /segments/{id}"; "none" when no route matched),
//	            never the raw path
//	status      the status answered (101 for a WebSocket upgrade; 200 when the
//	            handler wrote nothing; 500 when it panicked)
//	bytes       response body bytes written (a hijacked connection's traffic is
//	            not counted)
//	duration    time from the request's arrival to the handler's return
//	request_id  the request's id, echoed in the X-Request-Id response header
//	actor       the authenticated actor, when the route authenticated one
//	partition   the authenticated partition, likewise
//
// The request id is the caller's X-Request-Id when it is 1-128 characters
// of A-Z a-z 0-9 . _ - (the rule of the sync routes), otherwise a fresh
// UUID, which is also put in the request's X-Request-Id header so that the
// routes' own log lines carry the same id.
//
// The wrapper keeps what the routes need of the connection: its
// ResponseWriter implements http.Flusher and http.Hijacker and unwraps
// (http.ResponseController), so streamed answers and WebSocket upgrades
// pass through.
package accesslog

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
)

// Header is the request id header read and echoed.
const Header = "X-Request-Id"

// Message is the message of every access log line.
const Message = "http request"

// Handler returns next wrapped so that each request it serves is logged to
// log at info level (see the package comment). A nil log logs nothing.
func Handler(next http.Handler, log *zap.Logger) http.Handler {
	if log == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := HeaderRequestID(r)
		e := &entry{requestID: id}
		r = r.WithContext(context.WithValue(r.Context(), entryKey{}, e))
		if r.Header.Get(Header) != id {
			r.Header = r.Header.Clone()
			r.Header.Set(Header, id)
		}
		w.Header().Set(Header, id)
		rw := &writer{ResponseWriter: w}
		done := false
		defer func() {
			ce := log.Check(zap.InfoLevel, Message)
			if ce == nil {
				return // info is off: no fields to build
			}
			status := rw.status
			switch {
			case status != 0:
			case done:
				status = http.StatusOK // the handler wrote nothing
			default:
				status = http.StatusInternalServerError // the handler panicked
			}
			route := r.Pattern
			if route == "" {
				route = "none"
			}
			actor, partition := e.identity()
			fields := []zap.Field{
				zap.String("method", r.Method), zap.String("route", route), zap.Int("status", status),
				zap.Int64("bytes", rw.bytes), zap.Duration("duration", time.Since(start)), zap.String("request_id", id),
			}
			if actor != "" {
				fields = append(fields, zap.String("actor", actor))
			}
			if partition != "" {
				fields = append(fields, zap.String("partition", partition))
			}
			ce.Write(fields...)
		}()
		next.ServeHTTP(rw, r)
		done = true
	})
}

// NoteIdentity records the authenticated actor and partition of the
// request whose context is ctx, for its access log line. Outside Handler
// it does nothing.
func NoteIdentity(ctx context.Context, actor, partition string) {
	if e, ok := ctx.Value(entryKey{}).(*entry); ok {
		e.mu.Lock()
		e.actor, e.partition = actor, partition
		e.mu.Unlock()
	}
}

// RequestID returns the request id Handler gave the request whose context
// is ctx, or "" outside Handler.
func RequestID(ctx context.Context) string {
	if e, ok := ctx.Value(entryKey{}).(*entry); ok {
		return e.requestID
	}
	return ""
}

type entryKey struct{}

// entry is what the routes tell the access log line of one request.
type entry struct {
	requestID string
	mu        sync.Mutex
	actor     string
	partition string
}

func (e *entry) identity() (string, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.actor, e.partition
}

const idChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"

// HeaderRequestID returns r's X-Request-Id when it is a valid one (at most
// 128 characters of letters, digits, '.', '_' and '-'), else a new UUID.
func HeaderRequestID(r *http.Request) string {
	if v := r.Header.Get(Header); len(v) > 0 && len(v) <= 128 && strings.Trim(v, idChars) == "" {
		return v
	}
	return uuid.NewString()
}

// writer records the status and body bytes of an answer.
type writer struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *writer) WriteHeader(status int) {
	if w.status == 0 && (status >= 200 || status == http.StatusSwitchingProtocols) {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *writer) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// ReadFrom keeps the connection's io.ReaderFrom (sendfile) for io.Copy.
func (w *writer) ReadFrom(src io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	var n int64
	var err error
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(src)
	} else {
		n, err = io.Copy(struct{ io.Writer }{w.ResponseWriter}, src)
	}
	w.bytes += n
	return n, err
}

// Flush implements http.Flusher.
func (w *writer) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack implements http.Hijacker (WebSocket upgrades).
func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return c, brw, err
}

// Unwrap lets http.ResponseController reach the connection (deadlines,
// full duplex).
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }
