package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

const adminTestToken = "admin-test-token-0123456789"

// serve fails closed: an admin listener without a token (or with a short
// one) refuses to start.
func TestServeRefusesAdminListenerWithoutToken(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"no token", nil, []string{"--admin-listen", "127.0.0.1:0"}},
		{"short token", nil, []string{"--admin-listen", "127.0.0.1:0", "--admin-token", "short"}},
		{"empty token from the environment", map[string]string{"SYNCLANE_ADMIN_TOKEN": ""}, []string{"--admin-listen", "127.0.0.1:0"}},
		{"ring too large", nil, []string{"--event-ring-size", "1000000"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"serve", "--listen", "127.0.0.1:0", "--data", t.TempDir()}, c.args...)
			code, _, stderr := runCmdEnv(t, c.env, args...)
			if code != 2 || !(strings.Contains(stderr, "--admin-token") || strings.Contains(stderr, "--event-ring-size")) {
				t.Fatalf("exit %d, stderr %s", code, stderr)
			}
		})
	}
}

func adminGet(t *testing.T, url, token string, out any) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("GET %s: %v in %s", url, err, b)
		}
	}
	return res.StatusCode
}

// The real binary serves the admin API on its own listener, behind its
// token, over the traffic of its sync listener.
func TestServeAdminListener(t *testing.T) {
	p := startProc(t, "--data", t.TempDir(), "--admin-listen", "127.0.0.1:0", "--admin-token", adminTestToken)
	if p.admin == "" {
		t.Fatal("serve did not announce its admin listener")
	}
	c := devClient(p.base, "ada", "c1")
	if err := pullOnce(c); err != nil {
		t.Fatal(err)
	}
	var eb struct {
		Error struct{ Code, Message string }
	}
	if st := adminGet(t, p.admin+"/api/partitions", "", &eb); st != 401 || eb.Error.Code != "admin.unauthorized" {
		t.Fatalf("no token: %d %+v", st, eb)
	}
	if st := adminGet(t, p.admin+"/api/partitions", "wrong-token-0123456789", &eb); st != 401 || eb.Error.Message != "wrong admin token" {
		t.Fatalf("wrong token: %d %+v", st, eb)
	}
	var pg struct {
		Items []struct {
			Partition string `json:"partition"`
			Clients   int    `json:"clients"`
		} `json:"items"`
	}
	if st := adminGet(t, p.admin+"/api/partitions", adminTestToken, &pg); st != 200 || len(pg.Items) != 1 || pg.Items[0].Partition != "default" {
		t.Fatalf("partitions: %d %+v", st, pg)
	}
	// The sync handler feeds the console's request series.
	var ts struct {
		Total struct {
			Requests uint64 `json:"requests"`
		} `json:"total"`
	}
	if st := adminGet(t, p.admin+"/api/timeseries?seconds=60", adminTestToken, &ts); st != 200 || ts.Total.Requests < 1 {
		t.Fatalf("timeseries after a pull: %d %+v", st, ts)
	}
	// The console page is served without a token (it holds no data).
	res, err := http.Get(p.admin + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(b), `<script type="module" src="app.js">`) {
		t.Fatalf("console: %d %s", res.StatusCode, b)
	}
}

