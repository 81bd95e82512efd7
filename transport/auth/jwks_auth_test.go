package auth

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/auth/jwks"
	"github.com/synclane/synclane/transport/auth/jwks/jwkstest"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

const (
	testIssuer   = "https://idp.example.com/realms/app"
	testAudience = "synclane"
)

// idp is a test identity provider and a JWKSAuth trusting it.
type idp struct {
	srv  *jwkstest.Server
	clk  *fakeClock
	keys *jwks.KeySet
	auth JWKSAuth
}

func newIDP(t *testing.T, signers ...*jwkstest.Signer) *idp {
	t.Helper()
	srv := jwkstest.NewServer(signers...)
	t.Cleanup(srv.Close)
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	keys, err := jwks.New(jwks.Options{URL: srv.URL, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(keys.Close)
	return &idp{srv: srv, clk: clk, keys: keys,
		auth: JWKSAuth{Keys: keys, Issuer: testIssuer, Audience: []string{testAudience}, Now: clk.Now}}
}

// claims are valid claims at the idp's clock, with overrides (nil deletes).
func (p *idp) claims(over map[string]any) map[string]any {
	now := p.clk.Now().Unix()
	c := map[string]any{"iss": testIssuer, "aud": testAudience, "sub": "ada", "iat": now, "exp": now + 3600,
		"partition": "p1", "scopes": map[string][]string{"list_id": {"l1"}}}
	for k, v := range over {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

// do authenticates tok through the route front, returning the status, the
// code and the identity's actor.
func (p *idp) do(t *testing.T, a Authenticator, tok string) (int, string, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/sync", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	w := httptest.NewRecorder()
	id, ok := Authenticate(w, r, nil, a, "test")
	if ok {
		return http.StatusOK, "", id.ActorID
	}
	var body struct {
		Code string `json:"code"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("error body %q: %v", w.Body.String(), err)
	}
	return w.Code, body.Code, ""
}

func (p *idp) wantAccepted(t *testing.T, what, tok string) {
	t.Helper()
	if st, code, actor := p.do(t, p.auth, tok); st != http.StatusOK || actor != "ada" {
		t.Fatalf("%s: status %d %s, want accepted as ada", what, st, code)
	}
}

func (p *idp) wantRefused(t *testing.T, what, tok string) {
	t.Helper()
	if st, code, _ := p.do(t, p.auth, tok); st != http.StatusUnauthorized || code != string(syncerr.AuthRequired) {
		t.Fatalf("%s: status %d %q, want 401 sync.auth_required", what, st, code)
	}
}

// Tokens signed with RS256, PS256, ES256, ES384 and EdDSA keys from the
// JWKS are accepted, yielding the same identity as JWTAuth's claims (sub,
// partition, scopes); aud may be a string or an array.
func TestJWKSAuthAcceptsAsymmetricAlgs(t *testing.T) {
	signers := []*jwkstest.Signer{
		jwkstest.NewRSA("rs", "RS256"), jwkstest.NewRSA("ps", "PS256"),
		jwkstest.NewEC("es256", "ES256"), jwkstest.NewEC("es384", "ES384"), jwkstest.NewEd25519("ed"),
	}
	p := newIDP(t, signers...)
	for _, s := range signers {
		for _, aud := range []any{testAudience, []string{"other", testAudience}} {
			r := httptest.NewRequest(http.MethodPost, "/sync", nil)
			r.Header.Set("Authorization", "Bearer "+s.Sign(p.claims(map[string]any{"aud": aud})))
			id, err := p.auth.Authenticate(r)
			if err != nil {
				t.Fatalf("%s, aud %v: %v", s.Alg, aud, err)
			}
			if id.ActorID != "ada" || id.Partition != "p1" || len(id.Grants["list_id"]) != 1 || id.Grants["list_id"][0] != "l1" {
				t.Fatalf("%s: identity %+v", s.Alg, id)
			}
		}
	}
	// No partition claim: the default partition, as with JWTAuth.
	r := httptest.NewRequest(http.MethodPost, "/sync", nil)
	r.Header.Set("Authorization", "Bearer "+signers[4].Sign(p.claims(map[string]any{"partition": nil})))
	if id, err := p.auth.Authenticate(r); err != nil || id.Partition != DefaultPartition {
		t.Fatalf("no partition claim: %+v %v", id, err)
	}
	// A token without kid is checked against every key its alg fits.
	noKid := *signers[2]
	noKid.Kid = ""
	p.wantAccepted(t, "ES256 without kid", noKid.Sign(p.claims(nil)))
	if p.srv.Hits() != 1 {
		t.Fatalf("JWKS hits %d, want 1: every key was cached", p.srv.Hits())
	}
}

// Claims are checked: issuer, audience, exp (required), nbf and iat,
// each with the leeway; sub is required.
func TestJWKSAuthChecksClaims(t *testing.T) {
	s := jwkstest.NewEC("k", "ES256")
	p := newIDP(t, s)
	now := p.clk.Now().Unix()
	cases := []struct {
		name string
		over map[string]any
		ok   bool
	}{
		{"valid", nil, true},
		{"wrong issuer", map[string]any{"iss": "https://evil.example.com/"}, false},
		{"issuer with a trailing slash", map[string]any{"iss": testIssuer + "/"}, false},
		{"no issuer", map[string]any{"iss": nil}, false},
		{"wrong audience", map[string]any{"aud": "other-app"}, false},
		{"wrong audiences array", map[string]any{"aud": []string{"a", "b"}}, false},
		{"no audience", map[string]any{"aud": nil}, false},
		{"expired beyond the skew", map[string]any{"exp": now - 61}, false},
		{"expired within the skew", map[string]any{"exp": now - 59}, true},
		{"no exp", map[string]any{"exp": nil}, false},
		{"nbf beyond the skew", map[string]any{"nbf": now + 61}, false},
		{"nbf within the skew", map[string]any{"nbf": now + 59}, true},
		{"iat in the future beyond the skew", map[string]any{"iat": now + 61}, false},
		{"iat within the skew", map[string]any{"iat": now + 59}, true},
		{"no sub", map[string]any{"sub": nil}, false},
		{"scopes of the wrong shape", map[string]any{"scopes": "list_id:l1"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tok := s.Sign(p.claims(tc.over))
			if tc.ok {
				p.wantAccepted(t, tc.name, tok)
			} else {
				p.wantRefused(t, tc.name, tok)
			}
		})
	}
	// --jwt-clock-skew 0 (Leeway < 0): a token a second past exp is refused.
	strict := p.auth
	strict.Leeway = -1
	if _, err := strict.verify(t.Context(), s.Sign(p.claims(map[string]any{"exp": now - 1}))); syncerr.CodeOf(err) != syncerr.AuthRequired {
		t.Fatalf("no leeway, exp a second ago: %v", err)
	}
}

// alg confusion and unsigned tokens: none; HS256 with the RSA public key
// (PEM, DER or the JWK's n) as the HMAC secret, with and without an HS256
// secret configured; a key used with an alg its JWK does not name; an
// alg whose key type differs from the kid's key.
func TestJWKSAuthRefusesAlgConfusion(t *testing.T) {
	rs := jwkstest.NewRSA("rs", "RS256")
	pinned := jwkstest.NewRSA("pinned", "RS256")
	pinned.PinAlg = true
	ec := jwkstest.NewEC("ec", "ES256")
	p := newIDP(t, rs, pinned, ec)
	claims := p.claims(nil)

	pub := &rs.Key.(*rsa.PrivateKey).PublicKey
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	hs := func(secret []byte, kid string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims(claims))
		tok.Header["kid"] = kid
		s, err := tok.SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	none := func(kid string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims(claims))
		tok.Header["kid"] = kid
		s, err := tok.SignedString(jwt.UnsafeAllowNoneSignatureType)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// An attacker's key, under the legitimate kid, embedded in the header.
	attacker := jwkstest.NewRSA("rs", "RS256")
	// PS256 with the key pinned to RS256 by its JWK.
	psPinned := *pinned
	psPinned.Alg = "PS256"
	// ES256 header on an RSA kid: sign with the EC key, claim the RSA kid.
	ecAsRSA := *ec
	ecAsRSA.Kid = "rs"
	// RS256 with the EC kid.
	rsAsEC := *rs
	rsAsEC.Kid = "ec"

	toks := map[string]string{
		"none":                         none("rs"),
		"none without kid":             none(""),
		"HS256 keyed with the PEM":     hs(pemBytes, "rs"),
		"HS256 keyed with the DER":     hs(der, "rs"),
		"HS256 keyed with n":           hs(pub.N.Bytes(), "rs"),
		"PS256 with an RS256-only key": psPinned.Sign(claims),
		"ES256 naming an RSA kid":      ecAsRSA.Sign(claims),
		"RS256 naming an EC kid":       rsAsEC.Sign(claims),
		"alg header tampered to RS512": retag(rs.Sign(claims), "RS512"),
		"signature of another RSA key": resign(rs.Sign(claims), pinned.Sign(claims)),
		"not a JWT":                    "abc.def",
		"crit header":                  withHeader(rs, claims, "crit", []string{"exp"}),
		"jwk header with its own key":  withHeader(attacker, claims, "jwk", attacker.JWK()),
	}
	for name, tok := range toks {
		p.wantRefused(t, name, tok)
	}
	// With --jwt-secret too, HS256 tokens go to the secret: one keyed with
	// the public key is still refused, one keyed with the secret passes.
	secret := []byte(strings.Repeat("s", 32))
	both := p.auth
	both.HS256 = &JWTAuth{Secret: secret, Now: p.clk.Now}
	for _, name := range []string{"HS256 keyed with the PEM", "HS256 keyed with the DER", "HS256 keyed with n", "none"} {
		if st, code, _ := p.do(t, both, toks[name]); st != http.StatusUnauthorized {
			t.Fatalf("with an HS256 secret, %s: %d %s, want 401", name, st, code)
		}
	}
	if st, code, actor := p.do(t, both, SignJWT(secret, claims)); st != http.StatusOK || actor != "ada" {
		t.Fatalf("HS256 with the secret: %d %s", st, code)
	}
	if st, _, actor := p.do(t, both, rs.Sign(claims)); st != http.StatusOK || actor != "ada" {
		t.Fatalf("RS256 with both configured: %d", st)
	}
	// Without the secret an HS256 token is refused even when validly
	// signed with some secret.
	p.wantRefused(t, "HS256 without --jwt-secret", SignJWT(secret, claims))
}

// retag replaces tok's header alg, keeping its signature.
func retag(tok, alg string) string {
	parts := strings.Split(tok, ".")
	var h map[string]any
	b, _ := base64.RawURLEncoding.DecodeString(parts[0])
	_ = json.Unmarshal(b, &h)
	h["alg"] = alg
	nb, _ := json.Marshal(h)
	parts[0] = base64.RawURLEncoding.EncodeToString(nb)
	return strings.Join(parts, ".")
}

// resign gives tok the signature of other.
func resign(tok, other string) string {
	a, b := strings.Split(tok, "."), strings.Split(other, ".")
	return a[0] + "." + a[1] + "." + b[2]
}

// Rotation: a token whose kid is not in the cached JWKS is accepted once
// the provider publishes the key, after one refetch; an unknown kid is
// refused and refetches at most once per 30s.
func TestJWKSAuthRotationAndUnknownKid(t *testing.T) {
	old, next := jwkstest.NewEd25519("2026-11"), jwkstest.NewEd25519("2026-12")
	p := newIDP(t, old)
	p.wantAccepted(t, "old key", old.Sign(p.claims(nil)))
	if p.srv.Hits() != 1 {
		t.Fatalf("hits %d, want 1", p.srv.Hits())
	}
	p.clk.Advance(jwks.DefaultMinRefetch) // the first fetch is 30s old
	p.srv.SetKeys(old, next)
	p.wantAccepted(t, "rotated key", next.Sign(p.claims(nil)))
	if p.srv.Hits() != 2 {
		t.Fatalf("hits %d after rotation, want 2 (one refetch)", p.srv.Hits())
	}

	stranger := jwkstest.NewEd25519("made-up")
	p.clk.Advance(jwks.DefaultMinRefetch)
	for range 10 {
		p.wantRefused(t, "unknown kid", stranger.Sign(p.claims(nil)))
	}
	if p.srv.Hits() != 3 {
		t.Fatalf("hits %d after 10 unknown-kid tokens, want 3 (one refetch per 30s)", p.srv.Hits())
	}
	p.clk.Advance(jwks.DefaultMinRefetch - time.Second)
	p.wantRefused(t, "unknown kid 29s later", stranger.Sign(p.claims(nil)))
	if p.srv.Hits() != 3 {
		t.Fatalf("hits %d 29s later, want 3", p.srv.Hits())
	}
	p.clk.Advance(time.Second)
	p.wantRefused(t, "unknown kid 30s later", stranger.Sign(p.claims(nil)))
	if p.srv.Hits() != 4 {
		t.Fatalf("hits %d 30s later, want 4", p.srv.Hits())
	}
}

// JWKS down: nothing is accepted. Never fetched, or an unknown kid whose
// refetch fails, is 503 sync.internal_error with Retry-After (the token
// may be good); an oversized JWKS counts as down.
func TestJWKSAuthFailsClosedWhenJWKSDown(t *testing.T) {
	s := jwkstest.NewEC("k", "ES256")
	cases := []struct {
		name   string
		break_ func(*jwkstest.Server)
	}{
		{"HTTP 500", func(srv *jwkstest.Server) { srv.SetStatus(http.StatusInternalServerError) }},
		{"unreachable", func(srv *jwkstest.Server) { srv.Close() }},
		{"body over 1 MiB", func(srv *jwkstest.Server) {
			srv.SetBody(append(jwkstest.Set(s), make([]byte, 1<<20)...))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newIDP(t, s)
			tc.break_(p.srv)
			tok := s.Sign(p.claims(nil))
			r := httptest.NewRequest(http.MethodPost, "/sync", nil)
			r.Header.Set("Authorization", "Bearer "+tok)
			w := httptest.NewRecorder()
			if _, ok := Authenticate(w, r, nil, p.auth, "test"); ok {
				t.Fatal("accepted a token with the JWKS down")
			}
			var body struct {
				Code      string `json:"code"`
				Retryable bool   `json:"retryable"`
			}
			_ = json.Unmarshal(w.Body.Bytes(), &body)
			if w.Code != http.StatusServiceUnavailable || body.Code != string(syncerr.InternalError) || !body.Retryable || w.Header().Get("Retry-After") == "" {
				t.Fatalf("status %d %+v Retry-After %q, want 503 sync.internal_error retryable with Retry-After", w.Code, body, w.Header().Get("Retry-After"))
			}
		})
	}
}

// withHeader signs claims with s, adding header member k.
func withHeader(s *jwkstest.Signer, claims map[string]any, k string, v any) string {
	tok := jwt.NewWithClaims(jwt.GetSigningMethod(s.Alg), jwt.MapClaims(claims))
	tok.Header["kid"], tok.Header[k] = s.Kid, v
	out, err := tok.SignedString(s.Key)
	if err != nil {
		panic(err)
	}
	return out
}
