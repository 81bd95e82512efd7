package realtime_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httperr"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
	"github.com/synclane/synclane/transport/realtime"
)

// waitLiveIn waits until clientID's socket in partition part is live.
func (f *fixture) waitLiveIn(t *testing.T, part, clientID string) {
	t.Helper()
	waitFor(t, clientID+" live in "+part, 5*time.Second, func() bool {
		for _, s := range f.hub.Sessions(part) {
			if s.ClientID == clientID && s.Live {
				return true
			}
		}
		return false
	})
}

// In development mode an upgrade without any header (what a browser and
// the official WebSocket connector send) names its actor and partition in
// the query: the socket opens on that identity and partition, and a commit
// another client makes there reaches it as a delta.
func TestDevUpgradeByQuery(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := ctxT(t)
	team := func(actor string) http.Header { return http.Header{"X-Actor": {actor}, "X-Partition": {"team"}} }
	b := httpsynctest.NewReplica(&httpsync.Client{URL: f.srv.URL + "/sync", ClientID: "b", Header: team("bob")}, f.schema)
	b.Subscribe("sub-groceries", "todos", map[string][]string{"list_id": {"groceries"}})
	if err := b.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	bs, err := realtime.Dial(ctx, f.srv.URL+"/realtime?actor=bob&partition=team", "b", realtime.DialOptions{})
	if err != nil {
		t.Fatalf("upgrade with the identity in the query: %v", err)
	}
	t.Cleanup(bs.CloseNow)
	if h := bs.Hello(); h.ActorID != "bob" || h.ClientID != "b" || h.RequiresSync {
		t.Fatalf("hello: %+v", h)
	}
	f.waitLiveIn(t, "team", "b")
	if n := len(f.hub.Sessions(auth.DefaultPartition)); n != 0 {
		t.Fatalf("%d sockets in the default partition; the query named partition team", n)
	}
	a := &httpsync.Client{URL: f.srv.URL + "/sync", ClientID: "a", Header: team("ada")}
	seq := push(t, ctx, a, "t1", "groceries", "milk")
	d := nextDelta(t, ctx, bs)
	if cm := commits(d.Message); len(cm) != 1 || cm[0].CommitSeq != seq || cm[0].ActorID != "ada" || d.Cursor() != seq {
		t.Fatalf("delta: %+v up to %d, want ada's commit %d", cm, d.Cursor(), seq)
	}

	// Headers win over the query, each on its own.
	hs, err := realtime.Dial(ctx, f.srv.URL+"/realtime?actor=eve&partition=team", "h", realtime.DialOptions{Header: http.Header{"X-Actor": {"hal"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hs.CloseNow)
	if h := hs.Hello(); h.ActorID != "hal" {
		t.Fatalf("header x-actor hal and query actor eve: hello for %q", h.ActorID)
	}
	waitFor(t, "h in partition team", 5*time.Second, func() bool {
		for _, s := range f.hub.Sessions("team") {
			if s.ClientID == "h" && s.ActorID == "hal" {
				return true
			}
		}
		return false
	})
}

// With JWT authentication the development parameters mean nothing: the
// token decides actor and partition, and without a token the upgrade is
// refused whatever the query says.
func TestJWTUpgradeIgnoresDevQuery(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	f := newFixture(t, fixtureOpts{auth: auth.JWTAuth{Secret: secret}})
	ctx := ctxT(t)
	tok := auth.SignJWT(secret, map[string]any{"sub": "ada", "partition": "p1", "exp": time.Now().Add(time.Hour).Unix()})
	c, err := realtime.Dial(ctx, f.srv.URL+"/realtime?actor=eve&partition=p2&access_token="+url.QueryEscape(tok), "c1", realtime.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseNow)
	if h := c.Hello(); h.ActorID != "ada" {
		t.Fatalf("hello for %q, want the token's ada", h.ActorID)
	}
	waitFor(t, "c1 registered in p1", 5*time.Second, func() bool { return len(f.hub.Sessions("p1")) == 1 })
	if n := len(f.hub.Sessions("p2")); n != 0 {
		t.Fatalf("%d sockets in the query's partition p2", n)
	}
	_, err = realtime.Dial(ctx, f.srv.URL+"/realtime?actor=eve&partition=p2", "c2", realtime.DialOptions{})
	if syncerr.CodeOf(err) != syncerr.AuthRequired {
		t.Fatalf("no token, development parameters: %v, want sync.auth_required", err)
	}
	_, err = realtime.Dial(ctx, f.srv.URL+"/realtime", "c3", realtime.DialOptions{Header: http.Header{"X-Actor": {"eve"}}})
	if syncerr.CodeOf(err) != syncerr.AuthRequired {
		t.Fatalf("no token, development header: %v, want sync.auth_required", err)
	}
}

// Every refusal of an upgrade is an HTTP answer with the protocol's JSON
// error body: authentication, clientId and identifier limits (for query
// parameters as for headers), a missing or malformed WebSocket handshake,
// a refused Origin, the connection cap.
func TestUpgradeRefusalsAreJSON(t *testing.T) {
	f := newFixture(t, fixtureOpts{hub: realtime.Options{MaxConnections: 1}})
	strict := newFixture(t, fixtureOpts{hub: realtime.Options{OriginPatterns: []string{"app.example.com"}}})
	ctx := ctxT(t)
	ws := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"},
		"Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}}
	with := func(h http.Header, kv ...string) http.Header {
		out := h.Clone()
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				out.Del(kv[i])
			} else {
				out.Set(kv[i], kv[i+1])
			}
		}
		return out
	}
	long := strings.Repeat("a", 513)
	cases := []struct {
		name   string
		srv    *fixture
		query  string
		header http.Header
		status int
		code   syncerr.Code
	}{
		{"no credentials", f, "clientId=x", ws, 401, syncerr.AuthRequired},
		{"no clientId", f, "actor=ada", ws, 400, syncerr.InvalidRequest},
		{"actor over 512 bytes in the query", f, "clientId=x&actor=" + long, ws, 400, syncerr.InvalidRequest},
		{"partition over 512 bytes in the query", f, "clientId=x&actor=ada&partition=" + long, ws, 400, syncerr.InvalidRequest},
		{"U+0000 in the query's actor", f, "clientId=x&actor=a%00b", ws, 400, syncerr.InvalidRequest},
		{"the query's actor without an upgrade", f, "clientId=x&actor=ada", http.Header{}, 401, syncerr.AuthRequired},
		{"no upgrade", f, "clientId=x", http.Header{"X-Actor": {"ada"}}, 426, syncerr.InvalidRequest},
		{"no Connection: Upgrade", f, "clientId=x&actor=ada", with(ws, "Connection", ""), 426, syncerr.InvalidRequest},
		{"unsupported WebSocket version", f, "clientId=x&actor=ada", with(ws, "Sec-Websocket-Version", "8"), 400, syncerr.InvalidRequest},
		{"no Sec-WebSocket-Key", f, "clientId=x&actor=ada", with(ws, "Sec-Websocket-Key", ""), 400, syncerr.InvalidRequest},
		{"refused Origin", strict, "clientId=x&actor=ada", with(ws, "Origin", "https://evil.example.net"), 403, syncerr.Forbidden},
	}
	check := func(name string, srv *fixture, query string, h http.Header, status int, code syncerr.Code) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.srv.URL+"/realtime?"+query, nil)
		req.Header = h
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var eb httperr.Body
		if res.StatusCode != status || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") ||
			json.Unmarshal(body, &eb) != nil || eb.Code != string(code) || eb.Message == "" {
			t.Errorf("%s: %d %s %q, want %d with JSON code %s", name, res.StatusCode, res.Header.Get("Content-Type"), body, status, code)
		}
	}
	for _, c := range cases {
		check(c.name, c.srv, c.query, c.header, c.status, c.code)
	}
	// The cap: one socket open, the next upgrade is refused.
	one, err := realtime.Dial(ctx, f.srv.URL+"/realtime?actor=ada", "one", realtime.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(one.CloseNow)
	check("connection cap", f, "clientId=two&actor=ada", ws, 429, syncerr.WebsocketConnLimit)
	// An allowed Origin still upgrades.
	ok, err := realtime.Dial(context.Background(), strict.srv.URL+"/realtime?actor=ada", "o", realtime.DialOptions{Header: http.Header{"Origin": {"https://app.example.com"}}})
	if err != nil {
		t.Fatalf("allowed Origin: %v", err)
	}
	ok.CloseNow()
}
