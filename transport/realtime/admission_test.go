package realtime_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/synclane/synclane/internal/promtext"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/realtime"
)

// refusalOf returns the cap a refused upgrade names (its details), failing
// the test unless err is a sync.websocket_connection_limit refusal.
func refusalOf(t *testing.T, err error) (limit string, maxN int, msg string) {
	t.Helper()
	e := syncerr.As(err)
	if err == nil || e.Code != syncerr.WebsocketConnLimit {
		t.Fatalf("want 429 sync.websocket_connection_limit, got %v", err)
	}
	if !e.Spec().Retryable || e.Spec().RecommendedAction != "retryLater" {
		t.Fatalf("refusal %+v is not retryable/retryLater", e.Spec())
	}
	var d struct {
		Limit string `json:"limit"`
		Max   int    `json:"max"`
	}
	if err := json.Unmarshal(e.Details, &d); err != nil {
		t.Fatalf("refusal details %q: %v", e.Details, err)
	}
	return d.Limit, d.Max, e.Message
}

// One clientId (or one actor) cannot take more than its cap of sockets,
// while another client (another actor) still connects; the refusal names
// the cap and its value, and is counted by reason.
func TestPerClientAndPerActorCaps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  realtime.Options
		limit int
		// ids returns the actor and clientId of the hostile client's i-th
		// socket.
		ids    func(i int) (actor, clientID string)
		reason string
		word   string
	}{
		{"per client", realtime.Options{MaxConnections: 100, MaxConnectionsPerClient: 3}, 3,
			func(int) (string, string) { return "mallory", "m" }, realtime.RefusedClient, "per-client cap"},
		{"per actor", realtime.Options{MaxConnections: 100, MaxConnectionsPerActor: 4}, 4,
			func(i int) (string, string) { return "mallory", fmt.Sprintf("m%d", i) }, realtime.RefusedActor, "per-actor cap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, fixtureOpts{hub: tc.opts})
			ctx := ctxT(t)
			for i := range tc.limit {
				a, c := tc.ids(i)
				f.mustDial(ctx, a, c)
			}
			a, c := tc.ids(tc.limit)
			_, err := f.dial(ctx, a, c)
			limit, maxN, msg := refusalOf(t, err)
			if limit != tc.reason || maxN != tc.limit || !strings.Contains(msg, tc.word) || !strings.Contains(msg, fmt.Sprint(tc.limit)) {
				t.Fatalf("refusal names %s/%d (%q), want %s/%d mentioning %q", limit, maxN, msg, tc.reason, tc.limit, tc.word)
			}
			// An honest client of another actor still connects.
			honest := f.mustDial(ctx, "ada", "honest")
			if h := honest.Hello(); h.ClientID != "honest" {
				t.Fatalf("honest hello %+v", h)
			}
			st := f.hub.Stats()
			got := map[string]uint64{realtime.RefusedClient: st.RefusedClient, realtime.RefusedActor: st.RefusedActor, realtime.RefusedProcess: st.RefusedLimit}
			for r, n := range got {
				want := uint64(0)
				if r == tc.reason {
					want = 1
				}
				if n != want {
					t.Fatalf("refusals %v, want one %s", got, tc.reason)
				}
			}
			b, err := promtext.Collect(f.hub)
			if err != nil {
				t.Fatal(err)
			}
			if line := fmt.Sprintf("synclane_realtime_refused_total{reason=%q} 1", tc.reason); !promtext.Has(b, line) {
				t.Fatalf("metrics lack %q:\n%s", line, b)
			}
		})
	}
}

// A slot is released exactly when its socket ends: after churn (sockets
// opened to the cap and closed, again and again) nothing is held, and the
// cap admits a full set again.
func TestSocketSlotsReleasedAfterChurn(t *testing.T) {
	const perClient = 3
	f := newFixture(t, fixtureOpts{hub: realtime.Options{MaxConnectionsPerClient: perClient, MaxConnectionsPerActor: 5}})
	ctx := ctxT(t)
	held := func() (int, int) { return f.hub.SocketsOf(auth.DefaultPartition, "churn", "mallory") }
	for round := range 5 {
		var open []*realtime.Client
		for range perClient {
			c, err := f.dial(ctx, "mallory", "churn")
			if err != nil {
				t.Fatalf("round %d: %v (slots held: client and actor %v)", round, err, fmt.Sprint(held()))
			}
			open = append(open, c)
		}
		if _, err := f.dial(ctx, "mallory", "churn"); err == nil {
			t.Fatalf("round %d: a socket past the cap was accepted", round)
		}
		if c, a := held(); c != perClient || a != perClient {
			t.Fatalf("round %d: %d client and %d actor slots held with %d sockets open", round, c, a, perClient)
		}
		for i, c := range open {
			if i%2 == 0 {
				c.CloseNow() // abrupt
			} else {
				_ = c.Close() // close handshake
			}
		}
		waitFor(t, "slots released", 5*time.Second, func() bool {
			c, a := held()
			return c == 0 && a == 0 && f.hub.Stats().Sockets == 0
		})
	}
}
