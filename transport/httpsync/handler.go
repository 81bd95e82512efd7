// Package httpsync is synclane's HTTP transport: POST <mount>/sync with
// content type application/vnd.syncular.sync.v2, a thin adapter over
// engine.Engine.Sync.
//
// Errors found before the response starts are answered as the protocol's
// JSON error body with the catalog's HTTP status; once the 200 response has
// started, errors travel in-band as an ERROR frame. Request bodies may be
// gzip- or zstd-encoded; responses are compressed by Accept-Encoding (zstd,
// then gzip, then identity).
package httpsync

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/accesslog"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/bodybudget"
	"github.com/synclane/synclane/transport/httperr"
)

// ContentType is the SSP2 media type of requests and responses.
const ContentType = "application/vnd.syncular.sync.v2"

// Options configure the protocol handlers (NewHandler, NewSegmentHandler,
// NewBlobHandler, NewOperationsHandler) and, embedded in MuxOptions, a
// Mux. Only Auth is required; the zero value of every other field takes
// the documented default. Give every handler of one server the same
// Options (one BodyBudget shared, one authenticator).
type Options struct {
	// Auth authenticates every request (required): it names the actor and
	// the partition (engine.Identity) or refuses with 401
	// sync.auth_required, counted in synclane_auth_failures_total. Use
	// auth.AuthenticatorFunc for a function of the host's, auth.JWTAuth
	// or auth.JWKSAuth for tokens, auth.DevAuth in development only.
	Auth auth.Authenticator
	// MaxBodyBytes limits the decompressed request body
	// (default bodybudget.DefaultMaxBodyBytes); a larger one is answered 413
	// sync.invalid_request (at once when its Content-Length says so).
	MaxBodyBytes int64
	// BodyBudget bounds the request-body bytes held at once by every
	// handler (and realtime hub) given the same budget: a body that finds
	// no room within the budget's wait is answered 503 sync.rate_limited
	// with Retry-After (see package bodybudget). nil: NewHandler (or
	// NewMux, for all its routes) creates one of bodybudget.DefaultLimit.
	BodyBudget *bodybudget.Budget
	// CompressMinBytes is the answer size from which answers are
	// compressed (default DefaultCompressMinBytes; negative compresses
	// every answer the client accepts compressed). See the policy in
	// compress.go.
	CompressMinBytes int
	// Logger receives request-level logs (default: no-op).
	Logger *zap.Logger
	// WriteTimeout cuts off a client that stops reading its answer: each
	// write of the response must make progress within it (the deadline is
	// renewed as bytes flow), so a slow but reading client may take longer
	// in total while one that never reads is disconnected and the reply's
	// memory freed. 0 disables it. Set http.Server.WriteTimeout too: it
	// resets the connection's write deadline for every request.
	WriteTimeout time.Duration
	// ReadTimeout is how long a blob upload may go without receiving a
	// byte of its body (its read deadline is renewed as bytes arrive, so a
	// large upload may take longer in total): then it is answered 408
	// sync.invalid_request, as POST /sync answers a body that misses
	// http.Server.ReadTimeout. 0: BlobProgressTimeout. Set it to the
	// server's read timeout (synclane serve: --read-timeout).
	ReadTimeout time.Duration
	// Observer, when set, is told of every request when it ends
	// (observe.go); the admin console's request chart is one.
	Observer RequestObserver
}

// Handler serves POST /sync. Mount it under any prefix with
// http.StripPrefix or at "<mount>/sync" directly; it does not look at the
// path.
type Handler struct {
	eng  *engine.Engine
	opts Options
}

// NewHandler returns the POST /sync handler for eng: it authenticates
// the request with opts.Auth, reads the body within opts' limits, calls
// eng.SyncEncoded and streams the Reply; errors before the first response
// byte are answered as the protocol's JSON error body with the catalog
// status. Zero fields of opts take their defaults.
func NewHandler(eng *engine.Engine, opts Options) *Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = bodybudget.DefaultMaxBodyBytes
	}
	if opts.BodyBudget == nil {
		opts.BodyBudget = bodybudget.New(bodybudget.Options{})
	}
	if opts.CompressMinBytes == 0 {
		opts.CompressMinBytes = DefaultCompressMinBytes
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &Handler{eng: eng, opts: opts}
}

// RequestIDHeader carries a request's id: a caller's own (1-128 of
// A-Z a-z 0-9 . _ -) is kept, anything else is replaced by a fresh UUID.
// The response echoes it and every log line of the request carries it as
// field request_id.
const RequestIDHeader = "X-Request-Id"

