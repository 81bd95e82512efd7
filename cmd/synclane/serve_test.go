package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/synclane/synclane/internal/promtext"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
	"github.com/synclane/synclane/transport/realtime"
)

var todoCodec = ssp2.NewRowCodec(schema.MustDemo().Table("todos").Columns)

func pushTodo(t *testing.T, base, actor, id string) (*ssp2.PushResult, error) {
	t.Helper()
	row, err := todoCodec.AppendSparse(nil, ssp2.Row{id, "L", "title " + id, false, int64(1), int64(2)}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := &httpsync.Client{URL: base + "/sync", ClientID: "client-" + actor, Header: http.Header{"X-Actor": {actor}}}
	rs, err := c.Push(context.Background(), &ssp2.PushCommit{ClientCommitID: id,
		Operations: []ssp2.Operation{{Table: "todos", RowID: id, Op: ssp2.OpUpsert, Payload: row}}})
	if err != nil {
		return nil, err
	}
	return rs[0], nil
}

func pullTodos(t *testing.T, base, actor string) (map[string]httpsynctest.ReplicaRow, error) {
	t.Helper()
	c := &httpsync.Client{URL: base + "/sync", ClientID: "reader-" + actor, Header: http.Header{"X-Actor": {actor}}}
	r := httpsynctest.NewReplica(c, schema.MustDemo())
	r.Subscribe("todos", "todos", map[string][]string{"list_id": {"L"}})
	if err := r.SyncUntilIdle(context.Background(), 10); err != nil {
		return nil, err
	}
	return r.Rows["todos"], nil
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func TestServeDefaultsDrainAndRestart(t *testing.T) {
	data := t.TempDir()
	base, stop := startServeStoppable(t, "--data", data)
	if pr, err := pushTodo(t, base, "ada", "t1"); err != nil || pr.Status != ssp2.CommitApplied {
		t.Fatalf("push: %+v %v", pr, err)
	}
	if code, body := get(t, base+"/readyz"); code != 200 {
		t.Fatalf("/readyz = %d %s", code, body)
	}
	if code, body := get(t, base+"/metrics"); code != 200 || !promtext.Has([]byte(body), "synclane_commits_applied_total 1") {
		t.Fatalf("/metrics = %d\n%s", code, body)
	}
	if code := stop(); code != 0 {
		t.Fatalf("serve exited %d on shutdown", code)
	}
	if _, err := os.Stat(filepath.Join(data, "synclane.db")); err != nil {
		t.Fatalf("no SQLite database in the data dir: %v", err)
	}
	base = startServe(t, "--data", data)
	rows, err := pullTodos(t, base, "bob")
	if err != nil || len(rows) != 1 || rows["t1"].Values[2] != "title t1" {
		t.Fatalf("after restart: %v %v", rows, err)
	}
}

func TestServeRejectsBadSchemaAndFlags(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "schema.json")
	os.WriteFile(bad, []byte(`{"version":1,"tables":[{"name":"t","columns":[{"name":"id","type":"uuid"}],"primaryKey":"id","scopes":["x:{id}"]}]}`), 0o600)
	code, _, stderr := runCmd(t, "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--schema", bad)
	if code != 2 || !strings.Contains(stderr, `unknown type \"uuid\"`) || !strings.Contains(stderr, "schema_compile") {
		t.Fatalf("bad schema: exit %d, stderr %s", code, stderr)
	}
	if code, _, _ := runCmd(t, "serve", "--no-such-flag"); code != 2 {
		t.Fatalf("unknown flag: exit %d", code)
	}
	if code, _, stderr := runCmd(t, "serve", "-h"); code != 0 || !strings.Contains(stderr, "-jwt-secret") {
		t.Fatalf("serve -h: exit %d\n%s", code, stderr)
	}
	if code, _, _ := runCmd(t, "frobnicate"); code != 2 {
		t.Fatalf("unknown command: exit %d", code)
	}
}

// TestServeRefusesCRDTColumnsItCannotMerge (SPEC §5.10.1): a crdt column
// without a crdtType, or with one this binary has no merger for, stops
// serve (and the maintenance commands) at schema compile, naming the table
// and the column, before any database is created.
func TestServeRefusesCRDTColumnsItCannotMerge(t *testing.T) {
	schemaWith := func(doc string) string {
		return `{"version":1,"tables":[{"name":"notes","columns":[{"name":"id","type":"string"},` + doc +
			`],"primaryKey":"id","scopes":["n:{id}"]}]}`
	}
	cases := []struct {
		name, schema string
		want         []string
	}{
		{"no crdtType", schemaWith(`{"name":"doc","type":"crdt","nullable":true}`),
			[]string{`table \"notes\": columns[1] \"doc\": a crdt column needs a crdtType`}},
		{"empty crdtType", schemaWith(`{"name":"doc","type":"crdt","crdtType":""}`),
			[]string{`table \"notes\": columns[1] \"doc\": a crdt column needs a crdtType`}},
		{"crdtType without a merger", schemaWith(`{"name":"doc","type":"crdt","crdtType":"automerge"}`),
			[]string{`table \"notes\": columns[1] \"doc\": unknown crdtType \"automerge\"`, `yjs-doc`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "schema.json")
			if err := os.WriteFile(file, []byte(c.schema), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, cmd := range []string{"serve", "prune"} {
				data := t.TempDir()
				args := []string{cmd, "--data", data, "--schema", file}
				if cmd == "serve" {
					args = append(args, "--listen", "127.0.0.1:0")
				}
				code, _, stderr := runCmdEnv(t, nil, args...)
				want := 1
				if cmd == "serve" {
					want = 2 // a configuration error
				}
				if code != want {
					t.Fatalf("%s: exit %d, want %d; stderr %s", cmd, code, want, stderr)
				}
				for _, w := range c.want {
					if !strings.Contains(stderr, w) && !strings.Contains(stderr, strings.ReplaceAll(w, `\"`, `"`)) {
						t.Fatalf("%s: stderr %s, want it to contain %s", cmd, stderr, w)
					}
				}
				if cmd == "serve" && !strings.Contains(stderr, "schema_compile") {
					t.Fatalf("serve: stderr %s, want the schema_compile phase", stderr)
				}
				if entries, err := os.ReadDir(data); err != nil || len(entries) != 0 {
					t.Fatalf("%s: the data directory holds %v (%v), want nothing", cmd, entries, err)
				}
			}
		})
	}
}

// With the default flags a 20 MB push (500 one-operation commits, as the
// official client cuts its outbox) is applied, over POST /sync and over a
// socket round, and /metrics shows the in-flight body budget; a budget
// that is not positive is refused at startup.
func TestServeLargePushWithDefaultFlags(t *testing.T) {
	base := startServe(t, "--data", t.TempDir())
	p := httpsynctest.LargePush{Commits: 500, OpsPerCommit: 1, TitleBytes: 40_000}
	c := &httpsync.Client{URL: base + "/sync", ClientID: "big", Header: http.Header{"X-Actor": {"ada"}}}
	ctx := context.Background()
	rs, err := c.Push(ctx, p.Build("http", "L")...)
	if err != nil || len(rs) != p.Commits || rs[len(rs)-1].Status != ssp2.CommitApplied {
		t.Fatalf("a %s push over POST /sync: %v", p, err)
	}
	sock, err := realtime.Dial(ctx, base+"/realtime", "big", realtime.DialOptions{Header: c.Header})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.CloseNow()
	c.Rounds = sock
	if rs, err := c.Push(ctx, p.Build("socket", "L")...); err != nil || len(rs) != p.Commits || rs[len(rs)-1].Status != ssp2.CommitApplied {
		t.Fatalf("a %s push over a socket round: %v", p, err)
	}
	if code, body := get(t, base+"/metrics"); code != 200 || !promtext.Has([]byte(body), "synclane_inflight_body_limit_bytes 536870912") ||
		!promtext.Has([]byte(body), "synclane_inflight_body_bytes 0") {
		t.Fatalf("/metrics = %d\n%s", code, body)
	}
	if code, _, stderr := runCmd(t, "serve", "--data", t.TempDir(), "--max-inflight-body-bytes", "0"); code != 2 || !strings.Contains(stderr, "--max-inflight-body-bytes") {
		t.Fatalf("--max-inflight-body-bytes 0: exit %d\n%s", code, stderr)
	}
}

// storeFlags returns flags for one shared database: a SQLite data dir, or
// a PostgreSQL schema.
func sharedStores(t *testing.T) map[string][]string {
	out := map[string][]string{"sqlite": {"--data", t.TempDir()}}
	if os.Getenv("SYNCLANE_TEST_POSTGRES") != "" || os.Getenv("SYNCLANE_REQUIRE_POSTGRES") == "1" {
		u := pgtest.URL(t)
		name := pgtest.NewSchema(t)
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		out["postgres"] = []string{"--postgres", u + sep + "search_path=" + name}
	}
	return out
}

func notReady(t *testing.T, err error) map[string]any {
	t.Helper()
	var e *syncerr.Error
	if err == nil || syncerr.CodeOf(err) != syncerr.SchemaNotReady {
		t.Fatalf("got %v, want 503 sync.schema_not_ready", err)
	}
	e = syncerr.As(err)
	if !strings.Contains(fmt.Sprint(e.Err), "503") {
		t.Fatalf("not an HTTP 503: %v", e.Err)
	}
	var d map[string]any
	if err := json.Unmarshal(e.Details, &d); err != nil {
		t.Fatalf("details %q: %v", e.Details, err)
	}
	return d
}

func TestServeTwoProcessesCheckpointGate(t *testing.T) {
	for name, store := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			if name == "sqlite" {
				// One server per SQLite data directory: the second
				// refuses (TestSecondServeOnOneDataDirectoryRefuses).
				wantRefused(t, store)
				return
			}
			a := startServe(t, append([]string{"--checkpoint", "default/todo_search"}, store...)...)
			b := startServe(t, store...)
			if pr, err := pushTodo(t, a, "ada", "t1"); err != nil || pr.Status != ssp2.CommitApplied {
				t.Fatalf("declaring process push: %+v %v", pr, err)
			}
			_, err := pushTodo(t, b, "bob", "t2")
			if d := notReady(t, err); d["partition"] != "default" || d["projection"] != "todo_search" {
				t.Fatalf("refusal details %v", d)
			}
			if code, _ := get(t, b+"/readyz"); code != 503 {
				t.Fatalf("/readyz of the gated process = %d, want 503", code)
			}
			if _, body := get(t, b+"/metrics"); !promtext.Has([]byte(body), `synclane_checkpoints{state="declared"} 1`) || !promtext.Has([]byte(body), `synclane_checkpoints{state="activated"} 0`) {
				t.Fatalf("/metrics lacks the pending checkpoint:\n%s", body)
			}
			code, out, _ := runCmd(t, append([]string{"checkpoint", "list"}, store...)...)
			if code != 0 || !strings.Contains(out, "todo_search") || !strings.Contains(out, "declared") {
				t.Fatalf("checkpoint list: %d\n%s", code, out)
			}
			// A source write above the stored watermark makes activation stale.
			code, out, errOut := runCmd(t, append([]string{"checkpoint", "activate", "--sources", "todos", "default/todo_search"}, store...)...)
			if code != 1 || !strings.Contains(out, "stale") {
				t.Fatalf("stale activation: exit %d\n%s\n%s", code, out, errOut)
			}
			code, out, _ = runCmd(t, append([]string{"checkpoint", "activate", "--sources", "todos", "--watermark", "1", "default/todo_search"}, store...)...)
			if code != 0 || !strings.Contains(out, "activated") {
				t.Fatalf("activation: exit %d\n%s", code, out)
			}
			if pr, err := pushTodo(t, b, "bob", "t2"); err != nil || pr.Status != ssp2.CommitApplied {
				t.Fatalf("after activation the other process serves: %+v %v", pr, err)
			}
			if _, body := get(t, a+"/metrics"); !promtext.Has([]byte(body), `synclane_checkpoints{state="activated"} 1`) ||
				!promtext.Has([]byte(body), `synclane_checkpoints{state="declared"} 0`) || !promtext.Has([]byte(body), "synclane_checkpoint_pending_oldest_update_age_seconds 0") {
				t.Fatalf("/metrics after activation:\n%s", body)
			}
			for _, base := range []string{a, b} {
				if rows, err := pullTodos(t, base, "carol"); err != nil || len(rows) != 2 {
					t.Fatalf("pull from %s: %d rows, %v", base, len(rows), err)
				}
			}
		})
	}
}

