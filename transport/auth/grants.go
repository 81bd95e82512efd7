package auth

import (
	"fmt"
	"net/http"
	"sort"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/syncerr"
)

// DeclaredGrants wraps an authenticator whose identities carry grants (a
// token's scopes claim, served by GrantsResolver) so that a token naming a
// scope variable the schema does not declare is refused at
// authentication: 401 sync.auth_required (retryable, refreshAuth), on every
// route, naming the variable.
//
// Without it the grants reach the engine as the scope resolver's answer,
// and SPEC §3.2 rule 3 fails every such request with 400
// sync.invalid_subscription (fixRequest): it tells the client to fix a
// request that is not at fault, while the fault is the token (its issuer
// maps the wrong claim) and only a new token mends it. Refusing the token
// says so, counts it with the other authentication failures
// (synclane_auth_failures_total, auth.failed events) and purges nothing on
// the client. declares reports whether a variable is declared
// (schema.Schema.DeclaresVar). An identity without grants passes.
func DeclaredGrants(a Authenticator, declares func(variable string) bool) Authenticator {
	return AuthenticatorFunc(func(r *http.Request) (engine.Identity, error) {
		id, err := a.Authenticate(r)
		if err != nil || len(id.Grants) == 0 {
			return id, err
		}
		var unknown []string
		for v := range id.Grants {
			if !declares(v) {
				unknown = append(unknown, v)
			}
		}
		if len(unknown) == 0 {
			return id, nil
		}
		sort.Strings(unknown)
		more := ""
		if len(unknown) > 1 {
			more = fmt.Sprintf(" (and %d more)", len(unknown)-1)
		}
		return engine.Identity{}, syncerr.New(syncerr.AuthRequired,
			"the token's scopes claim names scope variable %s%s, which no table of this server's schema declares: ask its issuer for a token with this schema's variables",
			syncerr.Quote(unknown[0]), more)
	})
}
