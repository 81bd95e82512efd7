// Package auth authenticates synclane's HTTP requests, for every
// transport (POST /sync and its sibling routes, the realtime and
// operation-watch WebSocket upgrades): the Authenticator hook a host
// implements, the development and HS256 JWT authenticators, and the front
// of a route (Authenticate, AuthenticateUpgrade) that answers a refused
// request with the protocol's JSON error body and reports it to the
// engine's event ring.
package auth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/syncerr"
)

// DefaultPartition is the partition of requests that name none.
const DefaultPartition = "default"

// Authenticator is the host hook that authenticates a request, yielding the
// actor and the one partition it addresses. Returning a *syncerr.Error
// chooses the refusal code (default sync.auth_required, HTTP 401).
type Authenticator interface {
	Authenticate(r *http.Request) (engine.Identity, error)
}

// AuthenticatorFunc adapts a function to Authenticator.
type AuthenticatorFunc func(r *http.Request) (engine.Identity, error)

// Authenticate calls f.
func (f AuthenticatorFunc) Authenticate(r *http.Request) (engine.Identity, error) { return f(r) }

// DevAuth is the development authenticator: the actor comes from header
// x-actor (required) and the partition from x-partition (default
// "default"). On a WebSocket upgrade (GET with Upgrade: websocket), where
// browsers and the official connector cannot set headers, the query
// parameters actor and partition stand in for them: each header, when
// given, wins over its parameter. Elsewhere the parameters are ignored.
// The values are trimmed and then held to the identifier limits like the
// headers' (engine.ValidateIdentity, applied by every route). It trusts
// the caller completely; never use it in production.
type DevAuth struct{}

// Authenticate implements Authenticator.
func (DevAuth) Authenticate(r *http.Request) (engine.Identity, error) {
	actor := strings.TrimSpace(r.Header.Get("x-actor"))
	p := strings.TrimSpace(r.Header.Get("x-partition"))
	upgrade := isWebSocketUpgrade(r)
	if upgrade && (actor == "" || p == "") {
		q := r.URL.Query()
		if actor == "" {
			actor = strings.TrimSpace(q.Get("actor"))
		}
		if p == "" {
			p = strings.TrimSpace(q.Get("partition"))
		}
	}
	if actor == "" {
		if upgrade {
			return engine.Identity{}, syncerr.New(syncerr.AuthRequired, "development mode: send the actor id in header x-actor or, on a WebSocket upgrade, in query parameter actor")
		}
		return engine.Identity{}, syncerr.New(syncerr.AuthRequired, "development mode: send the actor id in header x-actor")
	}
	if p == "" {
		p = DefaultPartition
	}
	return engine.Identity{ActorID: actor, Partition: p}, nil
}

// JWTAuth authenticates HS256 JSON Web Tokens from the Authorization
// header (Bearer) or, only for WebSocket upgrades (GET with Upgrade:
// websocket, where browsers cannot set headers), the access_token query
// parameter. Claims: sub → actor, partition → partition (default
// "default"), scopes {variable: [values]} → Identity.Grants. exp is
// required (unless AllowNoExp) and enforced; nbf is enforced when present.
type JWTAuth struct {
	Secret []byte
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Leeway tolerates clock skew on exp/nbf (default 30s).
	Leeway time.Duration
	// AllowNoExp accepts tokens without an exp claim (they never expire).
	// By default they are refused with sync.auth_required.
	AllowNoExp bool
}

// isWebSocketUpgrade reports whether r asks for a WebSocket upgrade.
func isWebSocketUpgrade(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	for _, v := range r.Header.Values("Upgrade") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "websocket") {
				return true
			}
		}
	}
	return false
}

type jwtClaims struct {
	Sub       string              `json:"sub"`
	Partition string              `json:"partition"`
	Scopes    map[string][]string `json:"scopes"`
	Exp       *float64            `json:"exp"`
	Nbf       *float64            `json:"nbf"`
}

