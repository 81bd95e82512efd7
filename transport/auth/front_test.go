package auth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/memory"
)

func TestSourceOf(t *testing.T) {
	for _, c := range []struct{ remote, want string }{
		{"203.0.113.7:4000", "203.0.113.7"},
		{"[2001:db8:1:2:3:4:5:6]:443", "2001:db8:1:2::/64"},
		{"[::ffff:192.0.2.1]:80", "192.0.2.1"},
		{"not-an-address", "not-an-address"},
		{"host.example:80", "host.example"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = c.remote
		if got := SourceOf(r); got != c.want {
			t.Errorf("SourceOf(%q) = %q, want %q", c.remote, got, c.want)
		}
	}
}

// Every refusal is counted with bounded labels: a known transport keeps
// its route kind, a catalog code its reason; anything else is "other".
func TestReportAuthFailureLabels(t *testing.T) {
	s := schema.MustDemo()
	eng, err := engine.New(context.Background(), engine.Config{Schema: s, Backend: memory.New().Backend(),
		Resolver: engine.AllowAll(s), Events: events.NewRing(0, nil), SlowRequest: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	refuse := func(code syncerr.Code) Authenticator {
		return AuthenticatorFunc(func(*http.Request) (engine.Identity, error) {
			return engine.Identity{}, syncerr.New(code, "no")
		})
	}
	for _, c := range []struct {
		source string
		code   syncerr.Code
		want   engine.AuthFailureKey
	}{
		{"httpsync", syncerr.AuthRequired, engine.AuthFailureKey{Route: "sync", Reason: "sync.auth_required"}},
		{"httpsync.blobs", syncerr.Forbidden, engine.AuthFailureKey{Route: "blobs", Reason: "sync.forbidden"}},
		{"realtime", syncerr.AuthRequired, engine.AuthFailureKey{Route: "realtime", Reason: "sync.auth_required"}},
		{"opwatch", "host.custom_code", engine.AuthFailureKey{Route: "opwatch", Reason: "other"}},
		{"someone.else", syncerr.AuthRequired, engine.AuthFailureKey{Route: "other", Reason: "sync.auth_required"}},
	} {
		before := eng.AuthFailureCounts()[c.want]
		r := httptest.NewRequest(http.MethodGet, "/x", nil)
		if _, ok := Authenticate(httptest.NewRecorder(), r, eng, refuse(c.code), c.source); ok {
			t.Fatal("refusing authenticator admitted the request")
		}
		if got := eng.AuthFailureCounts()[c.want]; got != before+1 {
			t.Errorf("%s refusing with %s: count of %+v went %d -> %d, want +1", c.source, c.code, c.want, before, got)
		}
	}
}
