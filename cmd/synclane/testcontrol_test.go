package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/transport/httperr"
	"github.com/synclane/synclane/transport/httpsync"
)

// allTypesSchema has one column of every type (and the IR-only fields).
const allTypesSchema = `{"version":1,"tables":[{"name":"things","columns":[
 {"name":"id","type":"string"},
 {"name":"project_id","type":"string","declaredType":"ProjectId"},
 {"name":"n","type":"integer","nullable":true},
 {"name":"f","type":"float","nullable":true},
 {"name":"b","type":"boolean","nullable":true},
 {"name":"j","type":"json","nullable":true},
 {"name":"raw","type":"bytes","nullable":true,"encrypted":true},
 {"name":"blob","type":"blob_ref","nullable":true},
 {"name":"doc","type":"crdt","nullable":true,"crdtType":"yjs-doc"}],
 "primaryKey":"id","scopes":["project:{project_id}"]}]}`

// startTestControl runs `synclane serve --test-control` on port 0 with the
// all-types schema, reads the real address from the first stdout line and
// returns the base URL. The server stops (exit 0 expected) at cleanup.
func startTestControl(t *testing.T, flags ...string) string {
	t.Helper()
	dir := t.TempDir()
	sf := filepath.Join(dir, "schema.json")
	if err := os.WriteFile(sf, []byte(allTypesSchema), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr lockedBuffer
	done := make(chan int, 1)
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--data", dir, "--schema", sf, "--log-level", "warn", "--drain-delay", "0", "--test-control"}, flags...)
	go func() { done <- run(ctx, args, noEnv, &stdout, &stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("serve exited %d\n%s", code, stderr.String())
			}
		case <-time.After(15 * time.Second):
			t.Error("serve did not stop")
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if line, _, ok := strings.Cut(stdout.String(), "\n"); ok {
			var first struct {
				Listening string `json:"listening"`
			}
			if err := json.Unmarshal([]byte(line), &first); err != nil || !strings.HasPrefix(first.Listening, "http://127.0.0.1:") || strings.HasSuffix(first.Listening, ":0") {
				t.Fatalf("first stdout line %q is not {\"listening\":\"http://127.0.0.1:PORT\"} (%v)", line, err)
			}
			return first.Listening
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited %d before listening\n%s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve printed nothing on stdout\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// control sends a control request and decodes the JSON answer into out
// (when non-nil); it returns the status.
func control(t *testing.T, method, url, body string, out any) int {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, rd)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: answer %q is not JSON: %v", method, url, b, err)
		}
	}
	return res.StatusCode
}

func TestTestControlRefusedOutsideTestMode(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"jwt auth", []string{"--test-control", "--jwt-secret", strings.Repeat("s", 32)}, "--jwt-secret"},
		{"all interfaces", []string{"--test-control", "--listen", "0.0.0.0:0"}, "loopback"},
		{"no host", []string{"--test-control", "--listen", ":0"}, "loopback"},
		{"clock without test mode", []string{"--clock-ms", "5"}, "--clock-ms needs --test-control"},
		{"negative ttl", []string{"--segment-ttl", "-1s"}, "must not be negative"},
		{"pool of one connection", []string{"--pg-max-conns", "1"}, "--pg-max-conns must be between 2"},
		{"negative pool", []string{"--pg-max-conns", "-5"}, "--pg-max-conns must be between 2"},
		{"pool above int32", []string{"--pg-max-conns", "4294967297"}, "--pg-max-conns must be between 2"},
		{"negative idle timeout", []string{"--idle-timeout", "-1s"}, "--idle-timeout must be positive"},
		{"signed URL ttl above 15m", []string{"--signed-url-ttl", "16m"}, "--signed-url-ttl must be at most 15m"},
		{"short signed URL key", []string{"--signed-url-ttl", "1m", "--signed-url-key", "short"}, "--signed-url-key must be at least 32 bytes"},
		{"lease ttl above 720h", []string{"--lease-ttl", "721h"}, "--lease-ttl must be at most 720h"},
		{"short lease key", []string{"--lease-ttl", "1m", "--lease-key", "short"}, "--lease-key must be at least 32 bytes"},
		{"leases on postgres without a key", []string{"--lease-ttl", "1m", "--postgres", "postgres://127.0.0.1:1/none"}, "needs --lease-key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args := append([]string{"serve", "--listen", "127.0.0.1:0", "--data", dir}, tc.args...)
			code, _, stderr := runCmd(t, args...)
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want a non-zero exit naming %q", code, stderr, tc.want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Fatalf("a refused start touched storage: %v", entries)
			}
		})
	}
	// A normal server has no control surface.
	base := startServe(t, "--data", t.TempDir())
	if code, _ := get(t, base+"/_test/clock"); code != http.StatusNotFound {
		t.Fatalf("GET /_test/clock without --test-control: %d, want 404", code)
	}
}

