package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/auth/jwks"
)

// jwksConfig holds the flags of JWT authentication against an identity
// provider's JWKS (RS*/PS*/ES*/EdDSA tokens).
type jwksConfig struct {
	url, issuer, audience string
	clockSkew, refresh    time.Duration
}

// Bounds of the JWKS flags.
const (
	maxJWTClockSkew    = 10 * time.Minute
	minJWKSRefresh     = jwks.DefaultMinRefetch
	maxJWKSRefresh     = 24 * time.Hour
	defaultJWTSkew     = auth.DefaultJWKSLeeway
	defaultJWKSRefresh = jwks.DefaultRefreshInterval
)

func jwksFlags(fs *flag.FlagSet, j *jwksConfig) {
	fs.StringVar(&j.url, "jwks-url", "", "JWKS URL of an identity provider (https, or http on a loopback host): authenticate with the RS256/PS256/ES256/ES384/EdDSA JWTs it signs (sub, partition, scopes claims); needs --jwt-issuer and --jwt-audience; combinable with --jwt-secret (HS256 tokens then go to the secret)")
	fs.StringVar(&j.issuer, "jwt-issuer", "", "with --jwks-url: the required iss claim, exactly (e.g. https://tenant.eu.auth0.com/)")
	fs.StringVar(&j.audience, "jwt-audience", "", "with --jwks-url: accepted aud values, comma-separated; a token's aud (string or array) must hold one")
	fs.DurationVar(&j.clockSkew, "jwt-clock-skew", defaultJWTSkew, fmt.Sprintf("with --jwks-url: clock skew tolerated on exp, nbf and iat (at most %s)", maxJWTClockSkew))
	fs.DurationVar(&j.refresh, "jwks-refresh-interval", defaultJWKSRefresh, fmt.Sprintf("with --jwks-url: period of the background JWKS refresh (%s to %s); an unknown kid also refetches, at most every %s", minJWKSRefresh, maxJWKSRefresh, jwks.DefaultMinRefetch))
}

// tokenAuthGiven reports whether a JWT authentication flag (--jwt-secret
// or --jwks-url) was given.
func tokenAuthGiven(given map[string]bool) bool {
	return given["jwt-secret"] || given["jwks-url"]
}

// audiences splits --jwt-audience.
func (j *jwksConfig) audiences() []string {
	var out []string
	for _, a := range strings.Split(j.audience, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// validate checks the JWKS flags; devAuth and allowNoExp are serve's
// --dev-auth and --jwt-allow-no-exp.
func (j *jwksConfig) validate(given map[string]bool, devAuth, allowNoExp bool) error {
	if !given["jwks-url"] {
		for _, f := range []string{"jwt-issuer", "jwt-audience", "jwt-clock-skew", "jwks-refresh-interval"} {
			if given[f] {
				return fmt.Errorf("--%s needs --jwks-url", f)
			}
		}
		return nil
	}
	u, err := url.Parse(j.url)
	switch {
	case devAuth:
		return errors.New("--dev-auth and --jwks-url exclude each other")
	case j.url == "":
		return errors.New("--jwks-url (or SYNCLANE_JWKS_URL) is set but empty: refusing to start without authentication")
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return fmt.Errorf("--jwks-url %q: want an absolute https:// URL", j.url)
	case u.Scheme == "http" && !loopback(net.JoinHostPort(u.Hostname(), "0")):
		return fmt.Errorf("--jwks-url %q: plain http is accepted only on a loopback host; use https (anyone on the path could swap the keys)", j.url)
	case j.issuer == "":
		return errors.New("--jwks-url needs --jwt-issuer (the iss your identity provider puts in its tokens): without it any token the provider signs for anyone would pass")
	case len(j.audiences()) == 0:
		return errors.New("--jwks-url needs --jwt-audience (the aud your identity provider puts in tokens for this server): without it tokens issued for other applications would pass")
	case j.clockSkew < 0 || j.clockSkew > maxJWTClockSkew:
		return fmt.Errorf("--jwt-clock-skew %s: want 0 to %s", j.clockSkew, maxJWTClockSkew)
	case j.refresh < minJWKSRefresh || j.refresh > maxJWKSRefresh:
		return fmt.Errorf("--jwks-refresh-interval %s: want %s to %s", j.refresh, minJWKSRefresh, maxJWKSRefresh)
	case allowNoExp && !given["jwt-secret"]:
		return errors.New("--jwt-allow-no-exp needs --jwt-secret (tokens verified with --jwks-url always need exp)")
	}
	return nil
}

// tokenAuth returns serve's JWT authenticator: HS256 with --jwt-secret,
// the JWKS with --jwks-url, or both (routed by the token's alg). With a
// JWKS it fetches it once (a failure is logged, and serve starts anyway,
// answering every JWKS token with 503 until a fetch succeeds) and starts
// the background refresh, which the returned stop ends.
func tokenAuth(ctx context.Context, c *serveConfig, log *zap.Logger) (auth.Authenticator, func(), error) {
	var hs *auth.JWTAuth
	if c.jwtSecret != "" {
		hs = &auth.JWTAuth{Secret: []byte(c.jwtSecret), AllowNoExp: c.jwtAllowNoExp}
	}
	j := c.jwks
	if j.url == "" {
		return *hs, func() {}, nil
	}
	l := log.Named("jwks")
	keys, err := jwks.New(jwks.Options{URL: j.url, RefreshInterval: j.refresh, Logger: l})
	if err != nil {
		return nil, nil, err
	}
	fields := []zap.Field{zap.String("jwks_url", j.url), zap.String("issuer", j.issuer), zap.Strings("audience", j.audiences()),
		zap.Duration("clock_skew", j.clockSkew), zap.Duration("refresh_interval", j.refresh), zap.Bool("hs256_too", hs != nil)}
	if err := keys.Refresh(ctx); err != nil {
		l.Error("JWKS fetch at startup failed: serving anyway, but every token verified with the JWKS gets 503 sync.internal_error until a fetch succeeds (retried on requests at most every 30s and every refresh interval)",
			append(fields, zap.Error(err))...)
	} else {
		l.Info("JWKS authentication enabled", fields...)
	}
	keys.Start(ctx)
	a := auth.JWKSAuth{Keys: keys, Issuer: j.issuer, Audience: j.audiences(), Leeway: j.clockSkew, HS256: hs}
	if j.clockSkew == 0 {
		a.Leeway = -1 // no tolerance (zero would take the default)
	}
	return a, keys.Close, nil
}
