package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/synclane/synclane/engine"
	adminsvc "github.com/synclane/synclane/engine/admin"
	"github.com/synclane/synclane/engine/cluster"
	"github.com/synclane/synclane/transport/admin"
)

// synclane admin cluster prints the cluster view as tables (members with
// health, view agreement, partitions and counters; this member's calls;
// its partitions) and as the API's JSON with --json. The admin listener
// is a stub answering the API's shapes.
func TestAdminClusterCommand(t *testing.T) {
	ms := []cluster.Member{{ID: "http://a", Incarnation: "ia", StartedAtMs: 1}, {ID: "http://b", Incarnation: "ib", StartedAtMs: 2}, {ID: "http://c", Incarnation: "ic", StartedAtMs: 3}}
	a := engine.ClusterStats{Self: "http://a", Members: ms, Healthy: true, Forwarded: map[string]uint64{"sync": 5, "ack": 1}, Served: map[string]uint64{"sync": 2},
		Retries: 4, Unavailable: 1, OwnershipLost: 2, Evictions: 3}
	b := engine.ClusterStats{Self: "http://b", Members: ms[:2], Healthy: false, Forwarded: map[string]uint64{"sync": 9}, Served: map[string]uint64{}}
	view := admin.ClusterView{Self: "http://a", Healthy: true, Members: []admin.ClusterMember{
		{Member: ms[0], Self: true, Reachable: true, Stats: &a},
		{Member: ms[1], Reachable: true, Stats: &b},
		{Member: ms[2], Error: "dial tcp: connection refused"},
	}, Forwarded: a.Forwarded, Served: a.Served}
	own := adminsvc.OwnershipView{Self: "http://a", Partitions: 7, Owned: 2, OwnedList: []string{"p1", "p4"},
		Members: []adminsvc.MemberOwnership{{Member: "http://a", Partitions: 2}, {Member: "http://b", Partitions: 3}, {Member: "http://c", Partitions: 2}}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+adminTestToken {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":{"code":"admin.unauthorized","message":"wrong admin token"}}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/cluster":
			_ = json.NewEncoder(w).Encode(view)
		case "/api/cluster/partitions":
			_ = json.NewEncoder(w).Encode(own)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	env := map[string]string{"SYNCLANE_ADMIN_URL": srv.URL, "SYNCLANE_ADMIN_TOKEN": adminTestToken}

	code, out, stderr := runCmdEnv(t, env, "admin", "cluster")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			lines[f[0]] = strings.Join(f, " ")
		}
	}
	for key, want := range map[string]string{
		"member":     "member http://a",
		"health":     "health healthy",
		"partitions": "partitions owned 2 of 7 registered",
		"http://a":   "http://a (this member) " + localTime(1) + " ia yes yes same 2 6 2 4 1 2 3",
		"http://b":   "http://b " + localTime(2) + " ib yes no differs: http://a http://b 3 9 0 0 0 0 0",
		"http://c":   "http://c " + localTime(3) + " ic no: dial tcp: connection refused - - 2 - - - - - -",
		"sync":       "sync 5 2",
		"ack":        "ack 1 0",
		"owned":      "owned here p1 p4",
	} {
		if got := lines[key]; got != strings.Join(strings.Fields(want), " ") {
			t.Errorf("line %s:\n got %q\nwant %q", key, got, want)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}

	code, out, stderr = runCmdEnv(t, env, "admin", "cluster", "--json")
	var got admin.ClusterView
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || len(got.Members) != 3 || got.Members[2].Error == "" || got.Forwarded["sync"] != 5 {
		t.Fatalf("--json: exit %d %s %s", code, out, stderr)
	}
	if code, _, stderr := runCmdEnv(t, env, "admin", "cluster", "--token", "wrong-token-0123456789"); code != 1 || !strings.Contains(stderr, "wrong admin token") {
		t.Fatalf("wrong token: exit %d %s", code, stderr)
	}
}
