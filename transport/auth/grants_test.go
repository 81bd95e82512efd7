package auth

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/syncerr"
)

func TestDeclaredGrants(t *testing.T) {
	declared := map[string]bool{"list_id": true, "org_id": true}
	for _, c := range []struct {
		name   string
		grants map[string][]string
		err    string // "" passes
	}{
		{"no grants", nil, ""},
		{"declared variables", map[string][]string{"list_id": {"a"}, "org_id": {"*"}}, ""},
		{"one undeclared", map[string][]string{"project_id": {"p1"}}, `"project_id"`},
		{"declared and undeclared", map[string][]string{"list_id": {"a"}, "zeta": {"z"}, "beta": {"b"}}, `"beta" (and 1 more), which no table of this server's schema declares`},
	} {
		inner := AuthenticatorFunc(func(*http.Request) (engine.Identity, error) {
			return engine.Identity{ActorID: "ada", Partition: DefaultPartition, Grants: c.grants}, nil
		})
		id, err := DeclaredGrants(inner, func(v string) bool { return declared[v] }).Authenticate(httptest.NewRequest(http.MethodPost, "/sync", nil))
		switch {
		case c.err == "" && (err != nil || id.ActorID != "ada"):
			t.Errorf("%s: %+v, %v; want the identity", c.name, id, err)
		case c.err != "" && (syncerr.CodeOf(err) != syncerr.AuthRequired || !strings.Contains(syncerr.As(err).Message, c.err) || id.ActorID != ""):
			t.Errorf("%s: %+v, %v; want sync.auth_required saying %s", c.name, id, err, c.err)
		}
	}
	// The inner refusal passes through unchanged.
	refused := AuthenticatorFunc(func(*http.Request) (engine.Identity, error) {
		return engine.Identity{}, syncerr.New(syncerr.AuthRequired, "missing bearer token")
	})
	if _, err := DeclaredGrants(refused, func(string) bool { return false }).Authenticate(httptest.NewRequest(http.MethodGet, "/", nil)); syncerr.As(err).Message != "missing bearer token" {
		t.Errorf("inner refusal: %v", err)
	}
}
