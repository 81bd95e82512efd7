package httpsync

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/syncerr"
)

// A token without exp never expires: it is refused unless the operator
// allows such tokens explicitly.
func TestJWTWithoutExpRefusedUnlessAllowed(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	tok := SignJWT(secret, map[string]any{"sub": "ada"})
	r, _ := http.NewRequest(http.MethodPost, "/sync", nil)
	r.Header.Set("Authorization", "Bearer "+tok)

	_, err := JWTAuth{Secret: secret, Now: func() time.Time { return now }}.Authenticate(r)
	if syncerr.CodeOf(err) != syncerr.AuthRequired || syncerr.As(err).Spec().HTTPStatus != http.StatusUnauthorized {
		t.Fatalf("token without exp: %v, want 401 sync.auth_required", err)
	}
	id, err := JWTAuth{Secret: secret, Now: func() time.Time { return now }, AllowNoExp: true}.Authenticate(r)
	if err != nil || id.ActorID != "ada" {
		t.Fatalf("token without exp with AllowNoExp: %+v %v", id, err)
	}
	// An exp is still enforced with AllowNoExp.
	r.Header.Set("Authorization", "Bearer "+SignJWT(secret, map[string]any{"sub": "ada", "exp": now.Unix() - 3600}))
	if _, err := (JWTAuth{Secret: secret, Now: func() time.Time { return now }, AllowNoExp: true}).Authenticate(r); syncerr.CodeOf(err) != syncerr.AuthRequired {
		t.Fatalf("expired token with AllowNoExp: %v", err)
	}
}

// ?access_token= is only for WebSocket upgrades (browsers cannot set
// headers there); on POST /sync it would leak tokens into logs and
// histories, so it is refused.
func TestJWTAccessTokenOnlyOnWebSocketUpgrade(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	a := JWTAuth{Secret: secret, Now: func() time.Time { return now }}
	q := "/sync?access_token=" + url.QueryEscape(SignJWT(secret, map[string]any{"sub": "ada", "exp": now.Unix() + 60}))
	cases := []struct {
		name    string
		method  string
		upgrade string
		ok      bool
	}{
		{"POST /sync", http.MethodPost, "", false},
		{"POST claiming an upgrade", http.MethodPost, "websocket", false},
		{"GET without upgrade", http.MethodGet, "", false},
		{"GET with another upgrade", http.MethodGet, "h2c", false},
		{"WebSocket upgrade", http.MethodGet, "websocket", true},
		{"WebSocket upgrade, list and case", http.MethodGet, "foo, WebSocket", true},
	}
	for _, c := range cases {
		r, _ := http.NewRequest(c.method, q, nil)
		if c.upgrade != "" {
			r.Header.Set("Connection", "Upgrade")
			r.Header.Set("Upgrade", c.upgrade)
		}
		id, err := a.Authenticate(r)
		if c.ok != (err == nil) || (c.ok && id.ActorID != "ada") {
			t.Errorf("%s: %+v %v (want accepted: %v)", c.name, id, err, c.ok)
		}
		if !c.ok && syncerr.CodeOf(err) != syncerr.AuthRequired {
			t.Errorf("%s: code %s, want sync.auth_required", c.name, syncerr.CodeOf(err))
		}
	}
}