// requestID returns the id of r (see RequestIDHeader).
func requestID(r *http.Request) string { return accesslog.HeaderRequestID(r) }

// serve answers one sync request (ServeHTTP, observe.go, wraps it).
func (h *Handler) serve(w http.ResponseWriter, r *http.Request) {
	var sw *spanWriter // trace.go; nil with tracing off
	if t := h.eng.Tracer(); t != nil {
		sw, r = traceSync(t, w, r)
		w = sw
		defer sw.end()
	}
	rid := requestID(r)
	w.Header().Set(RequestIDHeader, rid)
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		httperr.WriteStatus(w, http.StatusMethodNotAllowed, syncerr.New(syncerr.InvalidRequest, "use POST for /sync"))
		return
	}
	if ct := mediaType(r.Header.Get("Content-Type")); ct != ContentType {
		httperr.WriteStatus(w, http.StatusUnsupportedMediaType, syncerr.New(syncerr.InvalidRequest, "content type must be %s, got %s", ContentType, syncerr.Quote(ct)))
		return
	}
	id, ok := auth.Authenticate(w, r, h.eng, h.opts.Auth, "httpsync")
	if !ok {
		return
	}
	charge := h.opts.BodyBudget.Charge()
	defer charge.Release() // on every path: errors, a panic, a client gone
	body, err := readRequestBody(r.Context(), r, h.opts.MaxBodyBytes, charge)
	if err != nil {
		if errors.Is(err, bodybudget.ErrBusy) {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(bodybudget.RetryAfter.Seconds()))))
			h.opts.Logger.Info("sync request refused: the in-flight request-body budget is full", zap.String("request_id", rid),
				zap.String("partition", id.Partition), zap.String("actor", id.ActorID), zap.Int64("content_length", r.ContentLength),
				zap.Int64("budget_bytes", h.opts.BodyBudget.Limit()))
		}
		httperr.WriteStatus(w, bodyStatus(err), err)
		return
	}
	// In cluster mode a request for a partition another member owns goes
	// to it undecoded (SyncEncoded); msg is nil then.
	rep, msg, err := h.eng.SyncEncoded(r.Context(), id, body)
	if sw != nil {
		sw.request(id.Partition, msg, rep != nil)
	}
	if msg != nil {
		noteKind(w, RequestKind(msg))
	} else if rep != nil {
		noteKind(w, KindForwarded)
	}
	charge.Release() // the engine is done with the request (the answer holds none of it)
	if h.opts.WriteTimeout > 0 {
		// The answer's write deadline starts now, however long the engine
		// took (http.Server.WriteTimeout counts from the request's start).
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout))
	}
	if err != nil {
		e := syncerr.As(err)
		if e.Code == syncerr.InternalError {
			h.opts.Logger.Warn("sync request failed", zap.String("request_id", rid), zap.String("partition", id.Partition),
				zap.String("actor", id.ActorID), zap.Error(err))
		}
		httperr.Write(w, e)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", ContentType)
	hdr.Set("Cache-Control", "no-store")
	hdr.Add("Vary", "Accept-Encoding")
	var dst io.Writer = w
	if h.opts.WriteTimeout > 0 {
		dst = newStallWriter(w, h.opts.WriteTimeout)
	}
	out := newAnswerWriter(w, dst, r.Header.Get("Accept-Encoding"), h.opts.CompressMinBytes)
	if _, err := rep.WriteTo(out); err != nil {
		h.opts.Logger.Debug("response stream aborted", zap.String("request_id", rid), zap.String("partition", id.Partition), zap.Error(err))
		if rep.Forwarded() {
			// The owning cluster member's answer broke off: abort the
			// response, so the client sees a broken one (HTTP/1.1: the
			// connection closes before the last chunk; HTTP/2: the stream
			// is reset) and retries, never a complete-looking truncated
			// answer. (A local answer fails only when writing to the
			// client does.)
			panic(http.ErrAbortHandler)
		}
	}
	if err := out.Close(); err != nil {
		h.opts.Logger.Debug("response stream close failed", zap.String("request_id", rid), zap.Error(err))
	}
}

func mediaType(v string) string {
	if i := strings.IndexByte(v, ';'); i >= 0 {
		v = v[:i]
	}
	return strings.ToLower(strings.TrimSpace(v))
}

// maxZstdWindow caps the window a zstd request body may declare (a frame
// declaring more is refused as invalid): the decoder allocates the whole
// window, so without a cap a few dozen bytes could make it allocate up to
// its 64 MiB memory limit. 8 MiB is the window zstd encoders use by
// default (a larger body is encoded with the same window).
const maxZstdWindow = 8 << 20