// bearerToken returns r's token: the Authorization: Bearer header or, on
// a WebSocket upgrade only, the access_token query parameter.
func bearerToken(r *http.Request) (string, error) {
	tok := ""
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		tok = strings.TrimSpace(h[7:])
	} else if q := r.URL.Query().Get("access_token"); q != "" {
		if !isWebSocketUpgrade(r) {
			return "", syncerr.New(syncerr.AuthRequired, "the access_token query parameter is accepted only on WebSocket upgrades: send the token in the Authorization: Bearer header")
		}
		tok = q
	}
	if tok == "" {
		return "", syncerr.New(syncerr.AuthRequired, "missing bearer token")
	}
	return tok, nil
}

// identity maps the claims both JWT authenticators read to an identity:
// sub the actor, partition the partition (default "default"), scopes the
// grants.
func identity(sub, partition string, scopes map[string][]string) engine.Identity {
	if partition == "" {
		partition = DefaultPartition
	}
	return engine.Identity{ActorID: sub, Partition: partition, Grants: scopes}
}

// Authenticate implements Authenticator.
func (a JWTAuth) Authenticate(r *http.Request) (engine.Identity, error) {
	tok, err := bearerToken(r)
	if err != nil {
		return engine.Identity{}, err
	}
	c, err := a.verify(tok)
	if err != nil {
		return engine.Identity{}, err
	}
	return identity(c.Sub, c.Partition, c.Scopes), nil
}

func (a JWTAuth) verify(tok string) (*jwtClaims, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return nil, syncerr.New(syncerr.AuthRequired, "malformed token")
	}
	var hdr struct {
		Alg string `json:"alg"`
	}
	hb, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil || json.Unmarshal(hb, &hdr) != nil || hdr.Alg != "HS256" {
		return nil, syncerr.New(syncerr.AuthRequired, "token must be an HS256 JWT")
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return nil, syncerr.New(syncerr.AuthRequired, "malformed token signature")
	}
	mac := hmac.New(sha256.New, a.Secret)
	mac.Write([]byte(parts[0] + "." + parts[1]))
	if !hmac.Equal(sig, mac.Sum(nil)) {
		return nil, syncerr.New(syncerr.AuthRequired, "invalid token signature")
	}
	pb, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, syncerr.New(syncerr.AuthRequired, "malformed token payload")
	}
	var c jwtClaims
	if err := json.Unmarshal(pb, &c); err != nil {
		return nil, syncerr.New(syncerr.AuthRequired, "malformed token claims: %v", err)
	}
	if c.Sub == "" {
		return nil, syncerr.New(syncerr.AuthRequired, "token has no sub claim")
	}
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	leeway := a.Leeway
	if leeway == 0 {
		leeway = 30 * time.Second
	}
	t := float64(now().Add(-leeway).Unix())
	if c.Exp == nil && !a.AllowNoExp {
		return nil, syncerr.New(syncerr.AuthRequired, "token has no exp claim")
	}
	if c.Exp != nil && *c.Exp < t {
		return nil, syncerr.New(syncerr.AuthRequired, "token expired")
	}
	if c.Nbf != nil && *c.Nbf > float64(now().Add(leeway).Unix()) {
		return nil, syncerr.New(syncerr.AuthRequired, "token not valid yet")
	}
	return &c, nil
}

// SignJWT returns an HS256 token for claims (tests, tools and examples).
func SignJWT(secret []byte, claims map[string]any) string {
	enc := base64.RawURLEncoding
	h := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	p, _ := json.Marshal(claims)
	s := h + "." + enc.EncodeToString(p)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(s))
	return s + "." + enc.EncodeToString(mac.Sum(nil))
}

// GrantsResolver is an engine.ScopeResolver returning the scopes the
// authenticator put in Identity.Grants (for example JWTAuth's scopes claim).
var GrantsResolver = engine.ScopeResolverFunc(func(_ context.Context, id engine.Identity) (map[string][]string, error) {
	if id.Grants == nil {
		return map[string][]string{}, nil
	}
	return id.Grants, nil
})
