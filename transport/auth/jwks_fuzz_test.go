package auth

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/auth/jwks"
	"github.com/synclane/synclane/transport/auth/jwks/jwkstest"
)

// staticKeys is a KeySource over fixed keys.
type staticKeys []jwks.Key

func (s staticKeys) Lookup(_ context.Context, kid string) ([]jwks.Key, error) {
	var out []jwks.Key
	for _, k := range s {
		if kid == "" || k.ID == kid {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return nil, jwks.ErrUnknownKey
	}
	return out, nil
}

// FuzzJWKSAuth: hostile tokens never panic, are refused with
// sync.auth_required only, and an accepted one names an actor.
func FuzzJWKSAuth(f *testing.F) {
	s := jwkstest.NewEC("k", "ES256")
	now := time.Unix(1_800_000_000, 0)
	good := s.Sign(map[string]any{"iss": testIssuer, "aud": testAudience, "sub": "ada", "exp": now.Unix() + 60})
	f.Add(good)
	f.Add(good[:len(good)-2])
	f.Add("a.b.c")
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.")
	f.Add("eyJhbGciOiJIUzI1NiIsImtpZCI6ImsifQ.eyJzdWIiOiJ4In0.AAAA")
	key := s.Key.Public()
	a := JWKSAuth{Keys: staticKeys{{ID: "k", Public: key}}, Issuer: testIssuer, Audience: []string{testAudience},
		Now: func() time.Time { return now }}
	f.Fuzz(func(t *testing.T, tok string) {
		r, _ := http.NewRequest(http.MethodPost, "/sync", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		id, err := a.Authenticate(r)
		if err == nil && id.ActorID == "" {
			t.Fatal("authenticated without an actor")
		}
		if err != nil && syncerr.CodeOf(err) != syncerr.AuthRequired {
			t.Fatalf("refusal coded %s: %v", syncerr.CodeOf(err), err)
		}
	})
}
