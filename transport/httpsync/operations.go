package httpsync

import (
	"errors"
	"io"
	"net/http"
	"os"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/opwire"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/bodybudget"
	"github.com/synclane/synclane/transport/httperr"
)

// RouteOperations labels POST <mount>/operations in the HTTP metrics.
const RouteOperations = "operations"

// RouteOperationWatches labels GET <mount>/operations/realtime.
const RouteOperationWatches = "operation_watches"

// OperationsHandler serves POST <mount>/operations (REMOTE.md revision 1):
// one tagged-value request (opwire.ContentType) per HTTP request, a thin
// adapter over operations.Service.Run (Engine.Operations).
//
// Answers: 200 with the encoded success; an operation-level failure is an
// encoded error object (kind "error", code, message, retryable) with the
// catalog's HTTP status for its code (operation.forbidden 403,
// operation.unknown 404, operation.invalid_request 400,
// operation.result_too_large 422, operation.storage_unsupported 501,
// operation.query_failed and operation.execution_failed 500,
// sync.schema_not_ready 503, sync.internal_error 500). Refusals before
// decoding use the sync route's forms: authentication failures the JSON
// error body (401 by default), another content type 415 and a body over
// bodybudget.MaxOperationBodyBytes (or Options.MaxBodyBytes when smaller)
// 413, both as encoded operation.invalid_request errors. Request bodies
// may be gzip or zstd encoded.
type OperationsHandler struct {
	eng  *engine.Engine
	opts Options
}

// NewOperationsHandler returns the operations handler for eng; opts.Auth
// authenticates every request (fail closed without one).
func NewOperationsHandler(eng *engine.Engine, opts Options) *OperationsHandler {
	if opts.MaxBodyBytes <= 0 || opts.MaxBodyBytes > bodybudget.MaxOperationBodyBytes {
		opts.MaxBodyBytes = bodybudget.MaxOperationBodyBytes
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &OperationsHandler{eng: eng, opts: opts}
}

func writeOpError(w http.ResponseWriter, status int, err error) {
	e := syncerr.As(err)
	if status == 0 {
		status = e.Spec().HTTPStatus
	}
	httperr.NoteCode(w, string(e.Code))
	w.Header().Set("Content-Type", opwire.ContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(opwire.EncodeError(e))
}

// ServeHTTP implements http.Handler.
func (h *OperationsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rid := requestID(r)
	w.Header().Set(RequestIDHeader, rid)
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeOpError(w, http.StatusMethodNotAllowed, syncerr.New(syncerr.OperationInvalidRequest, "use POST for /operations"))
		return
	}
	if ct := mediaType(r.Header.Get("Content-Type")); ct != opwire.ContentType {
		writeOpError(w, http.StatusUnsupportedMediaType, syncerr.New(syncerr.OperationInvalidRequest, "content type must be %s, got %s", opwire.ContentType, syncerr.Quote(ct)))
		return
	}
	id, ok := auth.Authenticate(w, r, h.eng, h.opts.Auth, "httpsync.operations")
	if !ok {
		return
	}
	body, err := decodedBody(r.Context(), r, h.opts.MaxBodyBytes, new(bodybudget.Charge)) // at most 1 MiB: not charged
	if err != nil {
		status := bodyStatus(err)
		if status == 0 {
			status = http.StatusBadRequest
		}
		writeOpError(w, status, syncerr.Wrap(syncerr.OperationInvalidRequest, err, "%s", syncerr.As(err).Message))
		return
	}
	defer body.Close()
	data, err := io.ReadAll(io.LimitReader(body, h.opts.MaxBodyBytes+1))
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		writeOpError(w, http.StatusRequestTimeout, syncerr.Wrap(syncerr.OperationInvalidRequest, err, "request body not received within the server's read timeout"))
		return
	case err != nil:
		writeOpError(w, http.StatusBadRequest, syncerr.Wrap(syncerr.OperationInvalidRequest, err, "request body could not be read"))
		return
	case int64(len(data)) > h.opts.MaxBodyBytes:
		writeOpError(w, http.StatusRequestEntityTooLarge, syncerr.New(syncerr.OperationInvalidRequest, "request body exceeds %d bytes", h.opts.MaxBodyBytes))
		return
	}
	req, err := opwire.DecodeRequest(data)
	if err != nil {
		writeOpError(w, 0, err)
		return
	}
	out, err := h.eng.RunOperation(r.Context(), id, req, data) // a command runs on its partition's owner
	if err == nil {
		w.Header().Set("Content-Type", opwire.ContentType)
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(out)
		return
	}
	if syncerr.CodeOf(err) == syncerr.InternalError {
		h.opts.Logger.Warn("operation failed", zap.String("request_id", rid), zap.String("partition", id.Partition),
			zap.String("actor", id.ActorID), zap.String("operation", req.OperationID), zap.Error(err))
	}
	writeOpError(w, 0, err)
}
