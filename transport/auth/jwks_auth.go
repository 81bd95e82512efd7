package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/auth/jwks"
)

// DefaultJWKSLeeway is JWKSAuth's clock-skew tolerance on exp, nbf and
// iat when Leeway is zero.
const DefaultJWKSLeeway = 60 * time.Second

// KeySource supplies the verification keys of a JWKS by kid (every key
// when kid is empty); *jwks.KeySet implements it. An error wrapping
// jwks.ErrUnavailable means the keys cannot be known right now.
type KeySource interface {
	Lookup(ctx context.Context, kid string) ([]jwks.Key, error)
}

// JWKSAuth authenticates JWTs an identity provider signs with an
// asymmetric key it publishes as a JWKS (RS256/384/512, PS256/384/512,
// ES256/384/512, EdDSA), taken from the same places and mapped to the same
// identity as JWTAuth's (sub, partition, scopes). A token is accepted only
// when its alg is one of those, a key with its kid (any key when it has
// none) has the type that alg needs and, when the JWK names an alg, that
// alg; its signature verifies; iss equals Issuer; aud (a string or an
// array) holds one of Audience; exp is present and not past, nbf and iat
// not in the future, each with Leeway. HS256 tokens go to HS256 when it is
// set (the --jwt-secret authenticator, unchanged) and are refused
// otherwise; none and every other symmetric alg are always refused. A
// token with a crit header is refused; jku, x5u, x5c and jwk headers are
// ignored (keys come only from the configured JWKS).
//
// Refusals are 401 sync.auth_required. When the key set cannot be
// fetched (never fetched, too old, or an unknown kid whose refetch failed)
// the answer is 503 sync.internal_error (retryable, Retry-After): the
// token may be valid, the server cannot tell yet. Nothing is accepted
// without a verified signature.
type JWKSAuth struct {
	// Keys is the JWKS (required).
	Keys KeySource
	// Issuer is the required iss (required: empty refuses every token).
	Issuer string
	// Audience lists the accepted aud values; the token must carry at
	// least one (required: empty refuses every token).
	Audience []string
	// Leeway tolerates clock skew on exp, nbf and iat (default 60s when
	// zero; a negative value tolerates none).
	Leeway time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// HS256, when set, verifies tokens whose alg is HS256.
	HS256 *JWTAuth
}

// idpClaims are the claims JWKSAuth reads.
type idpClaims struct {
	jwt.RegisteredClaims
	Partition string              `json:"partition"`
	Scopes    map[string][]string `json:"scopes"`
}

// Authenticate implements Authenticator.
func (a JWKSAuth) Authenticate(r *http.Request) (engine.Identity, error) {
	tok, err := bearerToken(r)
	if err != nil {
		return engine.Identity{}, err
	}
	if a.HS256 != nil && tokenAlg(tok) == "HS256" {
		c, err := a.HS256.verify(tok)
		if err != nil {
			return engine.Identity{}, err
		}
		return identity(c.Sub, c.Partition, c.Scopes), nil
	}
	c, err := a.verify(r.Context(), tok)
	if err != nil {
		return engine.Identity{}, err
	}
	return identity(c.Subject, c.Partition, c.Scopes), nil
}

// tokenAlg returns the alg of tok's header ("" when it has none or the
// header does not decode); used only to route, never to trust.
func tokenAlg(tok string) string {
	h, _, ok := strings.Cut(tok, ".")
	if !ok {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(h)
	if err != nil {
		return ""
	}
	var hdr struct {
		Alg string `json:"alg"`
	}
	if json.Unmarshal(b, &hdr) != nil {
		return ""
	}
	return hdr.Alg
}

func (a JWKSAuth) verify(ctx context.Context, tok string) (*idpClaims, error) {
	if a.Keys == nil || a.Issuer == "" || len(a.Audience) == 0 {
		return nil, syncerr.New(syncerr.AuthRequired, "JWKS authentication is not configured (key set, issuer and audience are required): every token is refused")
	}
	leeway := a.Leeway
	switch {
	case leeway == 0:
		leeway = DefaultJWKSLeeway
	case leeway < 0:
		leeway = 0
	}
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	p := jwt.NewParser(
		jwt.WithValidMethods(jwks.AsymmetricAlgs()),
		jwt.WithIssuer(a.Issuer),
		jwt.WithAudience(a.Audience...),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(leeway),
		jwt.WithTimeFunc(now),
	)
	var c idpClaims
	_, err := p.ParseWithClaims(tok, &c, func(t *jwt.Token) (any, error) {
		if _, ok := t.Header["crit"]; ok {
			// RFC 7515 §4.1.11: an extension this verifier does not
			// understand must not be ignored.
			return nil, errors.New("the token's crit header names extensions this server does not implement")
		}
		alg := t.Method.Alg()
		kid, _ := t.Header["kid"].(string)
		keys, err := a.Keys.Lookup(ctx, kid)
		if err != nil {
			return nil, err
		}
		var set jwt.VerificationKeySet
		for _, k := range keys {
			if k.Verifies(alg) {
				set.Keys = append(set.Keys, k.Public)
			}
		}
		if len(set.Keys) == 0 {
			return nil, errors.New("no JWKS key with this kid fits alg " + alg)
		}
		return set, nil
	})
	if err != nil {
		if errors.Is(err, jwks.ErrUnavailable) {
			return nil, syncerr.Unavailable("jwks_unavailable", err, "cannot verify the token: the identity provider's key set is unavailable, retry later")
		}
		return nil, syncerr.Wrap(syncerr.AuthRequired, err, "token refused: %v", err)
	}
	if c.Subject == "" {
		return nil, syncerr.New(syncerr.AuthRequired, "token has no sub claim")
	}
	return &c, nil
}
