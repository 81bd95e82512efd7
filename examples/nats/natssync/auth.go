package natssync

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/auth"
)

// Authenticator authenticates one request message, yielding the actor and
// the partition it addresses. A returned *syncerr.Error chooses the
// refusal code (an uncoded error is answered sync.auth_required).
//
// NATS itself authenticates connections, not the messages on them: any
// client allowed to publish on the request subject reaches the server. So
// the identity must travel in the message and be verified here, as the
// HTTP transport verifies each request.
type Authenticator interface {
	Authenticate(ctx context.Context, m *nats.Msg) (engine.Identity, error)
}

// AuthenticatorFunc adapts a function to Authenticator.
type AuthenticatorFunc func(ctx context.Context, m *nats.Msg) (engine.Identity, error)

// Authenticate calls f.
func (f AuthenticatorFunc) Authenticate(ctx context.Context, m *nats.Msg) (engine.Identity, error) {
	return f(ctx, m)
}

// DevAuth is the development authenticator: the actor from header x-actor
// (required), the partition from x-partition (default "default"). It
// trusts whoever can publish on the subject; never use it in production.
type DevAuth struct{}

// Authenticate implements Authenticator.
func (DevAuth) Authenticate(_ context.Context, m *nats.Msg) (engine.Identity, error) {
	actor := strings.TrimSpace(m.Header.Get(HeaderActor))
	if actor == "" {
		return engine.Identity{}, syncerr.New(syncerr.AuthRequired, "development mode: send the actor id in header %s", HeaderActor)
	}
	p := strings.TrimSpace(m.Header.Get(HeaderPartition))
	if p == "" {
		p = auth.DefaultPartition
	}
	return engine.Identity{ActorID: actor, Partition: p}, nil
}

// HTTPAuth runs an authenticator of the HTTP transport (transport/auth:
// auth.JWTAuth, auth.JWKSAuth, or a host's own auth.Authenticator) on a
// message, so a deployment verifies the same tokens on NATS as on HTTP:
// the message's Authorization header (and any header listed in Headers)
// is handed to it on a synthetic POST request. The synthetic request has
// no remote address and an empty body; an authenticator must read only
// headers.
type HTTPAuth struct {
	// Auth is the HTTP authenticator (required).
	Auth auth.Authenticator
	// Headers are further message headers to copy (a host's own, such as
	// an API key header); Authorization is always copied.
	Headers []string
}

// Authenticate implements Authenticator.
func (a HTTPAuth) Authenticate(ctx context.Context, m *nats.Msg) (engine.Identity, error) {
	r := &http.Request{Method: http.MethodPost, URL: &url.URL{Path: m.Subject}, Header: http.Header{}, Proto: "NATS"}
	r = r.WithContext(ctx)
	for _, name := range append([]string{HeaderAuthorization}, a.Headers...) {
		// NATS headers are case-sensitive: accept the canonical and the
		// lower-case spelling.
		vals := m.Header.Values(name)
		if lower := strings.ToLower(name); lower != name {
			vals = append(vals, m.Header.Values(lower)...)
		}
		for _, v := range vals {
			r.Header.Add(name, v)
		}
	}
	return a.Auth.Authenticate(r)
}