func TestTestControlClockAndSeqs(t *testing.T) {
	base := startTestControl(t, "--clock-ms", "1700000000000")
	var clk struct {
		NowMs int64 `json:"nowMs"`
	}
	if code := control(t, "GET", base+"/_test/clock", "", &clk); code != 200 || clk.NowMs != 1700000000000 {
		t.Fatalf("clock: %d %+v", code, clk)
	}
	if code := control(t, "POST", base+"/_test/clock/advance", `{"ms":2500}`, &clk); code != 200 || clk.NowMs != 1700000002500 {
		t.Fatalf("advance: %d %+v", code, clk)
	}
	for _, bad := range []string{`{"ms":-1}`, `{}`, `{"ms":"x"}`, `{"ms":1,"extra":2}`, `[`} {
		if code := control(t, "POST", base+"/_test/clock/advance", bad, nil); code != http.StatusBadRequest {
			t.Fatalf("advance %s: %d, want 400", bad, code)
		}
	}

	// The virtual clock stamps commits: createdAtMs of a pulled commit is
	// the clock's time when it was pushed.
	control(t, "PUT", base+"/_test/allowed-scopes/ada", `{"project_id":["p1"]}`, nil)
	c := newThingsClient(base, "ada", "c-ada")
	pr := pushThing(t, c, "t1", "p1", "c1")
	if pr.Status != ssp2.CommitApplied {
		t.Fatalf("push: %+v", pr)
	}
	msg, err := c.Pull(context.Background(), ssp2.PullHeader{LimitCommits: 100, LimitSnapshotRows: 100, MaxSnapshotPages: 1, Accept: ssp2.AcceptInlineRows},
		&ssp2.Subscription{ID: "s", Table: "things", Scopes: map[string][]string{"project_id": {"p1"}}, Cursor: 0})
	if err != nil {
		t.Fatal(err)
	}
	var created int64 = -1
	for _, f := range msg.Frames {
		if cm, ok := f.(*ssp2.Commit); ok {
			created = cm.CreatedAtMs
		}
	}
	if created != 1700000002500 {
		t.Fatalf("commit createdAtMs %d, want the virtual clock's 1700000002500", created)
	}

	var seq struct {
		MaxCommitSeq int64 `json:"maxCommitSeq"`
	}
	if code := control(t, "GET", base+"/_test/max-commit-seq", "", &seq); code != 200 || seq.MaxCommitSeq != 1 {
		t.Fatalf("max-commit-seq: %d %+v", code, seq)
	}
	req, _ := http.NewRequest("GET", base+"/_test/max-commit-seq", nil)
	req.Header.Set("x-partition", "elsewhere")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(res.Body).Decode(&seq)
	res.Body.Close()
	if seq.MaxCommitSeq != 0 {
		t.Fatalf("another partition's max seq %d, want 0", seq.MaxCommitSeq)
	}
	var hz struct {
		HorizonSeq *int64 `json:"horizonSeq"`
	}
	if code := control(t, "GET", base+"/_test/horizon-seq", "", &hz); code != 200 || hz.HorizonSeq == nil || *hz.HorizonSeq != 0 {
		t.Fatalf("horizon-seq: %d %+v", code, hz)
	}
}

