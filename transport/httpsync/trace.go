package httpsync

import (
	"net/http"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/synclane/synclane/internal/tracing"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/httperr"
)

// Tracing of POST /sync (engine.Config.Tracing; docs/running.md,
// "Observability: tracing"): each request is a server span
// (synclane.sync), the child of the W3C traceparent the request carries,
// from the handler's start to the end of the answer. Its context goes
// with the request to the engine, so the steps on the partition's actor
// are spans under it. With tracing off the handler takes none of this
// path.

// spanWriter records the answer's status and protocol error code on the
// request's span.
type spanWriter struct {
	http.ResponseWriter
	span   trace.Span
	status int
	code   string
}

// traceSync starts the span of r; end ends it with the answer's status.
func traceSync(t trace.Tracer, w http.ResponseWriter, r *http.Request) (*spanWriter, *http.Request) {
	ctx, span := tracing.StartServer(r.Context(), t, r.Header, tracing.SpanSync)
	return &spanWriter{ResponseWriter: w, span: span}, r.WithContext(ctx)
}

// request records the decoded request (nil msg: not decoded here;
// forwarded: sent on to the partition's owner).
func (s *spanWriter) request(partition string, msg *ssp2.Message, forwarded bool) {
	tracing.SetRequest(s.span, partition, msg, forwarded)
}

// end ends the span.
func (s *spanWriter) end() {
	if s.span.IsRecording() {
		status := s.status
		if status == 0 {
			status = http.StatusOK
		}
		s.span.SetAttributes(tracing.HTTPStatus.Int(status))
		if s.code != "" {
			s.span.SetAttributes(tracing.ErrorCode.String(s.code))
		}
		if status >= 500 {
			s.span.SetStatus(codes.Error, s.code)
		}
	}
	s.span.End()
}

func (s *spanWriter) WriteHeader(status int) {
	if s.status == 0 && status >= 200 {
		s.status = status
	}
	s.ResponseWriter.WriteHeader(status)
}

func (s *spanWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (s *spanWriter) Flush() { _ = http.NewResponseController(s.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController and httperr.NoteCode reach the
// writers below.
func (s *spanWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// NoteCode implements httperr.CodeNoter: the code is kept for the span
// and handed on to the metrics recorder below.
func (s *spanWriter) NoteCode(code string) {
	s.code = code
	httperr.NoteCode(s.ResponseWriter, code)
}
