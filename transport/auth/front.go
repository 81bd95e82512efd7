package auth

import (
	"net/http"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/accesslog"
	"github.com/synclane/synclane/transport/httperr"
)

// ReportAuthFailure publishes a refused authentication of r to eng's event
// ring (nothing when eng is nil or has no ring): source names the
// transport, code is the refusal's error code, and the event's message
// says why (message) and from which address and path. Never the token.
func ReportAuthFailure(eng *engine.Engine, source string, r *http.Request, code, message string) {
	if eng == nil {
		return
	}
	eng.Events().Emit(events.Event{Kind: events.AuthFailed, Source: source, Code: code,
		Message: message + " (" + r.Method + " " + r.URL.Path + " from " + r.RemoteAddr + ")"})
}

// AuthenticateUpgrade is the common front of a WebSocket route: it refuses
// (and answers) a request when eng is nil (the route is not started: 503),
// the method is not GET (405), no authenticator is configured (500, fail
// closed) or authentication fails (the authenticator's coded error, an
// uncoded one as sync.auth_required; reported to the event ring under
// source). Otherwise it returns the identity and true; what it answered
// names the route as what.
func AuthenticateUpgrade(w http.ResponseWriter, r *http.Request, eng *engine.Engine, auth Authenticator, source, what string) (engine.Identity, bool) {
	if eng == nil {
		httperr.WriteStatus(w, http.StatusServiceUnavailable, syncerr.New(syncerr.InternalError, "%s is not started", what))
		return engine.Identity{}, false
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		httperr.WriteStatus(w, http.StatusMethodNotAllowed, syncerr.New(syncerr.InvalidRequest, "use GET with a WebSocket upgrade for %s", what))
		return engine.Identity{}, false
	}
	return Authenticate(w, r, eng, auth, source)
}

// Authenticate runs auth on r and returns the identity and true (noting
// the actor and partition for r's access log line, transport/accesslog);
// otherwise it has answered: 500 sync.internal_error when auth is nil
// (fail closed), else the authenticator's coded error (an uncoded one as
// sync.auth_required), reported to eng's event ring under source.
func Authenticate(w http.ResponseWriter, r *http.Request, eng *engine.Engine, auth Authenticator, source string) (engine.Identity, bool) {
	if auth == nil {
		httperr.WriteStatus(w, http.StatusInternalServerError, syncerr.New(syncerr.InternalError, "no authenticator configured"))
		return engine.Identity{}, false
	}
	id, err := auth.Authenticate(r)
	if err != nil {
		e := syncerr.As(err)
		if e.Code == syncerr.InternalError {
			e = syncerr.Wrap(syncerr.AuthRequired, err, "authentication failed")
		}
		ReportAuthFailure(eng, source, r, string(e.Code), e.Message)
		httperr.Write(w, e)
		return engine.Identity{}, false
	}
	accesslog.NoteIdentity(r.Context(), id.ActorID, id.Partition)
	return id, true
}
