package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/auth/jwks/jwkstest"
)

// The JWKS flags are validated before storage is touched (exit 2).
func TestServeJWKSFlagsValidated(t *testing.T) {
	const u = "https://idp.example.com/.well-known/jwks.json"
	full := []string{"--jwks-url", u, "--jwt-issuer", "https://idp.example.com/", "--jwt-audience", "synclane"}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"issuer without jwks-url", []string{"--jwt-issuer", "x"}, "--jwt-issuer needs --jwks-url"},
		{"audience without jwks-url", []string{"--jwt-audience", "x", "--jwt-secret", secret32}, "--jwt-audience needs --jwks-url"},
		{"skew without jwks-url", []string{"--jwt-clock-skew", "5s"}, "--jwt-clock-skew needs --jwks-url"},
		{"empty jwks-url", []string{"--jwks-url", ""}, "set but empty"},
		{"relative jwks-url", []string{"--jwks-url", "jwks.json", "--jwt-issuer", "i", "--jwt-audience", "a"}, "absolute https"},
		{"plain http off loopback", []string{"--jwks-url", "http://idp.example.com/jwks", "--jwt-issuer", "i", "--jwt-audience", "a"}, "loopback"},
		{"no issuer", []string{"--jwks-url", u, "--jwt-audience", "a"}, "needs --jwt-issuer"},
		{"no audience", []string{"--jwks-url", u, "--jwt-issuer", "i"}, "needs --jwt-audience"},
		{"blank audience", []string{"--jwks-url", u, "--jwt-issuer", "i", "--jwt-audience", " , "}, "needs --jwt-audience"},
		{"dev auth", append([]string{"--dev-auth"}, full...), "exclude each other"},
		{"skew too large", append([]string{"--jwt-clock-skew", "11m"}, full...), "--jwt-clock-skew"},
		{"refresh too short", append([]string{"--jwks-refresh-interval", "1s"}, full...), "--jwks-refresh-interval"},
		{"allow no exp without secret", append([]string{"--jwt-allow-no-exp"}, full...), "--jwt-allow-no-exp needs --jwt-secret"},
		{"test control", append([]string{"--test-control"}, full...), "--jwks-url"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			code, _, stderr := runCmdEnv(t, nil, append([]string{"serve", "--data", dir, "--listen", "127.0.0.1:0"}, tc.args...)...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit 2 naming %q", code, stderr, tc.want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Fatalf("storage touched: %v", entries)
			}
		})
	}
}

// serve --jwks-url: a token the provider signs is accepted on POST /sync,
// one for another audience is refused with 401, an HS256 token goes to
// --jwt-secret when both are given, and the JWKS is fetched once.
func TestServeJWKS(t *testing.T) {
	ctx := context.Background()
	ec, ed := jwkstest.NewEC("ec-1", "ES256"), jwkstest.NewEd25519("ed-1")
	idp := jwkstest.NewServer(ec, ed)
	defer idp.Close()
	const iss = "https://idp.example.com/realms/app"
	claims := func(aud string) map[string]any {
		now := time.Now().Unix()
		return map[string]any{"iss": iss, "aud": aud, "sub": "ada", "iat": now, "exp": now + 3600}
	}
	base := startServe(t, "--data", t.TempDir(), "--jwks-url", idp.URL+"/jwks.json", "--jwt-issuer", iss, "--jwt-audience", "synclane,other",
		"--jwt-secret", secret32)
	for _, s := range []*jwkstest.Signer{ec, ed} {
		if err := jwtClient(base, s.Sign(claims("synclane"))).Handshake(ctx); err != nil {
			t.Fatalf("%s token: %v", s.Alg, err)
		}
	}
	if err := jwtClient(base, auth.SignJWT([]byte(secret32), claims("any"))).Handshake(ctx); err != nil {
		t.Fatalf("HS256 token with --jwt-secret too: %v", err)
	}
	err := jwtClient(base, ec.Sign(claims("someone-else"))).Handshake(ctx)
	if syncerr.CodeOf(err) != syncerr.AuthRequired || !strings.Contains(fmt.Sprint(syncerr.As(err).Err), "401") {
		t.Fatalf("token for another audience: %v, want HTTP 401 sync.auth_required", err)
	}
	if idp.Hits() != 1 {
		t.Fatalf("JWKS hits %d, want 1 (fetched once at startup)", idp.Hits())
	}
}

// serve starts when the JWKS cannot be fetched, logs it, and answers
// tokens with 503 (retryable) until the provider answers.
func TestServeJWKSDownAtStartup(t *testing.T) {
	ctx := context.Background()
	ec := jwkstest.NewEC("ec-1", "ES256")
	idp := jwkstest.NewServer(ec)
	defer idp.Close()
	idp.SetStatus(500)
	const iss = "https://idp.example.com/"
	p := startServeProc(t, nil, "--data", t.TempDir(), "--jwks-url", idp.URL, "--jwt-issuer", iss, "--jwt-audience", "synclane")
	defer func() { p.cancel(); p.wait(t) }()
	if !strings.Contains(p.stderr.String(), "JWKS fetch at startup failed") {
		t.Fatalf("no startup failure logged:\n%s", p.stderr.String())
	}
	now := time.Now().Unix()
	tok := ec.Sign(map[string]any{"iss": iss, "aud": "synclane", "sub": "ada", "exp": now + 3600})
	err := jwtClient(p.base, tok).Handshake(ctx)
	if syncerr.CodeOf(err) != syncerr.InternalError || !strings.Contains(fmt.Sprint(syncerr.As(err).Err), "503") {
		t.Fatalf("token with the JWKS down: %v, want HTTP 503 sync.internal_error", err)
	}
}
