package main

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/httperr"
	"github.com/synclane/synclane/transport/httpsync"
)

// The validator contract of the test-control surface (issue 10's
// endpoint table) as an external harness drives it: PUT /_test/validators
// with its array of kinds, PUT /_test/commit-validator with
// requireSiblingWhen or null; every verdict is read from POST /sync.

const tasksSchema = `{"version":1,"tables":[{"name":"tasks","columns":[
 {"name":"id","type":"string"},
 {"name":"project_id","type":"string"},
 {"name":"title","type":"string","nullable":true},
 {"name":"done","type":"boolean"}],
 "primaryKey":"id","scopes":["project:{project_id}"]}]}`

var tasksCodec = func() *ssp2.RowCodec {
	s, err := schema.Parse([]byte(tasksSchema))
	if err != nil {
		panic(err)
	}
	return ssp2.NewRowCodec(s.Table("tasks").Columns)
}()

// startTasksControl is startTestControl serving tasksSchema, with ada
// allowed project p1.
func startTasksControl(t *testing.T) (base string, c *httpsync.Client) {
	t.Helper()
	sf := filepath.Join(t.TempDir(), "tasks.json")
	if err := os.WriteFile(sf, []byte(tasksSchema), 0o600); err != nil {
		t.Fatal(err)
	}
	base = startTestControl(t, "--schema", sf)
	if code := control(t, "PUT", base+"/_test/allowed-scopes/ada", `{"project_id":["p1"]}`, nil); code != http.StatusOK {
		t.Fatalf("grant: %d", code)
	}
	return base, newThingsClient(base, "ada", "c-ada")
}

func task(id, title string, done bool) ssp2.Row { return ssp2.Row{id, "p1", title, done} }

