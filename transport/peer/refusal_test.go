package peer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/cluster"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httperr"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/peer"
)

// memberServer serves one engine's member routes and a relay's follow
// link on one server, as serve mounts them; the relay is started only
// when started is true (before Start it is "not serving").
func memberServer(t *testing.T, started bool) string {
	t.Helper()
	sch := schema.MustDemo()
	eng, err := engine.New(context.Background(), engine.Config{Schema: sch, Backend: memory.New().Backend(), Resolver: engine.AllowAll(sch)})
	if err != nil {
		t.Fatal(err)
	}
	srv, id := server(t)
	ms := newMembership()
	ms.set(id)
	relay := peer.NewRelay(peer.RelayConfig{Self: id, Membership: ms, Secret: testSecret(t), Hub: &sink{},
		MaxSeq: func(context.Context, string) (int64, error) { return 0, nil }})
	mux := http.NewServeMux()
	mux.Handle(peer.FollowPath, relay)
	mux.Handle(peer.Prefix, peer.NewHandler(eng, peer.HandlerOptions{Secret: testSecret(t)}))
	srv.Config.Handler = mux
	srv.Start()
	if started {
		relay.Start()
	}
	t.Cleanup(func() {
		srv.Close()
		relay.Close()
		_ = eng.Close()
	})
	return id
}

// Every refusal of every /_cluster/ route is the protocol's JSON error
// body with its code: an unsigned call (401 sync.auth_required, reason
// "signature"), one signed with another secret, one with another
// method (405), a follow link that is no WebSocket upgrade (426) and one
// to a member not serving follow links (503, retryable).
func TestClusterRouteRefusalsAreJSON(t *testing.T) {
	serving := memberServer(t, true)
	notServing := memberServer(t, false)
	sec := testSecret(t)
	other, _ := peer.NewSecret([]byte("another secret"))
	sign := func(s peer.Secret) func(*http.Request) {
		return func(r *http.Request) { s.Sign(r, "http://tester", time.Now()) }
	}
	routes := []string{"sync", "client-state", "deltas", "ack", "operation", "member", "events", "release", "probe", "no-such-route"}
	type refusal struct {
		name, base, method, path string
		sign                     func(*http.Request)
		upgrade                  bool
		status                   int
		code                     syncerr.Code
		reason                   string
	}
	var cases []refusal
	for _, r := range routes {
		p := "/_cluster/v1/" + r
		cases = append(cases,
			refusal{"unsigned " + r, serving, http.MethodPost, p, func(*http.Request) {}, false, 401, syncerr.AuthRequired, "signature"},
			refusal{"other secret " + r, serving, http.MethodPost, p, sign(other), false, 401, syncerr.AuthRequired, "signature"},
			refusal{"GET " + r, serving, http.MethodGet, p, sign(sec), false, 405, syncerr.InvalidRequest, ""},
		)
	}
	cases = append(cases,
		refusal{"unsigned follow", serving, http.MethodGet, peer.FollowPath, func(*http.Request) {}, true, 401, syncerr.AuthRequired, "signature"},
		refusal{"other secret follow", serving, http.MethodGet, peer.FollowPath, sign(other), true, 401, syncerr.AuthRequired, "signature"},
		refusal{"POST follow", serving, http.MethodPost, peer.FollowPath, sign(sec), true, 405, syncerr.InvalidRequest, ""},
		refusal{"follow without upgrade", serving, http.MethodGet, peer.FollowPath, sign(sec), false, 426, syncerr.InvalidRequest, ""},
		refusal{"follow, not serving", notServing, http.MethodGet, peer.FollowPath, sign(sec), true, 503, syncerr.InternalError, "not_serving"},
		refusal{"unknown route", serving, http.MethodPost, "/_cluster/v1/no-such-route", sign(sec), false, 404, syncerr.NotFound, ""},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, c.base+c.path, strings.NewReader("{}"))
			if c.upgrade {
				for k, v := range map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="} {
					req.Header.Set(k, v)
				}
			}
			c.sign(req)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var body httperr.Body
			derr := json.NewDecoder(res.Body).Decode(&body)
			if res.StatusCode != c.status || res.Header.Get("Content-Type") != "application/json" || derr != nil || body.Code != string(c.code) {
				t.Fatalf("HTTP %d %s %+v (%v), want %d application/json %s", res.StatusCode, res.Header.Get("Content-Type"), body, derr, c.status, c.code)
			}
			var d struct {
				Reason string `json:"reason"`
			}
			if len(body.Details) > 0 {
				_ = json.Unmarshal(body.Details, &d)
			}
			if d.Reason != c.reason {
				t.Fatalf("details %s, want reason %q", body.Details, c.reason)
			}
			if c.status == 503 && (res.Header.Get("Retry-After") == "" || !body.Retryable) {
				t.Fatalf("503 without Retry-After or not retryable: %v %+v", res.Header, body)
			}
		})
	}
}

// A member whose calls the owner refuses (another cluster secret) never
// hands that refusal to its clients: each request is retried until the
// move timeout and answered 503 sync.internal_error partition_moving
// (retryLater), never 401 sync.auth_required (refreshAuth, which logs a
// user out). The refusal is logged as an error once for the owner however
// many calls it refused.
func TestRefusedMemberIsUnavailableToClients(t *testing.T) {
	owner := memberServer(t, true)
	self := "http://127.0.0.1:1" // never called: it forwards only
	ms := newMembership()
	ms.set(self, owner)
	p := ownedBy(t, []cluster.View{view(self, owner)}, []string{owner})

	core, logs := observer.New(zap.InfoLevel)
	other, _ := peer.NewSecret([]byte("another secret"))
	peers, err := peer.NewClient(peer.ClientOptions{Self: self, Secret: other, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(peers.Close)
	sch := schema.MustDemo()
	eng, err := engine.New(context.Background(), engine.Config{Schema: sch, Backend: pgtest.Open(t).Backend(), Resolver: engine.AllowAll(sch),
		Cluster: &engine.ClusterConfig{Self: self, Membership: ms, Peers: peers, MoveTimeout: 300 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	srv := httptest.NewServer(httpsync.NewHandler(eng, httpsync.Options{Auth: auth.DevAuth{}}))
	t.Cleanup(srv.Close)

	body, err := ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: "c1", SchemaVersion: 1}, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows}}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/sync", bytes.NewReader(body))
		req.Header.Set("Content-Type", httpsync.ContentType)
		req.Header.Set("X-Actor", "ada")
		req.Header.Set("X-Partition", p)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var eb httperr.Body
		derr := json.NewDecoder(res.Body).Decode(&eb)
		res.Body.Close()
		if res.StatusCode != http.StatusServiceUnavailable || derr != nil || eb.Code != string(syncerr.InternalError) ||
			eb.RecommendedAction != "retryLater" || !strings.Contains(string(eb.Details), `"partition_moving"`) {
			t.Fatalf("request %d for a partition of a member refusing this one: HTTP %d %+v (%v), want 503 sync.internal_error partition_moving", i, res.StatusCode, eb, derr)
		}
	}
	refused := logs.FilterLevelExact(zap.ErrorLevel).FilterField(zap.String("peer", owner)).All()
	if len(refused) != 1 || !strings.Contains(refused[0].Message, "refused") {
		t.Fatalf("error logs naming %s: %d %+v, want one about the refusal", owner, len(refused), refused)
	}
}
