package peer

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/internal/tracing"
	"github.com/synclane/synclane/protocol/opwire"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/httperr"
)

// HandlerOptions configure a Handler.
type HandlerOptions struct {
	// Secret authenticates the calling members (required).
	Secret Secret
	// MaxBody caps a forwarded request's body (the SSP2 request as the
	// member the client reached decoded it; default 128 MiB, the public
	// route's default) and MaxJSONBody a realtime call's (default 16 MiB).
	MaxBody, MaxJSONBody int64
	// WriteTimeout, when positive, is the write deadline of each answer,
	// from when the engine has it (as the public sync route does).
	WriteTimeout time.Duration
	// Logger receives the handler's logs (default: no-op).
	Logger *zap.Logger
}

// Handler serves the member routes (Prefix) of one member's engine: the
// calls another member forwards because this member owns the partition.
// Each runs as a local call (the engine's *Owned methods): the serve gate
// is verified here, per page of a streamed bootstrap, and a bootstrap
// stays streamed to the forwarding member.
type Handler struct {
	eng    *engine.Engine
	opts   HandlerOptions
	frames framesConns
}

// NewHandler returns the member routes of eng.
func NewHandler(eng *engine.Engine, opts HandlerOptions) *Handler {
	if opts.MaxBody <= 0 {
		opts.MaxBody = 128 << 20
	}
	if opts.MaxJSONBody <= 0 {
		opts.MaxJSONBody = 16 << 20
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &Handler{eng: eng, opts: opts}
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	from, err := h.opts.Secret.Verify(r, time.Now())
	if err != nil {
		h.opts.Logger.Warn("member call refused: not signed with the cluster secret", zap.String("path", r.URL.Path),
			zap.String("remote", r.RemoteAddr), zap.Error(err))
		writeRefusal(w, err)
		return
	}
	if r.URL.Path == pathFrames {
		h.serveFrames(w, r, from)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		httperr.WriteStatus(w, http.StatusMethodNotAllowed, syncerr.New(syncerr.InvalidRequest, "member calls are POST"))
		return
	}
	h.route(w, r, from)
}

// route serves a member call from member from (authenticated: by its
// signature over HTTP, by its connection's over the frames transport).
func (h *Handler) route(w http.ResponseWriter, r *http.Request, from string) {
	switch r.URL.Path {
	case pathProbe:
		h.answerJSON(w, struct{}{}, nil)
	case pathSync:
		h.sync(w, r, from)
	case pathClientState:
		var c clientStateCall
		if !h.readJSON(w, r, &c) {
			return
		}
		id := engine.Identity{ActorID: c.Identity.ActorID, Partition: c.Identity.Partition, Grants: c.Identity.Grants}
		st, err := h.eng.ClientStateOwned(r.Context(), id, c.ClientID)
		h.answerJSON(w, st, err)
	case pathDeltas:
		var c deltasCall
		if !h.readJSON(w, r, &c) {
			return
		}
		res, err := h.eng.BuildDeltasOwned(r.Context(), c.Partition, c.Request)
		if err != nil {
			h.answerJSON(w, nil, err)
			return
		}
		a, err := encodeDeltas(res)
		h.answerJSON(w, a, err)
	case pathAck:
		var c ackCall
		if !h.readJSON(w, r, &c) {
			return
		}
		h.answerJSON(w, struct{}{}, h.eng.AckOwned(r.Context(), c.Partition, c.Acks))
	case pathOperation:
		h.operation(w, r)
	case pathRelease:
		var c releaseCall
		if !h.readJSON(w, r, &c) {
			return
		}
		h.answerJSON(w, struct{}{}, h.eng.ReleaseOwned(r.Context(), c.Partition))
	case pathMember:
		st, _ := h.eng.ClusterStats()
		h.answerJSON(w, st, nil)
	case pathEvents:
		var c eventsCall
		if !h.readJSON(w, r, &c) {
			return
		}
		var evs []events.Event
		if ring := h.eng.Events(); ring != nil {
			evs = ring.Recent(c.After, min(max(c.Limit, 1), maxEventsPerCall))
		}
		h.answerJSON(w, evs, nil)
	default:
		httperr.WriteStatus(w, http.StatusNotFound, syncerr.New(syncerr.NotFound, "no member route %s", r.URL.Path))
	}
}

// sync serves a forwarded SSP2 request and streams the answer.
func (h *Handler) sync(w http.ResponseWriter, r *http.Request, from string) {
	id, err := decodeIdentity(r.Header.Get(IdentityHeader))
	if err != nil {
		httperr.Write(w, syncerr.Wrap(syncerr.InvalidRequest, err, "forwarded request without a readable identity"))
		return
	}
	ctx, span := r.Context(), tracing.Off
	if t := h.eng.Tracer(); t != nil {
		// The forwarding member's traceparent: this member's sync span
		// continues the client's trace (trace.go of package httpsync does
		// the same for the public route).
		ctx, span = tracing.StartServer(ctx, t, r.Header, tracing.SpanSync)
		defer span.End()
		if span.IsRecording() {
			span.SetAttributes(tracing.Member.String(from))
		}
	}
	msg, err := ssp2.ReadRequest(r.Body, h.opts.MaxBody)
	if err != nil {
		failSpan(span, err)
		httperr.Write(w, err)
		return
	}
	tracing.SetRequest(span, id.Partition, msg, false)
	rep, err := h.eng.SyncOwned(ctx, id, msg)
	failSpan(span, err)
	if h.opts.WriteTimeout > 0 {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout))
	}
	if err != nil {
		h.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/vnd.syncular.sync.v2")
	w.WriteHeader(http.StatusOK)
	out := &flushWriter{bw: bufio.NewWriterSize(w, 32<<10), rc: http.NewResponseController(w)}
	if _, err := rep.WriteTo(out); err != nil {
		h.opts.Logger.Debug("forwarded response stream aborted", zap.String("member", from), zap.String("partition", id.Partition), zap.Error(err))
		return
	}
	// The rest goes to the server's buffer without a flush: an answer the
	// handler completes within it gets a Content-Length (the forwarding
	// member then hands it on whole, as a local answer goes out).
	_ = out.bw.Flush()
}