// pushTasks pushes one commit upserting rows and returns its PUSH_RESULT
// and PUSH_RESULT_DETAILS (or nil) as they came over POST /sync.
func pushTasks(t *testing.T, c *httpsync.Client, ccid string, rows ...ssp2.Row) (*ssp2.PushResult, *ssp2.PushResultDetails) {
	t.Helper()
	commit := &ssp2.PushCommit{ClientCommitID: ccid}
	for _, r := range rows {
		payload, err := tasksCodec.AppendSparse(nil, r, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		commit.Operations = append(commit.Operations, ssp2.Operation{Table: "tasks", RowID: r[0].(string), Op: ssp2.OpUpsert, Payload: payload})
	}
	return pushCommitFrames(t, c, commit)
}

// taskRows returns the stored tasks as id → title (done appended as "+").
func taskRows(t *testing.T, base string) map[string]string {
	t.Helper()
	var rows []struct {
		RowID  string         `json:"rowId"`
		Values map[string]any `json:"values"`
	}
	if code := control(t, "GET", base+"/_test/rows/tasks", "", &rows); code != http.StatusOK {
		t.Fatalf("rows: %d", code)
	}
	out := map[string]string{}
	for _, r := range rows {
		title, _ := r.Values["title"].(string)
		if r.Values["done"] == true {
			title += "+"
		}
		out[r.RowID] = title
	}
	return out
}

// putRules PUTs body to path and requires 200 with the answer {}.
func putRules(t *testing.T, base, path, body string) {
	t.Helper()
	var ans map[string]any
	if code := control(t, "PUT", base+path, body, &ans); code != http.StatusOK || len(ans) != 0 {
		t.Fatalf("PUT %s %s: %d %v, want 200 {}", path, body, code, ans)
	}
}

func wantApplied(t *testing.T, what string, pr *ssp2.PushResult) {
	t.Helper()
	if pr.Status != ssp2.CommitApplied {
		t.Fatalf("%s: %+v, want applied", what, pr.Results)
	}
}

func wantRejected(t *testing.T, what string, pr *ssp2.PushResult, code string) {
	t.Helper()
	if pr.Status != ssp2.CommitRejected || len(pr.Results) != 1 || pr.Results[0].Code != code || pr.Results[0].Retryable {
		t.Fatalf("%s: %+v, want rejected with %s", what, pr.Results, code)
	}
}

func TestTestControlRowRuleKinds(t *testing.T) {
	base, c := startTasksControl(t)
	putRules(t, base, "/_test/validators", `[
		{"table":"tasks","rule":{"kind":"maxLength","column":"title","max":5,"code":"app.title_too_long"}},
		{"table":"tasks","rule":{"kind":"immutableWhen","column":"title","guardColumn":"done","guardValue":true,"code":"app.done_is_frozen"}},
		{"table":"tasks","rule":{"kind":"match","column":"title","equals":"nope","reject":{"code":"app.nope","message":"no nope"}}}]`)

	// maxLength counts characters, not bytes: "héllo" is 5 characters in
	// 6 bytes, "日本語です" 5 in 15.
	wantApplied(t, "5 characters", first(pushTasks(t, c, "k1", task("a", "héllo", false))))
	wantApplied(t, "5 wide characters", first(pushTasks(t, c, "k2", task("b", "日本語です", false))))
	wantRejected(t, "6 characters", first(pushTasks(t, c, "k3", task("c", "hello!", false))), "app.title_too_long")
	wantRejected(t, "an update to 6 characters", first(pushTasks(t, c, "k4", task("a", "héllo!", false))), "app.title_too_long")

	// immutableWhen reads the guard from the stored row, never from the
	// candidate, and never rejects an insert.
	wantApplied(t, "an insert with the guard set", first(pushTasks(t, c, "k5", task("d", "new", true))))
	wantApplied(t, "a title change that also sets the guard (stored guard unset)", first(pushTasks(t, c, "k6", task("a", "two", true))))
	wantRejected(t, "a title change under a stored guard", first(pushTasks(t, c, "k7", task("a", "three", true))), "app.done_is_frozen")
	wantRejected(t, "a title change that clears the guard (stored guard set)", first(pushTasks(t, c, "k8", task("a", "three", false))), "app.done_is_frozen")
	wantApplied(t, "clearing the guard, title unchanged", first(pushTasks(t, c, "k9", task("a", "two", false))))
	wantApplied(t, "a title change under a stored guard that differs", first(pushTasks(t, c, "k10", task("a", "four", false))))

	// The further kind (match), in the same array.
	pr, _ := pushTasks(t, c, "k11", task("e", "nope", false))
	wantRejected(t, "match", pr, "app.nope")
	if pr.Results[0].Message != "no nope" {
		t.Fatalf("match message %q", pr.Results[0].Message)
	}
	if got, want := taskRows(t, base), map[string]string{"a": "four", "b": "日本語です", "d": "new+"}; !mapsEqual(got, want) {
		t.Fatalf("rows %v, want %v", got, want)
	}

	// Refused bodies change nothing.
	for _, bad := range []string{
		`null`, `{}`, `{"table":"tasks"}`,
		`[{"table":"tasks","rule":{"kind":"minLength","column":"title","max":1,"code":"app.x"}}]`,
		`[{"table":"tasks","rule":{"column":"title","max":1,"code":"app.x"}}]`,
		`[{"table":"nope","rule":{"kind":"maxLength","column":"title","max":1,"code":"app.x"}}]`,
		`[{"table":"tasks","rule":{"kind":"maxLength","column":"nope","max":1,"code":"app.x"}}]`,
		`[{"table":"tasks","rule":{"kind":"maxLength","column":"done","max":1,"code":"app.x"}}]`,
		`[{"table":"tasks","rule":{"kind":"maxLength","column":"title","code":"app.x"}}]`,
		`[{"table":"tasks","rule":{"kind":"maxLength","column":"title","max":-1,"code":"app.x"}}]`,
		`[{"table":"tasks","rule":{"kind":"maxLength","column":"title","max":1}}]`,
		`[{"table":"tasks","rule":{"kind":"maxLength","column":"title","max":1,"code":"sync.mine"}}]`,
		`[{"table":"tasks","rule":{"kind":"maxLength","column":"title","max":1,"code":"app.x","extra":1}}]`,
		`[{"table":"tasks","rule":{"kind":"immutableWhen","column":"title","guardColumn":"done","guardValue":"yes","code":"app.x"}}]`,
		`[{"table":"tasks","rule":{"kind":"immutableWhen","column":"title","guardColumn":"done","code":"app.x"}}]`,
		`[{"table":"tasks","rule":{"kind":"immutableWhen","column":"title","guardColumn":"nope","guardValue":true,"code":"app.x"}}]`,
		`[{"table":"tasks","rule":{"kind":"match","throw":true,"reject":{"code":"app.x"}}}]`,
	} {
		var e httperr.Body
		if code := control(t, "PUT", base+"/_test/validators", bad, &e); code != http.StatusBadRequest || e.Code != "sync.invalid_request" {
			t.Fatalf("PUT validators %s: %d %+v, want 400 sync.invalid_request", bad, code, e)
		}
	}
	wantRejected(t, "maxLength after refused PUTs", first(pushTasks(t, c, "k12", task("f", "toolong", false))), "app.title_too_long")

	// [] clears every rule.
	putRules(t, base, "/_test/validators", `[]`)
	wantApplied(t, "6 characters after []", first(pushTasks(t, c, "k13", task("c", "hello!", true))))
	wantApplied(t, "a title change under a stored guard after []", first(pushTasks(t, c, "k14", task("c", "bye", true))))
	wantApplied(t, "match after []", first(pushTasks(t, c, "k15", task("e", "nope", false))))
}

func TestTestControlCommitRuleKinds(t *testing.T) {
	base, c := startTasksControl(t)
	putRules(t, base, "/_test/commit-validator", `{"kind":"requireSiblingWhen","table":"tasks","column":"done","equals":true,
		"siblingRowIdSuffix":"-audit","code":"app.completion_audit_required"}`)
	const details = `{"fieldPaths":["done"],"reason":"missing_sibling_operation","requiredAction":"repair_aggregate"}`
	for _, tc := range []struct {
		name    string
		rows    []ssp2.Row
		blamed  int32
		applied bool
	}{
		{"trigger without its sibling", []ssp2.Row{task("t1", "done", true), task("ordinary", "x", false)}, 0, false},
		{"trigger second, another row's sibling only", []ssp2.Row{task("t0-audit", "x", false), task("t2", "done", true)}, 1, false},
		{"trigger with its sibling", []ssp2.Row{task("t3", "done", true), task("t3-audit", "audit", false)}, 0, true},
		{"no trigger", []ssp2.Row{task("t4", "open", false)}, 0, true},
	} {
		pr, d := pushTasks(t, c, tc.name, tc.rows...)
		if tc.applied {
			wantApplied(t, tc.name, pr)
			continue
		}
		wantRejected(t, tc.name, pr, "app.completion_audit_required")
		if pr.Results[0].OpIndex != tc.blamed {
			t.Fatalf("%s: blames op %d, want %d", tc.name, pr.Results[0].OpIndex, tc.blamed)
		}
		if d == nil || len(d.Entries) != 1 || d.Entries[0].DetailsJSON != details {
			t.Fatalf("%s: details %+v, want %s", tc.name, d, details)
		}
	}
	if got, want := taskRows(t, base), map[string]string{"t3": "done+", "t3-audit": "audit", "t4": "open"}; !mapsEqual(got, want) {
		t.Fatalf("rows %v, want %v (a rejected commit leaves none of its rows)", got, want)
	}

	// Refused bodies change nothing.
	for _, bad := range []string{
		`{}`, `{"kind":"requireSibling"}`, `[{"kind":"nope"}]`,
		`{"kind":"requireSiblingWhen","table":"tasks","column":"done","equals":true,"siblingRowIdSuffix":"","code":"app.x"}`,
		`{"kind":"requireSiblingWhen","table":"tasks","column":"done","equals":"true","siblingRowIdSuffix":"-a","code":"app.x"}`,
		`{"kind":"requireSiblingWhen","table":"tasks","column":"nope","equals":true,"siblingRowIdSuffix":"-a","code":"app.x"}`,
		`{"kind":"requireSiblingWhen","table":"nope","column":"done","equals":true,"siblingRowIdSuffix":"-a","code":"app.x"}`,
		`{"kind":"requireSiblingWhen","table":"tasks","column":"done","equals":true,"siblingRowIdSuffix":"-a"}`,
		`{"kind":"maxRows","table":"tasks","scopes":{"project_id":["p1"]},"maxRows":1}`,
	} {
		var e httperr.Body
		if code := control(t, "PUT", base+"/_test/commit-validator", bad, &e); code != http.StatusBadRequest || e.Code != "sync.invalid_request" {
			t.Fatalf("PUT commit-validator %s: %d %+v, want 400 sync.invalid_request", bad, code, e)
		}
	}
	wantRejected(t, "rule after refused PUTs", first(pushTasks(t, c, "k1", task("t5", "done", true))), "app.completion_audit_required")

	// null clears.
	putRules(t, base, "/_test/commit-validator", `null`)
	wantApplied(t, "trigger without its sibling after null", first(pushTasks(t, c, "k2", task("t5", "done", true))))

	// The further kind, alone and in an array with the contract's.
	putRules(t, base, "/_test/commit-validator", `[
		{"kind":"requireSiblingWhen","table":"tasks","column":"title","equals":"audited","siblingRowIdSuffix":"-a","code":"app.audit"},
		{"kind":"maxRows","table":"tasks","scopes":{"project_id":["p1"]},"maxRows":5,"reject":{"code":"app.full"}}]`)
	wantRejected(t, "the array's first rule", first(pushTasks(t, c, "k3", task("t6", "audited", false))), "app.audit")
	wantApplied(t, "the fifth row", first(pushTasks(t, c, "k4", task("t6", "x", false))))
	wantRejected(t, "the array's second rule", first(pushTasks(t, c, "k5", task("t7", "x", false))), "app.full")
}

// first returns a push's PUSH_RESULT.
func first(pr *ssp2.PushResult, _ *ssp2.PushResultDetails) *ssp2.PushResult { return pr }

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// The PUSH_RESULT_DETAILS each row rule kind attaches (the catalog's
// validators/reject-rolls-back-with-host-code): maxLength blames the op with
// {fieldPaths:[column], reason:"max_length_exceeded",
// requiredAction:"edit_fields"}, as the reference's driver does, and the
// whole commit rolls back; "details" replaces that; immutableWhen attaches
// none of its own (the reference attaches none; the catalog checks only
// its code) but takes "details".
func TestTestControlRowRuleDetails(t *testing.T) {
	base, c := startTasksControl(t)
	wantApplied(t, "the existing row", first(pushTasks(t, c, "d0", task("existing", "accepted", false))))
	putRules(t, base, "/_test/validators", `[{"table":"tasks","rule":{"kind":"maxLength","column":"title","max":10,"code":"app.title_too_long"}}]`)
	pr, d := pushTasks(t, c, "d1", task("existing", "this title is definitely over ten chars", false), task("sibling", "ok", false))
	wantRejected(t, "maxLength", pr, "app.title_too_long")
	const want = `{"fieldPaths":["title"],"reason":"max_length_exceeded","requiredAction":"edit_fields"}`
	if pr.Results[0].OpIndex != 0 || d == nil || len(d.Entries) != 1 || d.Entries[0].OpIndex != 0 || d.Entries[0].DetailsJSON != want {
		t.Fatalf("maxLength: op %d, details %+v; want op 0 and %s", pr.Results[0].OpIndex, d, want)
	}
	if got := taskRows(t, base); !mapsEqual(got, map[string]string{"existing": "accepted"}) {
		t.Fatalf("rows %v: the rejected commit left rows", got)
	}

	putRules(t, base, "/_test/validators", `[
		{"table":"tasks","rule":{"kind":"maxLength","column":"title","max":3,"code":"app.short","details":{"reason":"too_long","references":{"limit":"3"}}}},
		{"table":"tasks","rule":{"kind":"immutableWhen","column":"title","guardColumn":"done","guardValue":true,"code":"app.frozen"}}]`)
	_, d = pushTasks(t, c, "d2", task("n", "four", false))
	if want := `{"reason":"too_long","references":{"limit":"3"}}`; d == nil || len(d.Entries) != 1 || d.Entries[0].DetailsJSON != want {
		t.Fatalf("maxLength with details: %+v, want %s", d, want)
	}
	wantApplied(t, "done", first(pushTasks(t, c, "d3", task("f", "abc", true))))
	pr, d = pushTasks(t, c, "d4", task("f", "xyz", true))
	wantRejected(t, "immutableWhen", pr, "app.frozen")
	if d != nil {
		t.Fatalf("immutableWhen without details: %+v, want no PUSH_RESULT_DETAILS", d)
	}
	putRules(t, base, "/_test/validators", `[{"table":"tasks","rule":{"kind":"immutableWhen","column":"title","guardColumn":"done","guardValue":true,
		"code":"app.frozen","details":{"fieldPaths":["title"],"reason":"frozen","requiredAction":"discard_changes"}}}]`)
	_, d = pushTasks(t, c, "d5", task("f", "xyz", true))
	if want := `{"fieldPaths":["title"],"reason":"frozen","requiredAction":"discard_changes"}`; d == nil || len(d.Entries) != 1 || d.Entries[0].DetailsJSON != want {
		t.Fatalf("immutableWhen with details: %+v, want %s", d, want)
	}
}
