package auth

import (
	"errors"
	"net"
	"net/http"
	"net/netip"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/accesslog"
	"github.com/synclane/synclane/transport/httperr"
)

// ReportAuthFailure reports a refused authentication of r to eng (nothing
// when eng is nil): counted by route kind and reason (the
// synclane_auth_failures_total metric) and sampled into the event ring, at
// most one auth.failed event per source address per interval (see
// engine.ReportAuthFailure), so a storm of failures cannot flush the ring.
// source names the transport ("httpsync", "httpsync.segments",
// "httpsync.blobs", "httpsync.operations", "realtime", "opwatch",
// "admin"), code is the refusal's error code, and the event's message says
// why (message) and from which address and path. Never the token.
func ReportAuthFailure(eng *engine.Engine, source string, r *http.Request, code, message string) {
	if eng == nil {
		return
	}
	eng.ReportAuthFailure(RouteKind(source), reasonLabel(code), SourceOf(r), events.Event{Source: source, Code: code,
		Message: message + " (" + r.Method + " " + r.URL.Path + " from " + r.RemoteAddr + ")"})
}

// routeKinds maps a transport's source name to its metric label.
var routeKinds = map[string]string{
	"httpsync":            "sync",
	"httpsync.segments":   "segments",
	"httpsync.blobs":      "blobs",
	"httpsync.operations": "operations",
	"realtime":            "realtime",
	"opwatch":             "opwatch",
	"admin":               "admin",
}

// RouteKind is the route label of source's auth failures: one of sync,
// segments, blobs, operations, realtime, opwatch, admin, or other for a
// source not listed (the label set stays fixed).
func RouteKind(source string) string {
	if k, ok := routeKinds[source]; ok {
		return k
	}
	return "other"
}

// reasonLabel keeps the reason label bounded: a catalog code or an admin
// refusal as is, any other code (a host's own) as "other".
func reasonLabel(code string) string {
	switch {
	case syncerr.Known(syncerr.Code(code)), code == "admin.unauthorized":
		return code
	default:
		return "other"
	}
}

// SourceOf is the address r's failures are sampled and rate-limited
// under: the IP of r.RemoteAddr (the TCP peer; behind a proxy, the
// proxy's), an IPv6 address cut to its /64 (one host can hold a whole
// /64), or RemoteAddr itself when it does not parse.
func SourceOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
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
// sync.auth_required; one wrapping syncerr.ErrUnavailable, such as an
// unreachable JWKS, as 503 with Retry-After), reported to eng's event ring
// under source.
func Authenticate(w http.ResponseWriter, r *http.Request, eng *engine.Engine, auth Authenticator, source string) (engine.Identity, bool) {
	if auth == nil {
		httperr.WriteStatus(w, http.StatusInternalServerError, syncerr.New(syncerr.InternalError, "no authenticator configured"))
		return engine.Identity{}, false
	}
	id, err := auth.Authenticate(r)
	if err != nil {
		e := syncerr.As(err)
		if e.Code == syncerr.InternalError && !errors.Is(e, syncerr.ErrUnavailable) {
			e = syncerr.Wrap(syncerr.AuthRequired, err, "authentication failed")
		}
		ReportAuthFailure(eng, source, r, string(e.Code), e.Message)
		httperr.Write(w, e)
		return engine.Identity{}, false
	}
	accesslog.NoteIdentity(r.Context(), id.ActorID, id.Partition)
	return id, true
}
