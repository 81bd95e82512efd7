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