// operation serves a forwarded remote command (REMOTE.md revision 1):
// the request as the client sent it, the encoded result back.
func (h *Handler) operation(w http.ResponseWriter, r *http.Request) {
	id, err := decodeIdentity(r.Header.Get(IdentityHeader))
	if err != nil {
		httperr.Write(w, syncerr.Wrap(syncerr.OperationInvalidRequest, err, "forwarded operation without a readable identity"))
		return
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, h.opts.MaxJSONBody+1))
	if err == nil && int64(len(b)) > h.opts.MaxJSONBody {
		err = errors.New("body over the limit")
	}
	if err != nil {
		httperr.Write(w, syncerr.Wrap(syncerr.OperationInvalidRequest, err, "unreadable forwarded operation"))
		return
	}
	req, err := opwire.DecodeRequest(b)
	if err != nil {
		httperr.Write(w, err)
		return
	}
	out, err := h.eng.RunOperationOwned(r.Context(), id, req)
	if err != nil {
		h.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", opwire.ContentType)
	_, _ = w.Write(out)
}

// flushWriter buffers the answer and, on Flush (after each streamed page
// and at the end), sends it to the forwarding member at once.
type flushWriter struct {
	bw *bufio.Writer
	rc *http.ResponseController
}

func (f *flushWriter) Write(p []byte) (int, error) { return f.bw.Write(p) }

func (f *flushWriter) Flush() error {
	if err := f.bw.Flush(); err != nil {
		return err
	}
	return f.rc.Flush()
}

// fail answers an engine error: 421 for a partition this member does not
// own, the protocol's JSON error otherwise.
func (h *Handler) fail(w http.ResponseWriter, err error) {
	if errors.Is(err, engine.ErrNotOwner) {
		httperr.WriteStatus(w, http.StatusMisdirectedRequest, syncerr.Wrap(syncerr.InternalError, err, "this member does not own the partition"))
		return
	}
	httperr.Write(w, err)
}

func (h *Handler) readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := io.ReadAll(io.LimitReader(r.Body, h.opts.MaxJSONBody+1))
	if err == nil && int64(len(b)) > h.opts.MaxJSONBody {
		err = errors.New("body over the limit")
	}
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		httperr.Write(w, syncerr.Wrap(syncerr.InvalidRequest, err, "unreadable member call"))
		return false
	}
	return true
}

func (h *Handler) answerJSON(w http.ResponseWriter, v any, err error) {
	if err != nil {
		h.fail(w, err)
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		httperr.Write(w, syncerr.Wrap(syncerr.InternalError, err, "the answer could not be encoded"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// failSpan marks span (a forwarded request's) failed with err's protocol
// code; nothing when err is nil or the span not recording.
func failSpan(span trace.Span, err error) {
	if err != nil {
		tracing.Fail(span, string(syncerr.CodeOf(err)), err)
	}
}