func TestServeSchemaBumpStopsOldProcess(t *testing.T) {
	v2 := filepath.Join(t.TempDir(), "v2.json")
	src := strings.Replace(schema.Demo, `"version": 1`, `"version": 2`, 1)
	src = strings.Replace(src, `{"name": "updated_at_ms", "type": "integer", "nullable": false}`,
		`{"name": "updated_at_ms", "type": "integer", "nullable": false},
        {"name": "note", "type": "string", "nullable": true}`, 1)
	if err := os.WriteFile(v2, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, store := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			if name == "sqlite" {
				// One server per SQLite data directory: the second
				// refuses (TestSecondServeOnOneDataDirectoryRefuses).
				wantRefused(t, store)
				return
			}
			old := startServe(t, store...)
			if pr, err := pushTodo(t, old, "ada", "t1"); err != nil || pr.Status != ssp2.CommitApplied {
				t.Fatalf("v1 push: %+v %v", pr, err)
			}
			startServe(t, append([]string{"--schema", v2}, store...)...) // migrates to v2
			_, err := pushTodo(t, old, "ada", "t2")
			if d := notReady(t, err); d["storedSchemaVersion"] != float64(2) || d["runningSchemaVersion"] != float64(1) {
				t.Fatalf("refusal details %v", d)
			}
			code, out, _ := runCmd(t, append([]string{"checkpoint", "list", "--schema", v2}, store...)...)
			if code != 0 {
				t.Fatalf("checkpoint list: %d %s", code, out)
			}
		})
	}
}

