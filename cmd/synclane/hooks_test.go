package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/synclane/synclane/internal/promtext"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/httperr"
	"github.com/synclane/synclane/transport/httpsync"
)

// pushThingFrames pushes one commit writing thing id in project and
// returns its PUSH_RESULT and the PUSH_RESULT_DETAILS after it (or nil),
// as they came over HTTP.
func pushThingFrames(t *testing.T, c *httpsync.Client, id, project, ccid string) (*ssp2.PushResult, *ssp2.PushResultDetails) {
	t.Helper()
	payload, err := thingsCodec.AppendSparse(nil, ssp2.Row{id, project, nil, nil, nil, nil, nil, nil, nil}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return pushCommitFrames(t, c, &ssp2.PushCommit{ClientCommitID: ccid,
		Operations: []ssp2.Operation{{Table: "things", RowID: id, Op: ssp2.OpUpsert, Payload: payload}}})
}

// pushCommitFrames handshakes c, pushes commit and returns its PUSH_RESULT
// and the PUSH_RESULT_DETAILS after it (or nil), as they came over HTTP.
func pushCommitFrames(t *testing.T, c *httpsync.Client, commit *ssp2.PushCommit) (*ssp2.PushResult, *ssp2.PushResultDetails) {
	t.Helper()
	if err := c.Handshake(context.Background()); err != nil {
		t.Fatal(err)
	}
	msg, err := c.Do(context.Background(), commit)
	if err != nil {
		t.Fatalf("push %s: %v", commit.ClientCommitID, err)
	}
	var pr *ssp2.PushResult
	var d *ssp2.PushResultDetails
	for _, f := range msg.Frames {
		switch x := f.(type) {
		case *ssp2.PushResult:
			pr = x
		case *ssp2.PushResultDetails:
			d = x
		}
	}
	if pr == nil {
		t.Fatalf("push %s: no PUSH_RESULT in %v", commit.ClientCommitID, msg.Frames)
	}
	return pr, d
}

// The declarative validator rules of the control surface: a host code
// with details on the wire and in the cached replay, a throwing rule as
// sync.constraint_violation, a commit rule reading the candidate state,
// and malformed rule sets refused without effect.
func TestTestControlValidatorRules(t *testing.T) {
	base := startTestControl(t)
	control(t, "PUT", base+"/_test/allowed-scopes/ada", `{"project_id":["*"]}`, nil)
	if code := control(t, "PUT", base+"/_test/validators", `{"rules":[
		{"table":"things","column":"project_id","equals":"p-blocked","reject":{"code":"app.project_blocked","message":"this project is archived",
		 "details":{"fieldPaths":["project_id"],"reason":"archived"}}},
		{"table":"things","column":"id","equals":"boom","throw":true}]}`, nil); code != 200 {
		t.Fatalf("PUT validators: %d", code)
	}
	if code := control(t, "PUT", base+"/_test/commit-validator", `{"rules":[{"table":"things","scopes":{"project_id":["p-small"]},"maxRows":1,
		"reject":{"code":"app.project_full","message":"p-small holds one thing"}}]}`, nil); code != 200 {
		t.Fatalf("PUT commit-validator: %d", code)
	}
	c := newThingsClient(base, "ada", "c-ada")
	for round := range 2 { // the second round replays every commit from its idempotency record
		pr, d := pushThingFrames(t, c, "t1", "p-blocked", "k1")
		if pr.Status != ssp2.CommitRejected || pr.Results[0].Code != "app.project_blocked" || pr.Results[0].Message != "this project is archived" {
			t.Fatalf("round %d: blocked = %+v", round, pr.Results)
		}
		if d == nil || d.ClientCommitID != "k1" || d.Entries[0].DetailsJSON != `{"fieldPaths":["project_id"],"reason":"archived"}` {
			t.Fatalf("round %d: details = %+v", round, d)
		}
		if pr, d := pushThingFrames(t, c, "boom", "p1", "k2"); pr.Status != ssp2.CommitRejected || pr.Results[0].Code != "sync.constraint_violation" || d != nil {
			t.Fatalf("round %d: throwing rule = %+v %+v", round, pr.Results, d)
		}
		want := ssp2.CommitApplied
		if round == 1 {
			want = ssp2.CommitCached
		}
		if pr, _ := pushThingFrames(t, c, "s1", "p-small", "k3"); pr.Status != want {
			t.Fatalf("round %d: first of p-small = %+v", round, pr)
		}
		if pr, _ := pushThingFrames(t, c, "s2", "p-small", "k4"); pr.Status != ssp2.CommitRejected || pr.Results[0].Code != "app.project_full" {
			t.Fatalf("round %d: second of p-small = %+v", round, pr.Results)
		}
	}
	// Rules cleared: the blocked project is writable again under a new id.
	control(t, "PUT", base+"/_test/validators", `{"rules":[]}`, nil)
	if pr, _ := pushThingFrames(t, c, "t1", "p-blocked", "k5"); pr.Status != ssp2.CommitApplied {
		t.Fatalf("after clearing: %+v", pr)
	}
	for _, bad := range []struct{ path, body string }{
		{"/_test/validators", `{"rules":[{"table":"nope"}]}`},
		{"/_test/validators", `{"rules":[{"table":"things","column":"zzz","equals":1}]}`},
		{"/_test/validators", `{"rules":[{"table":"things","throw":true,"reject":{"code":"x"}}]}`},
		{"/_test/validators", `{"rules":[{"table":"things","react":{"payload":"no name"}}]}`},
		{"/_test/commit-validator", `{"rules":[{"table":"things","maxRows":1,"throw":true}]}`},
		{"/_test/commit-validator", `{"rules":[{"table":"things","scopes":{"project_id":["a"]},"maxRows":1000,"throw":true}]}`},
		{"/_test/commit-validator", `{"rules":[{"table":"things","scopes":{"project_id":["a"]},"maxRows":1}]}`},
		{"/_test/commit-validator", `{"rules":[{"table":"things","scopes":{"project":["a"]},"maxRows":1,"throw":true}]}`},
		{"/_test/commit-validator", `{"rules":[], "extra":1}`},
	} {
		var e httperr.Body
		if code := control(t, "PUT", base+bad.path, bad.body, &e); code != 400 || e.Code != "sync.invalid_request" {
			t.Fatalf("PUT %s %s: %d %+v, want 400 sync.invalid_request", bad.path, bad.body, code, e)
		}
	}
	// The commit rule is still in force after the refused PUTs.
	if pr, _ := pushThingFrames(t, c, "s3", "p-small", "k6"); pr.Status != ssp2.CommitRejected || pr.Results[0].Code != "app.project_full" {
		t.Fatalf("commit rule after refused PUTs: %+v", pr.Results)
	}
}

// readSink returns the test sink's deliveries.
func readSink(t *testing.T, path string) []sinkLine {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []sinkLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l sinkLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("sink line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// metric returns the value of an unlabelled metric on /metrics ("" when absent).
func metric(t *testing.T, base, name string) string {
	t.Helper()
	res, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	samples, err := promtext.Samples(b)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	if v, ok := samples[name]; ok {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return ""
}

// Reactions committed by a process that is killed (kill -9) before it
// could deliver them are delivered by the next process on the same data:
// at least once, none lost.
func TestKill9ReactionsDeliveredAfterRestart(t *testing.T) {
	dir := t.TempDir()
	sf := filepath.Join(dir, "schema.json")
	if err := os.WriteFile(sf, []byte(allTypesSchema), 0o600); err != nil {
		t.Fatal(err)
	}
	sink := filepath.Join(dir, "sink.jsonl")
	args := []string{"--data", dir, "--schema", sf, "--test-control", "--test-reaction-log", sink, "--reaction-lease", "2s"}
	a := startProc(t, append(args, "--test-reaction-fail")...)
	control(t, "PUT", a.base+"/_test/allowed-scopes/ada", `{"project_id":["*"]}`, nil)
	if code := control(t, "PUT", a.base+"/_test/validators", `{"rules":[{"table":"things","op":"upsert","react":{"name":"test.sink","payload":"mail","maxAttempts":50}}]}`, nil); code != 200 {
		t.Fatalf("PUT validators: %d", code)
	}
	c := newThingsClient(a.base, "ada", "c-ada")
	const n = 4
	for i := range n {
		if pr, _ := pushThingFrames(t, c, fmt.Sprint("t", i), "p1", fmt.Sprint("k", i)); pr.Status != ssp2.CommitApplied {
			t.Fatalf("push %d: %+v", i, pr)
		}
	}
	// Committed, each attempted (and failed) at least once, not delivered.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var retried int
		fmt.Sscan(metric(t, a.base, "synclane_reactions_retried_total"), &retried)
		if retried >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no delivery attempt before the kill")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := metric(t, a.base, "synclane_reactions_pending"); got != fmt.Sprint(n) {
		t.Fatalf("pending before the kill = %q, want %d", got, n)
	}
	a.kill(t)
	if got := readSink(t, sink); len(got) != 0 {
		t.Fatalf("delivered before the kill: %+v", got)
	}

	b := startProc(t, args...)
	deadline = time.Now().Add(30 * time.Second)
	for {
		seen := map[int64]sinkLine{}
		for _, l := range readSink(t, sink) {
			seen[l.ID] = l
		}
		if len(seen) == n {
			seqs := []int64{}
			for _, l := range seen {
				if l.Payload != "mail" || l.Partition == "" || l.Attempt < 2 {
					t.Fatalf("delivery %+v: want payload mail, after at least one failed attempt", l)
				}
				seqs = append(seqs, l.CommitSeq)
			}
			sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
			if fmt.Sprint(seqs) != "[1 2 3 4]" {
				t.Fatalf("delivered commit seqs %v, want one per commit", seqs)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after restart only %d of %d reactions delivered", len(seen), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for metric(t, b.base, "synclane_reactions_pending") != "0" {
		if time.Now().After(deadline) {
			t.Fatal("the queue did not drain after delivery")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Two processes on one PostgreSQL database share the reaction queue: every
// reaction is delivered, both processes deliver some (only the first is
// pushed to and woken by its commits; the second finds work by polling),
// and no reaction's deliveries ever overlap in time (each takes 100ms in
// the sink).
func TestTwoProcessesShareReactions(t *testing.T) {
	stores := sharedStores(t)
	pg, ok := stores["postgres"]
	if !ok {
		t.Skip("PostgreSQL not configured: set SYNCLANE_TEST_POSTGRES to a pgx URL of a database the tests may create schemas in (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable); SYNCLANE_REQUIRE_POSTGRES=1 makes this a failure")
	}
	dir := t.TempDir()
	sf := filepath.Join(dir, "schema.json")
	if err := os.WriteFile(sf, []byte(allTypesSchema), 0o600); err != nil {
		t.Fatal(err)
	}
	sink := filepath.Join(dir, "sink.jsonl")
	args := append([]string{"--schema", sf, "--test-control", "--test-reaction-log", sink, "--test-reaction-hold", "100ms", "--reaction-lease", "10s"}, pg...)
	a := startProc(t, args...)
	startProc(t, args...) // the second process: it only delivers
	control(t, "PUT", a.base+"/_test/allowed-scopes/ada", `{"project_id":["*"]}`, nil)
	if code := control(t, "PUT", a.base+"/_test/validators", `{"rules":[{"table":"things","react":{"name":"test.sink","payload":"p"}}]}`, nil); code != 200 {
		t.Fatalf("PUT validators: %d", code)
	}
	c := newThingsClient(a.base, "ada", "c-ada")
	const n = 80
	for i := range n {
		if pr, _ := pushThingFrames(t, c, fmt.Sprint("t", i), "p1", fmt.Sprint("k", i)); pr.Status != ssp2.CommitApplied {
			t.Fatalf("push %d: %+v", i, pr)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		lines := readSink(t, sink)
		byID := map[int64][]sinkLine{}
		for _, l := range lines {
			byID[l.ID] = append(byID[l.ID], l)
		}
		if len(byID) == n {
			pids := map[int]bool{}
			for id, ds := range byID {
				sort.Slice(ds, func(i, j int) bool { return ds[i].StartUs < ds[j].StartUs })
				for i := 1; i < len(ds); i++ {
					if ds[i].StartUs < ds[i-1].EndUs {
						t.Fatalf("reaction %d: deliveries overlap: %+v", id, ds)
					}
				}
				for _, d := range ds {
					pids[d.Pid] = true
				}
			}
			if len(pids) != 2 {
				t.Fatalf("deliveries by %d processes, want both", len(pids))
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d reactions delivered", len(byID), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
