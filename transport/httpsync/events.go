package httpsync

import (
	"net/http"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/protocol/syncerr"
)

// ReportAuthFailure publishes a refused authentication to eng's event ring
// (nothing when eng is nil or has no ring): source names the transport,
// the message says why and from which address and path. Never the token.
func ReportAuthFailure(eng *engine.Engine, source string, r *http.Request, e *syncerr.Error) {
	if eng == nil {
		return
	}
	eng.Events().Emit(events.Event{Kind: events.AuthFailed, Source: source, Code: string(e.Code),
		Message: e.Message + " (" + r.Method + " " + r.URL.Path + " from " + r.RemoteAddr + ")"})
}
