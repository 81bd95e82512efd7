package main

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
)

// `synclane token` refuses what serve would never accept, and says why.
func TestTokenRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no secret", []string{"--actor", "ada"}, "--jwt-secret (or SYNCLANE_JWT_SECRET) is required"},
		{"short secret", []string{"--jwt-secret", "short", "--actor", "ada"}, "--jwt-secret is 5 bytes"},
		{"no actor", []string{"--jwt-secret", secret32}, "--actor is required"},
		{"ttl and expires", []string{"--jwt-secret", secret32, "--actor", "a", "--ttl", "1h", "--expires", "2099-01-01T00:00:00Z"}, "one of --ttl and --expires"},
		{"expires in the past", []string{"--jwt-secret", secret32, "--actor", "a", "--expires", "2001-01-01T00:00:00Z"}, "in the past"},
		{"bad expires", []string{"--jwt-secret", secret32, "--actor", "a", "--expires", "tomorrow"}, "RFC 3339"},
		{"zero ttl", []string{"--jwt-secret", secret32, "--actor", "a", "--ttl", "0s"}, "--ttl must be positive"},
		{"scopes not k=v", []string{"--jwt-secret", secret32, "--actor", "a", "--scopes", "list_id"}, "is not variable=value"},
		{"scopes bad JSON", []string{"--jwt-secret", secret32, "--actor", "a", "--scopes", `{"list_id":"a"}`}, "an array of values"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCmd(t, append([]string{"token"}, tc.args...)...)
			if code != 2 || out != "" || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 2 and %q", code, out, errOut, tc.want)
			}
		})
	}
}

// A minted token carries exactly the flags' claims (checked by the auth
// package's HS256 authenticator, serve's), and serve --jwt-secret accepts
// it: a pull within its scopes succeeds; another secret's token is 401.
func TestTokenIsAcceptedByServe(t *testing.T) {
	mint := func(t *testing.T, env map[string]string, args ...string) string {
		t.Helper()
		code, out, errOut := runCmdEnv(t, env, append([]string{"token"}, args...)...)
		if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(errOut, "expires") {
			t.Fatalf("token: exit %d\nstdout %q\nstderr %s", code, out, errOut)
		}
		return strings.TrimSpace(out)
	}
	identityOf := func(t *testing.T, secret, tok string) (engine.Identity, error) {
		t.Helper()
		r, _ := http.NewRequest(http.MethodPost, "http://x/sync", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		return auth.JWTAuth{Secret: []byte(secret)}.Authenticate(r)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want engine.Identity
	}{
		{"scopes as k=v, repeated", nil, []string{"--jwt-secret", secret32, "--actor", "ada", "--scopes", "list_id=groceries,list_id=chores", "--scopes", "owner=ada"},
			engine.Identity{ActorID: "ada", Partition: "default", Grants: map[string][]string{"list_id": {"groceries", "chores"}, "owner": {"ada"}}}},
		{"scopes as JSON, secret from the environment", map[string]string{"SYNCLANE_JWT_SECRET": secret32},
			[]string{"--actor", "bob", "--partition", "p1", "--scopes", `{"list_id":["groceries"]}`},
			engine.Identity{ActorID: "bob", Partition: "p1", Grants: map[string][]string{"list_id": {"groceries"}}}},
		{"no scopes", nil, []string{"--jwt-secret", secret32, "--actor", "cy", "--expires", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)},
			engine.Identity{ActorID: "cy", Partition: "default"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := identityOf(t, secret32, mint(t, tc.env, tc.args...))
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("identity %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	tok := mint(t, nil, "--jwt-secret", secret32, "--actor", "ada", "--scopes", "list_id=groceries", "--ttl", "2m")
	if _, err := identityOf(t, strings.Repeat("x", 32), tok); syncerr.CodeOf(err) != syncerr.AuthRequired {
		t.Fatalf("checked with another secret: %v, want sync.auth_required", err)
	}

	base := startServe(t, "--data", t.TempDir(), "--jwt-secret", secret32)
	r := httpsynctest.NewReplica(jwtClient(base, tok), schema.MustDemo())
	r.Subscribe("s", "todos", map[string][]string{"list_id": {"groceries"}})
	if err := r.CatchUp(context.Background()); err != nil {
		t.Fatalf("serve --jwt-secret with the minted token: %v", err)
	}
	other := mint(t, nil, "--jwt-secret", strings.Repeat("x", 32), "--actor", "ada")
	err := jwtClient(base, other).Handshake(context.Background())
	if syncerr.CodeOf(err) != syncerr.AuthRequired {
		t.Fatalf("a token of another secret: %v, want 401 sync.auth_required", err)
	}
}