func TestTestControlWallClockRefusesAdvance(t *testing.T) {
	base := startTestControl(t)
	var clk struct {
		NowMs int64 `json:"nowMs"`
	}
	before := time.Now().UnixMilli()
	if code := control(t, "GET", base+"/_test/clock", "", &clk); code != 200 || clk.NowMs < before {
		t.Fatalf("wall clock: %d %+v (before %d)", code, clk, before)
	}
	if code := control(t, "POST", base+"/_test/clock/advance", `{"ms":1}`, nil); code != http.StatusConflict {
		t.Fatalf("advancing wall time: %d, want 409", code)
	}
}

func TestTestControlScopesAndResolver(t *testing.T) {
	base := startTestControl(t)
	c := newThingsClient(base, "bob", "c-bob")
	sub := &ssp2.Subscription{ID: "s", Table: "things", Scopes: map[string][]string{"project_id": {"p1"}}, Cursor: -1}
	status := func() ssp2.SubStatus {
		t.Helper()
		msg, err := c.Pull(context.Background(), ssp2.PullHeader{LimitCommits: 10, LimitSnapshotRows: 10, MaxSnapshotPages: 1, Accept: ssp2.AcceptInlineRows}, sub)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range msg.Frames {
			if s, ok := f.(*ssp2.SubStart); ok {
				return s.Status
			}
		}
		t.Fatal("no SUB_START")
		return 0
	}
	// An actor never set holds nothing: revoked, and writes are forbidden.
	if s := status(); s != ssp2.SubRevoked {
		t.Fatalf("unset actor: status %v, want revoked", s)
	}
	if pr := pushThing(t, c, "x1", "p1", "k1"); pr.Status != ssp2.CommitRejected || pr.Results[0].Code != string(syncerr.Forbidden) {
		t.Fatalf("unset actor's write: %+v", pr)
	}
	if code := control(t, "PUT", base+"/_test/allowed-scopes/bob", `{"project_id":["*"]}`, nil); code != 200 {
		t.Fatalf("set scopes: %d", code)
	}
	if s := status(); s != ssp2.SubActive {
		t.Fatalf("wildcard: status %v, want active", s)
	}
	control(t, "PUT", base+"/_test/allowed-scopes/bob", `{"project_id":["p2"]}`, nil)
	if s := status(); s != ssp2.SubRevoked {
		t.Fatalf("other value only: status %v, want revoked", s)
	}
	control(t, "PUT", base+"/_test/allowed-scopes/bob", `{"project_id":["p1","p2"]}`, nil)
	if s := status(); s != ssp2.SubActive {
		t.Fatalf("listed value: status %v, want active", s)
	}
	// A failing resolver revokes everything; recovering restores it.
	if code := control(t, "POST", base+"/_test/resolver", `{"failing":true}`, nil); code != 200 {
		t.Fatalf("resolver failing: %d", code)
	}
	if s := status(); s != ssp2.SubRevoked {
		t.Fatalf("failing resolver: status %v, want revoked", s)
	}
	control(t, "POST", base+"/_test/resolver", `{"failing":false}`, nil)
	if s := status(); s != ssp2.SubActive {
		t.Fatalf("recovered resolver: status %v, want active", s)
	}
	control(t, "PUT", base+"/_test/allowed-scopes/bob", `{}`, nil)
	if s := status(); s != ssp2.SubRevoked {
		t.Fatalf("emptied scopes: status %v, want revoked", s)
	}
	// Bad input: an undeclared variable, a non-object body, an empty value.
	for _, bad := range []string{`{"nope":["x"]}`, `["x"]`, `{"project_id":[""]}`, `null`} {
		var e httperr.Body
		if code := control(t, "PUT", base+"/_test/allowed-scopes/bob", bad, &e); code != http.StatusBadRequest || e.Code != string(syncerr.InvalidRequest) {
			t.Fatalf("scopes %s: %d %+v", bad, code, e)
		}
	}
	// Without --lease-ttl an outage round has no lease to fall back on.
	if code := control(t, "POST", base+"/_test/resolver", `{"outage":true}`, nil); code != http.StatusOK {
		t.Fatalf("outage: %d", code)
	}
	if _, err := c.Pull(context.Background(), ssp2.PullHeader{Accept: ssp2.AcceptInlineRows}, sub); syncerr.CodeOf(err) != syncerr.AuthLeaseRequired {
		t.Fatalf("outage without leases: %v, want sync.auth_lease_required", err)
	}
	control(t, "POST", base+"/_test/resolver", `{"outage":false}`, nil)
}

