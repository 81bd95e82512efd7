package auth

import (
	"net/http"
	"testing"
	"time"
)

// FuzzJWT: hostile bearer tokens never panic, and an accepted one always
// names an actor.
func FuzzJWT(f *testing.F) {
	secret := []byte("s3cret")
	good := SignJWT(secret, map[string]any{"sub": "ada", "partition": "p", "scopes": map[string][]string{"list_id": {"a"}}})
	f.Add(good)
	f.Add("a.b.c")
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.")
	a := JWTAuth{Secret: secret, Now: func() time.Time { return time.Unix(1_800_000_000, 0) }}
	f.Fuzz(func(t *testing.T, tok string) {
		r, _ := http.NewRequest(http.MethodPost, "/sync", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		id, err := a.Authenticate(r)
		if err == nil && id.ActorID == "" {
			t.Fatal("authenticated without an actor")
		}
	})
}

func TestJWTAuth(t *testing.T) {
	secret := []byte("s3cret")
	now := time.Unix(1_800_000_000, 0)
	a := JWTAuth{Secret: secret, Now: func() time.Time { return now }}
	cases := []struct {
		name   string
		tok    string
		actor  string
		failed bool
	}{
		{"valid", SignJWT(secret, map[string]any{"sub": "ada", "partition": "p1", "scopes": map[string][]string{"list_id": {"a"}}, "exp": now.Unix() + 60}), "ada", false},
		{"default partition", SignJWT(secret, map[string]any{"sub": "bob", "exp": now.Unix() + 60}), "bob", false},
		{"no exp", SignJWT(secret, map[string]any{"sub": "bob"}), "", true},
		{"wrong secret", SignJWT([]byte("other"), map[string]any{"sub": "ada"}), "", true},
		{"expired", SignJWT(secret, map[string]any{"sub": "ada", "exp": now.Unix() - 3600}), "", true},
		{"not yet valid", SignJWT(secret, map[string]any{"sub": "ada", "nbf": now.Unix() + 3600}), "", true},
		{"no sub", SignJWT(secret, map[string]any{"partition": "p"}), "", true},
		{"alg none", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhZGEifQ.", "", true},
		{"garbage", "not-a-token", "", true},
	}
	for _, c := range cases {
		r, _ := http.NewRequest(http.MethodPost, "/sync", nil)
		r.Header.Set("Authorization", "Bearer "+c.tok)
		id, err := a.Authenticate(r)
		if c.failed != (err != nil) || id.ActorID != c.actor {
			t.Errorf("%s: %+v %v", c.name, id, err)
		}
	}
	r, _ := http.NewRequest(http.MethodPost, "/sync", nil)
	r.Header.Set("Authorization", "Bearer "+cases[0].tok)
	id, _ := a.Authenticate(r)
	if id.Partition != "p1" || id.Grants["list_id"][0] != "a" {
		t.Fatalf("claims not mapped: %+v", id)
	}
}