// synclane admin reads what the server holds, as tables by default and as
// the API's JSON with --json; refusals come back in words.
func TestAdminCLI(t *testing.T) {
	p := startProc(t, "--data", t.TempDir(), "--admin-listen", "127.0.0.1:0", "--admin-token", adminTestToken, "--lease-ttl", "1h")
	c := devClient(p.base, "ada", "c1")
	if err := pullOnce(c); err != nil {
		t.Fatal(err)
	}
	if pr, err := pushTodo(t, p.base, "bob", "t1"); err != nil || pr.CommitSeq == nil || *pr.CommitSeq != 1 {
		t.Fatalf("push: %v %+v", err, pr)
	}
	env := map[string]string{"SYNCLANE_ADMIN_URL": p.admin, "SYNCLANE_ADMIN_TOKEN": adminTestToken}
	if code, out, stderr := runCmdEnv(t, env, "admin", "commits", "default", "--json"); code != 0 || !strings.Contains(out, `"items"`) {
		t.Fatalf("commits --json: exit %d %s %s", code, out, stderr)
	}
	cases := []struct {
		args []string
		code int
		want []string // substrings of stdout (code 0) or stderr
	}{
		{[]string{"overview"}, 0, []string{"serve gate", "open", "section realtime", "section blobs", `"maxBlobBytes"`, `"stored":{"deleting":0,"present":0,"presentBytes":0,"references":0,"uploading":0}`}},
		{[]string{"reactions"}, 0, []string{"reactions are off"}},
		{[]string{"reactions", "--json"}, 0, []string{`"enabled":false`, `"items":[]`}},
		{[]string{"reactions", "--state", "lost"}, 1, []string{"admin.invalid_argument", "HTTP 400"}},
		{[]string{"redrive-reaction", "1"}, 1, []string{"admin.feature_off", "HTTP 409"}},
		{[]string{"delete-reaction", "1", "--json"}, 1, []string{"admin.feature_off"}},
		{[]string{"delete-reaction"}, 2, []string{"REACTION-ID"}},
		{[]string{"partitions"}, 0, []string{"PARTITION", "default", "live"}},
		{[]string{"clients", "default"}, 0, []string{"CLIENT", "c1", "ada"}},
		{[]string{"clients", "default", "c1"}, 0, []string{"actor", "ada"}},
		{[]string{"clients", "default", "c1", "--json"}, 0, []string{`"lease":{"leaseId"`, `"revokedAtMs":0`}},
		{[]string{"revoke-lease", "default", "c1"}, 0, []string{"client c1: auth lease", "revoked"}},
		{[]string{"clients", "default", "c1"}, 0, []string{"auth lease", "(revoked "}},
		{[]string{"revoke-lease", "default", "c1", "--json"}, 0, []string{`"leaseId":"`}},
		{[]string{"revoke-lease", "default", "nobody"}, 1, []string{"admin.not_found", "no auth lease"}},
		{[]string{"revoke-lease", "default"}, 2, []string{"PARTITION CLIENT"}},
		{[]string{"clients", "default", "nobody"}, 1, []string{"admin.not_found", "HTTP 404"}},
		{[]string{"commits", "default", "--limit", "5"}, 0, []string{"SEQ", "CHANGES"}},
		{[]string{"commits", "default", "--client", "client-bob"}, 0, []string{"client-bob", "todos/t1"}},
		{[]string{"commit", "default", "1"}, 0, []string{"upsert", "todos", "t1", `"title":"title t1"`}},
		{[]string{"commit", "default", "9"}, 1, []string{"not retained", "admin.not_found"}},
		{[]string{"row", "default", "todos", "t1"}, 0, []string{"version", "title t1", "whole retained log, 1 commits", "bob"}},
		{[]string{"row", "default", "todos", "nope"}, 1, []string{"admin.not_found"}},
		{[]string{"scopes", "default"}, 0, []string{"VAR", "list_id", "L"}},
		{[]string{"events"}, 0, []string{"events kept"}},
		{[]string{"maintenance", "--dry-run"}, 0, []string{"checked 1 partitions"}},
		{[]string{"rotate-epoch", "default"}, 0, []string{"new log epoch"}},
		{[]string{"rotate-epoch", "nowhere"}, 1, []string{"admin.not_found"}},
		{[]string{"events"}, 0, []string{"partition.epoch_rotated", "maintenance.run"}},
		{[]string{"partitions", "--token", "wrong-token-0123456789"}, 1, []string{"wrong admin token", "HTTP 401"}},
		{[]string{"commit", "default"}, 2, []string{"PARTITION SEQ"}},
		{[]string{"frobnicate"}, 2, []string{"unknown command"}},
		{[]string{"cluster"}, 1, []string{"does not run in cluster mode", "HTTP 404"}},
		{[]string{"cluster", "extra"}, 2, []string{"no arguments"}},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, stderr := runCmdEnv(t, env, append([]string{"admin"}, tc.args...)...)
			text := out
			if tc.code != 0 {
				text = stderr
			}
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout %s\nstderr %s", code, tc.code, out, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Fatalf("output lacks %q:\n%s", w, text)
				}
			}
		})
	}
	if code, _, stderr := runCmdEnv(t, map[string]string{"SYNCLANE_ADMIN_URL": p.admin}, "admin", "partitions"); code != 2 || !strings.Contains(stderr, "no admin token") {
		t.Fatalf("no token: exit %d %s", code, stderr)
	}
	var pg struct {
		Items []struct{ Partition string } `json:"items"`
	}
	code, out, _ := runCmdEnv(t, env, "admin", "partitions", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &pg) != nil || len(pg.Items) != 1 || pg.Items[0].Partition != "default" {
		t.Fatalf("partitions --json: exit %d %s", code, out)
	}
}