// zstdOverhead is how much larger than its content a zstd body may be
// (frame header and checksum, 3 bytes a block of 128 KiB, rounded up): the
// compressed body is refused beyond maxBody plus this.
func zstdOverhead(maxBody int64) int64 { return maxBody/1024 + 1024 }

// bodyError is a failure reading or decoding the request body as a
// sync.invalid_request: the read timeout's (it keeps the deadline error as
// its cause, which bodyStatus answers with 408) or what went wrong.
func bodyError(err error, what string) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return syncerr.Wrap(syncerr.InvalidRequest, err, "request body not received within the server's read timeout")
	}
	return syncerr.Wrap(syncerr.InvalidRequest, err, "%s", what)
}

// bodyStatus is the HTTP status for an error of decodedBody or of reading
// the body it returned: 408 when the read timeout cut the body off, 413
// when it exceeded the limit, 503 when the body budget had no room (or the
// client left while waiting for it), else 0 (the error code's own status).
func bodyStatus(err error) int {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return http.StatusRequestTimeout
	case errors.Is(err, ssp2.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, bodybudget.ErrBusy), errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable
	}
	return 0
}

// decodedBody undoes the request's Content-Encoding. A zstd body is read
// whole first (at most maxBody plus zstdOverhead, charged to c as
// readCharged charges) and then decoded from memory, so a client that
// sends part of it and stalls holds only the bytes it sent, never a
// decoder and its window. Errors carry sync.invalid_request (or the
// budget's sync.rate_limited); bodyStatus gives their HTTP status.
func decodedBody(ctx context.Context, r *http.Request, maxBody int64, c *bodybudget.Charge) (io.ReadCloser, error) {
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		return r.Body, nil
	case "gzip", "x-gzip":
		zr, err := pooledGzipReader(r.Body)
		if err != nil {
			return nil, bodyError(err, "request body is not valid gzip")
		}
		return zr, nil
	case "zstd":
		comp, err := readCharged(ctx, r.Body, r.ContentLength, maxBody+zstdOverhead(maxBody), 1, c, "zstd request body")
		if err != nil {
			return nil, err
		}
		zr, err := pooledZstdReader(bytes.NewReader(comp))
		if err != nil {
			return nil, syncerr.Wrap(syncerr.InvalidRequest, err, "request body is not valid zstd (windows above %d bytes are refused)", maxZstdWindow)
		}
		return &returnOnClose{ReadCloser: zr, c: c, n: int64(len(comp))}, nil
	default:
		return nil, syncerr.New(syncerr.InvalidRequest, "unsupported Content-Encoding %s (use gzip, zstd or identity)", syncerr.Quote(enc))
	}
}

// stallWriter renews the connection's write deadline as the response
// makes progress (see Options.WriteTimeout).
type stallWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	renewed time.Time
	ok      bool // the connection supports write deadlines
}

func newStallWriter(w http.ResponseWriter, timeout time.Duration) *stallWriter {
	s := &stallWriter{w: w, rc: http.NewResponseController(w), timeout: timeout}
	s.ok = s.renew(time.Now())
	return s
}

func (s *stallWriter) renew(now time.Time) bool {
	s.renewed = now
	return s.rc.SetWriteDeadline(now.Add(s.timeout)) == nil
}

// stallChunk bounds one write, so a large frame renews the deadline as
// its bytes flow rather than having to go out whole within one timeout.
const stallChunk = 64 << 10

func (s *stallWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		// Renewing costs a timer update: do it once an eighth of the
		// timeout has passed, so a write still gets at least 7/8 of it.
		if now := time.Now(); s.ok && now.Sub(s.renewed) >= s.timeout/8 {
			s.renew(now)
		}
		c := p[:min(len(p), stallChunk)]
		m, err := s.w.Write(c)
		n += m
		if err != nil {
			return n, err
		}
		p = p[len(c):]
	}
	return n, nil
}

func pickEncoding(accept string) string {
	has := map[string]bool{}
	for _, part := range strings.Split(accept, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if q, ok := strings.CutPrefix(strings.ReplaceAll(params, " ", ""), "q="); ok {
			if v, err := strconv.ParseFloat(q, 64); err == nil && v == 0 {
				continue // explicitly refused
			}
		}
		has[strings.ToLower(strings.TrimSpace(name))] = true
	}
	switch {
	case has["zstd"]:
		return "zstd"
	case has["gzip"]:
		return "gzip"
	}
	return ""
}
