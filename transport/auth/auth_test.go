package auth

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

// In development mode a WebSocket upgrade may name its actor and partition
// in the query (browsers cannot set headers there); a header, when given,
// wins over its parameter; any other request ignores the parameters.
func TestDevAuthQueryOnWebSocketUpgrade(t *testing.T) {
	cases := []struct {
		name             string
		method, upgrade  string
		query            string
		header           map[string]string
		actor, partition string // "" actor: refused with sync.auth_required
	}{
		{"headers", http.MethodPost, "", "", map[string]string{"x-actor": "ada", "x-partition": "p"}, "ada", "p"},
		{"upgrade, query", http.MethodGet, "websocket", "actor=ada&partition=p", nil, "ada", "p"},
		{"upgrade, query actor, default partition", http.MethodGet, "websocket", "actor=ada", nil, "ada", DefaultPartition},
		{"upgrade, query values trimmed", http.MethodGet, "websocket", "actor=+ada+&partition=+p+", nil, "ada", "p"},
		{"upgrade, headers win", http.MethodGet, "websocket", "actor=eve&partition=q", map[string]string{"x-actor": "ada", "x-partition": "p"}, "ada", "p"},
		{"upgrade, header actor, query partition", http.MethodGet, "websocket", "actor=eve&partition=q", map[string]string{"x-actor": "ada"}, "ada", "q"},
		{"upgrade, query actor, header partition", http.MethodGet, "websocket", "actor=eve&partition=q", map[string]string{"x-partition": "p"}, "eve", "p"},
		{"upgrade, nothing", http.MethodGet, "websocket", "", nil, "", ""},
		{"POST ignores the query", http.MethodPost, "", "actor=ada", nil, "", ""},
		{"POST claiming an upgrade ignores the query", http.MethodPost, "websocket", "actor=ada", nil, "", ""},
		{"GET without upgrade ignores the query", http.MethodGet, "", "actor=ada", nil, "", ""},
		{"POST ignores the query's partition", http.MethodPost, "", "partition=q", map[string]string{"x-actor": "ada"}, "ada", DefaultPartition},
	}
	for _, c := range cases {
		r, _ := http.NewRequest(c.method, "/realtime?clientId=c&"+c.query, nil)
		if c.upgrade != "" {
			r.Header.Set("Connection", "Upgrade")
			r.Header.Set("Upgrade", c.upgrade)
		}
		for k, v := range c.header {
			r.Header.Set(k, v)
		}
		id, err := DevAuth{}.Authenticate(r)
		if c.actor == "" {
			if syncerr.CodeOf(err) != syncerr.AuthRequired {
				t.Errorf("%s: %+v %v, want sync.auth_required", c.name, id, err)
			}
			continue
		}
		if err != nil || id.ActorID != c.actor || id.Partition != c.partition {
			t.Errorf("%s: %+v %v, want %s in %s", c.name, id, err, c.actor, c.partition)
		}
	}
}