// yjsText is a Yjs update v1 inserting "hi" into the root text "t" (client
// 1): the served yjs-doc merger stores it as written.
var yjsText = []byte{1, 1, 1, 0, 4, 1, 1, 't', 2, 'h', 'i', 0}

// TestTestControlRowsEveryType: GET /_test/rows renders a value of every
// column type, and after a sparse patch the merged row at its new version,
// without column versions.
func TestTestControlRowsEveryType(t *testing.T) {
	base := startTestControl(t)
	control(t, "PUT", base+"/_test/allowed-scopes/ada", `{"project_id":["*"]}`, nil)
	c := newThingsClient(base, "ada", "c-ada")
	blobID := blobstore.IDOf([]byte("abc"))
	if err := c.UploadBlob(context.Background(), blobID, "text/plain", strings.NewReader("abc"), 3); err != nil {
		t.Fatalf("upload the referenced blob: %v", err)
	}
	blobRef := `{"blobId":"` + blobID + `","byteLength":3}`
	full := ssp2.Row{"a1", "p1", int64(-42), 1.5, true, json.RawMessage(`{"k":[1,2]}`), []byte{0xde, 0xad}, blobRef, yjsText}
	nulls := ssp2.Row{"a0", "p2", nil, nil, nil, nil, nil, nil, nil}
	for _, r := range []ssp2.Row{full, nulls} {
		if pr := pushRow(t, c, r, "cc-"+r[0].(string)); pr.Status != ssp2.CommitApplied {
			t.Fatalf("push %v: %+v", r[0], pr)
		}
	}
	var rows []map[string]any
	if code := control(t, "GET", base+"/_test/rows/things", "", &rows); code != 200 || len(rows) != 2 {
		t.Fatalf("rows: %d %v", code, rows)
	}
	want := []string{
		`{"rowId":"a0","scopes":{"project_id":"p2"},"values":{"b":null,"blob":null,"doc":null,"f":null,"id":"a0","j":null,"n":null,"project_id":"p2","raw":null},"version":1}`,
		`{"rowId":"a1","scopes":{"project_id":"p1"},"values":{"b":true,"blob":` + mustJSON(blobRef) + `,"doc":{"$bytes":"` + hex.EncodeToString(yjsText) + `"},"f":1.5,"id":"a1","j":"{\"k\":[1,2]}","n":-42,"project_id":"p1","raw":{"$bytes":"dead"}},"version":1}`,
	}
	for i, r := range rows {
		got, _ := json.Marshal(r)
		if string(got) != want[i] {
			t.Fatalf("row %d:\n got %s\nwant %s", i, got, want[i])
		}
	}
	// A sparse patch of n: the dump shows the merged row at version 2 and
	// still only rowId, version, values and scopes; column versions are
	// the server's own (SPEC §2.2) and never shown.
	present := ssp2.NewColumnSet(len(full))
	present.Add(0)
	present.Add(2)
	payload, err := thingsCodec.AppendSparse(nil, ssp2.Row{"a1", nil, int64(7), nil, nil, nil, nil, nil, nil}, present, 0)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := c.Push(context.Background(), &ssp2.PushCommit{ClientCommitID: "cc-a1-n",
		Operations: []ssp2.Operation{{Table: "things", RowID: "a1", Op: ssp2.OpUpsert, Payload: payload}}})
	if err != nil || rs[0].Status != ssp2.CommitApplied {
		t.Fatalf("patch of a1.n: %+v %v", rs, err)
	}
	if code := control(t, "GET", base+"/_test/rows/things", "", &rows); code != 200 || len(rows) != 2 {
		t.Fatalf("rows after the patch: %d %v", code, rows)
	}
	want[1] = strings.Replace(strings.Replace(want[1], `"n":-42`, `"n":7`, 1), `"version":1`, `"version":2`, 1)
	for i, r := range rows {
		if got, _ := json.Marshal(r); string(got) != want[i] {
			t.Fatalf("row %d after the patch:\n got %s\nwant %s", i, got, want[i])
		}
	}
	var e httperr.Body
	if code := control(t, "GET", base+"/_test/rows/nope", "", &e); code != http.StatusBadRequest || e.Code != string(syncerr.UnknownTable) {
		t.Fatalf("unknown table: %d %+v", code, e)
	}
}