func TestCheckpointFlagsAndEnv(t *testing.T) {
	var c checkpointFlags
	if err := c.Set("p1/a, p2/b"); err != nil || len(c) != 2 || c[1].Partition != "p2" || c[1].Name != "b" {
		t.Fatalf("comma-separated: %v %+v", err, c)
	}
	if err := c.Set("nope"); err == nil {
		t.Fatal("a value without PARTITION/NAME was accepted")
	}
	var sc serveConfig
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	serveFlags(fs, &sc)
	if err := fs.Parse([]string{"--listen", "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SYNCLANE_LISTEN": "127.0.0.1:2", "SYNCLANE_JWT_SECRET": "s", "SYNCLANE_CHECKPOINT": "p/x,q/y", "SYNCLANE_PG_MAX_CONNS": "3"}
	if err := applyEnv(fs, envOf(env)); err != nil {
		t.Fatal(err)
	}
	if sc.listen != "127.0.0.1:1" || sc.jwtSecret != "s" || len(sc.checkpoints) != 2 || sc.pgMaxConns != 3 {
		t.Fatalf("flags must win over env, env fills the rest: %+v", sc)
	}
	env["SYNCLANE_PG_MAX_CONNS"] = "many"
	fs2 := flag.NewFlagSet("y", flag.ContinueOnError)
	serveFlags(fs2, &serveConfig{})
	if err := applyEnv(fs2, envOf(env)); err == nil || !strings.Contains(err.Error(), "SYNCLANE_PG_MAX_CONNS") {
		t.Fatalf("a bad env value must name its variable: %v", err)
	}
}

// wantRefused starts a second serve on store's SQLite data directory next
// to a first one and wants it refused.
func wantRefused(t *testing.T, store []string) {
	t.Helper()
	startServe(t, store...)
	code, _, stderr := runCmdEnv(t, nil, append([]string{"serve", "--listen", "127.0.0.1:0"}, store...)...)
	if code != 1 || !strings.Contains(stderr, "is in use by `synclane serve`") {
		t.Fatalf("a second serve on %v: exit %d, want 1 (in use)\n%s", store, code, stderr)
	}
}
