package httpsync

import (
	"net/http"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httperr"
)

// Forwarders to the packages the shared transport pieces moved to
// (transport/auth, transport/httperr), until the call sites follow.
type (
	Authenticator     = auth.Authenticator
	AuthenticatorFunc = auth.AuthenticatorFunc
	DevAuth           = auth.DevAuth
	JWTAuth           = auth.JWTAuth
	ErrorBody         = httperr.Body
)

const DefaultPartition = auth.DefaultPartition

var GrantsResolver = auth.GrantsResolver

func SignJWT(secret []byte, claims map[string]any) string { return auth.SignJWT(secret, claims) }

func ReportAuthFailure(eng *engine.Engine, source string, r *http.Request, e *syncerr.Error) {
	auth.ReportAuthFailure(eng, source, r, e)
}

func AuthenticateUpgrade(w http.ResponseWriter, r *http.Request, eng *engine.Engine, a Authenticator, source, what string) (engine.Identity, bool) {
	return auth.AuthenticateUpgrade(w, r, eng, a, source, what)
}

func Authenticate(w http.ResponseWriter, r *http.Request, eng *engine.Engine, a Authenticator, source string) (engine.Identity, bool) {
	return auth.Authenticate(w, r, eng, a, source)
}

func writeError(w http.ResponseWriter, status int, err error) { httperr.WriteStatus(w, status, err) }

func WriteError(w http.ResponseWriter, err error) { httperr.Write(w, err) }

func WriteErrorStatus(w http.ResponseWriter, status int, err error) {
	httperr.WriteStatus(w, status, err)
}