// On every backend serve runs (SQLite, PostgreSQL), through the
// production store and its transactions.
func TestTestControlFailNextIdempotencyLookup(t *testing.T) {
	for name, flags := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			base := startTestControl(t, flags...)
			control(t, "PUT", base+"/_test/allowed-scopes/ada", `{"project_id":["p1"]}`, nil)
			c := newThingsClient(base, "ada", "c-ada")
			if pr := pushThing(t, c, "i1", "p1", "commit-1"); pr.Status != ssp2.CommitApplied {
				t.Fatalf("first push: %+v", pr)
			}
			if code := control(t, "POST", base+"/_test/fail-next-idempotency-lookup", "", nil); code != 200 {
				t.Fatalf("arm: %d", code)
			}
			pr := pushThing(t, c, "i1", "p1", "commit-1")
			if pr.Status != ssp2.CommitRejected || pr.CommitSeq != nil || len(pr.Results) != 1 || pr.Results[0].Code != string(syncerr.IdempotencyCacheMiss) || !pr.Results[0].Retryable || pr.Results[0].OpIndex != 0 {
				t.Fatalf("armed replay: %+v", pr)
			}
			// One read only, and the miss was not persisted: the retry replays the
			// original outcome.
			pr = pushThing(t, c, "i1", "p1", "commit-1")
			if pr.Status != ssp2.CommitCached || pr.CommitSeq == nil || *pr.CommitSeq != 1 {
				t.Fatalf("retry after the miss: %+v", pr)
			}
			// A fresh commit under the fault is not applied; its retry is.
			control(t, "POST", base+"/_test/fail-next-idempotency-lookup", "", nil)
			if pr := pushThing(t, c, "i2", "p1", "commit-2"); pr.Status != ssp2.CommitRejected || pr.Results[0].Code != string(syncerr.IdempotencyCacheMiss) {
				t.Fatalf("armed fresh commit: %+v", pr)
			}
			if pr := pushThing(t, c, "i2", "p1", "commit-2"); pr.Status != ssp2.CommitApplied || *pr.CommitSeq != 2 {
				t.Fatalf("retry of the fresh commit: %+v", pr)
			}
		})
	}
}

func TestTestControlUnsupportedAndUnknown(t *testing.T) {
	base := startTestControl(t)
	var e httperr.Body
	if code := control(t, "POST", base+"/_test/leases/l1/revoke", "", &e); code != http.StatusConflict || e.Code != string(syncerr.InvalidRequest) {
		t.Fatalf("revoke without --lease-ttl: %d %+v, want 409", code, e)
	}
	if code := control(t, "GET", base+"/_test/nothing-here", "", &e); code != http.StatusNotFound || e.Code != string(syncerr.NotFound) {
		t.Fatalf("unknown endpoint: %d %+v", code, e)
	}
}

func newThingsClient(base, actor, clientID string) *httpsync.Client {
	return &httpsync.Client{URL: base + "/sync", ClientID: clientID, Header: http.Header{"X-Actor": {actor}}}
}

var thingsCodec = func() *ssp2.RowCodec {
	s, err := schema.Parse([]byte(allTypesSchema))
	if err != nil {
		panic(err)
	}
	return ssp2.NewRowCodec(s.Table("things").Columns)
}()

func pushThing(t *testing.T, c *httpsync.Client, id, project, ccid string) *ssp2.PushResult {
	t.Helper()
	return pushRow(t, c, ssp2.Row{id, project, nil, nil, nil, nil, nil, nil, nil}, ccid)
}

func pushRow(t *testing.T, c *httpsync.Client, row ssp2.Row, ccid string) *ssp2.PushResult {
	t.Helper()
	payload, err := thingsCodec.AppendSparse(nil, row, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := c.Push(context.Background(), &ssp2.PushCommit{ClientCommitID: ccid,
		Operations: []ssp2.Operation{{Table: "things", RowID: row[0].(string), Op: ssp2.OpUpsert, Payload: payload}}})
	var se *syncerr.Error
	if errors.As(err, &se) {
		t.Fatalf("push answered %s: %s", se.Code, se.Message)
	}
	if err != nil {
		t.Fatal(err)
	}
	return rs[0]
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// --debug-listen serves pprof on loopback only.
func TestDebugListen(t *testing.T) {
	code, _, stderr := runCmd(t, "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--debug-listen", "0.0.0.0:6060")
	if code != 2 || !strings.Contains(stderr, "--debug-listen must be a loopback address") {
		t.Fatalf("non-loopback debug listener: exit %d, %s", code, stderr)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	startServe(t, "--data", t.TempDir(), "--debug-listen", addr)
	status, body := get(t, "http://"+addr+"/debug/pprof/")
	if status != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Fatalf("pprof index: %d %.200s", status, body)
	}
}

// TestTestControlBlobPresign: /_test/blob-presign issues presigned PUT and
// GET URLs that work without credentials until they expire.
func TestTestControlBlobPresign(t *testing.T) {
	base := startTestControl(t)
	data := []byte("presigned bytes")
	id := blobstore.IDOf(data)
	presign := func(body string) (int, map[string]any) {
		var out map[string]any
		code := control(t, "POST", base+"/_test/blob-presign", body, &out)
		return code, out
	}
	code, put := presign(`{"blobId":"` + id + `","method":"PUT","byteLength":15,"ttlSeconds":60}`)
	if code != 200 || !strings.HasPrefix(put["url"].(string), base+"/blobs/"+id+"?st=") {
		t.Fatalf("presign PUT: %d %v", code, put)
	}
	req, _ := http.NewRequest(http.MethodPut, put["url"].(string), strings.NewReader(string(data)))
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 200 {
		t.Fatalf("presigned PUT: %v %v", res, err)
	}
	_, get := presign(`{"blobId":"` + id + `","method":"GET","ttlSeconds":60}`)
	res, err := http.Get(get["url"].(string))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(b) != string(data) {
		t.Fatalf("presigned GET: %d %q", res.StatusCode, b)
	}
	_, expired := presign(`{"blobId":"` + id + `","method":"GET","ttlSeconds":0}`)
	var e httperr.Body
	if code := control(t, "GET", expired["url"].(string), "", &e); code != 403 || e.Code != "blob.forbidden" {
		t.Errorf("expired presigned GET: %d %+v", code, e)
	}
	for _, bad := range []string{`{}`, `{"blobId":"` + id + `","method":"POST","ttlSeconds":1}`, `{"blobId":"` + id + `","method":"GET","ttlSeconds":901}`} {
		if code, _ := presign(bad); code != 400 {
			t.Errorf("presign %s: %d, want 400", bad, code)
		}
	}
}
