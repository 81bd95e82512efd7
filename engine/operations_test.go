package engine_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/operations"
	"github.com/synclane/synclane/protocol/opwire"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

// sqlBackends are the stores that run registered queries.
var sqlBackends = []struct {
	name string
	open func(t *testing.T) backend
}{
	{"sqlite", func(t *testing.T) backend {
		return openShared(t, filepath.Join(t.TempDir(), "db.sqlite"))
	}},
	{"postgres", func(t *testing.T) backend {
		return pgtest.OpenSchema(t, pgtest.NewSchema(t), postgres.Options{MaxConns: 8})
	}},
}

// opHost is a test host's registry with counters of command runs.
type opHost struct {
	addRuns, failRuns atomic.Int64
}

func param(params any, key string) string {
	o, _ := params.(opwire.Object)
	v, _ := o.Get(key)
	s, _ := v.(string)
	return s
}

func (h *opHost) registry(t *testing.T, s *schema.Schema) *operations.Registry {
	t.Helper()
	reg := operations.NewRegistry(s)
	strCol := func(n string) operations.Column { return operations.Column{Name: n, Type: ssp2.TypeString} }
	admin := func(_ context.Context, c operations.Caller, _ any) (bool, error) {
		if c.ActorID == "broken" {
			return false, errors.New("policy store down")
		}
		return c.ActorID == "admin", nil
	}
	for _, q := range []operations.Query{
		{ID: "tasksByProject", SQL: "SELECT t.id, t.title FROM {tasks AS t} WHERE t.title <> ? ORDER BY t.id",
			Columns: []operations.Column{strCol("id"), strCol("title")}, MaxRows: 100,
			Bind:     func(p any) ([]any, error) { return []any{param(p, "notTitle")}, nil },
			Coverage: []operations.Coverage{{Table: "tasks", Params: map[string]string{"project_id": "project"}}}},
		{ID: "tiny", SQL: "SELECT id FROM {tasks} ORDER BY id", Columns: []operations.Column{strCol("id")}, MaxRows: 2,
			Coverage: []operations.Coverage{{Table: "tasks", Params: map[string]string{"project_id": "project"}}}},
		{ID: "allTasks", SQL: "SELECT id, project_id, title FROM {tasks} ORDER BY id", MaxRows: 100, Authorize: admin,
			Columns: []operations.Column{strCol("id"), strCol("project_id"), strCol("title")}},
		{ID: "countTasks", SQL: "SELECT count(*) AS n FROM {tasks}", MaxRows: 1,
			Columns:   []operations.Column{{Name: "n", Type: ssp2.TypeInteger}},
			Authorize: func(context.Context, operations.Caller, any) (bool, error) { return true, nil }},
		{ID: "broken", SQL: "SELECT nosuch AS id FROM {tasks}", MaxRows: 1, Columns: []operations.Column{strCol("id")},
			Authorize: func(context.Context, operations.Caller, any) (bool, error) { return true, nil }},
	} {
		if err := reg.AddQuery(q); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []operations.Command{
		{ID: "addTask",
			Authorize: func(_ context.Context, c operations.Caller, _ any) (bool, error) { return c.ActorID != "blocked", nil },
			Run: func(ctx context.Context, inv operations.Invocation) ([]operations.Mutation, error) {
				h.addRuns.Add(1)
				id := param(inv.Params, "id")
				title := param(inv.Params, "title")
				prev, err := inv.Rows.GetRow(ctx, "tasks", id)
				if err != nil {
					return nil, err
				}
				if prev != nil {
					title = prev["title"].(string) + "+" + title
				}
				return []operations.Mutation{{Table: "tasks", Values: map[string]any{
					"id": id, "project_id": param(inv.Params, "project"), "title": title}}}, nil
			}},
		{ID: "failing", Authorize: func(context.Context, operations.Caller, any) (bool, error) { return true, nil },
			Run: func(context.Context, operations.Invocation) ([]operations.Mutation, error) {
				h.failRuns.Add(1)
				return nil, errors.New("domain service down")
			}},
		{ID: "empty", Authorize: func(context.Context, operations.Caller, any) (bool, error) { return true, nil },
			Run: func(context.Context, operations.Invocation) ([]operations.Mutation, error) { return nil, nil }},
		{ID: "badMutation", Authorize: func(context.Context, operations.Caller, any) (bool, error) { return true, nil },
			Run: func(context.Context, operations.Invocation) ([]operations.Mutation, error) {
				return []operations.Mutation{{Table: "tasks", Values: map[string]any{"id": "z", "project_id": "A", "title": "t", "nope": 1}}}, nil
			}},
		{ID: "panics", Authorize: func(context.Context, operations.Caller, any) (bool, error) { return true, nil },
			Run: func(context.Context, operations.Invocation) ([]operations.Mutation, error) { panic("host bug") }},
	} {
		if err := reg.AddCommand(c); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

func newOpFixture(t *testing.T, st backend, mut ...func(*engine.Config)) (*fixture, *opHost) {
	h := &opHost{}
	f := newFixture(t, st, append([]func(*engine.Config){func(c *engine.Config) { c.Operations.Registry = h.registry(t, c.Schema) }}, mut...)...)
	return f, h
}

func (f *fixture) op(actor, partition string, req *opwire.Request) (operations.Result, error) {
	// Round-trip the request through the wire codec like a transport.
	o := opwire.Object{{Key: "revision", Value: 1.0}, {Key: "kind", Value: req.Kind}, {Key: "clientId", Value: req.ClientID},
		{Key: "operationId", Value: req.OperationID}}
	if req.Kind == opwire.KindCommand {
		o = append(o, opwire.Field{Key: "requestId", Value: req.RequestID})
	}
	if req.Params != nil {
		o = append(o, opwire.Field{Key: "params", Value: req.Params})
	}
	b, err := opwire.Encode(o)
	if err != nil {
		f.t.Fatal(err)
	}
	dec, err := opwire.DecodeRequest(b)
	if err != nil {
		f.t.Fatalf("request does not decode: %v", err)
	}
	res, err := f.eng.Operations().Run(context.Background(), engine.Identity{ActorID: actor, Partition: partition}, dec)
	if err == nil {
		if _, eerr := res.Encode(); eerr != nil {
			f.t.Fatalf("result does not encode: %v", eerr)
		}
	}
	return res, err
}

func query(id string, params opwire.Object) *opwire.Request {
	return &opwire.Request{Kind: opwire.KindQuery, ClientID: "op-client", OperationID: id, Params: params}
}

func command(id, requestID string, params opwire.Object) *opwire.Request {
	return &opwire.Request{Kind: opwire.KindCommand, ClientID: "op-client", OperationID: id, RequestID: requestID, Params: params}
}

func ids(res operations.Result) []string {
	var out []string
	for _, r := range res.Query.Rows {
		v, _ := r.Get("id")
		out = append(out, v.(string))
	}
	return out
}

// seedTasks pushes tasks a1, a2 (project A), b1 (project B) to p1 in
// three commits, and x1 (project A) to p2.
func seedTasks(f *fixture) {
	c := f.client("seeder", "seed")
	for _, r := range [][2]string{{"a1", "A"}, {"a2", "A"}, {"b1", "B"}} {
		if pr := c.push("c-"+r[0], upsert("tasks", r[0], f.row(r[0], r[1], "title "+r[0]), nil)); pr.Status != ssp2.CommitApplied {
			f.t.Fatalf("seed %s: %+v", r[0], pr)
		}
	}
	c2 := f.client("seeder", "seed2")
	c2.id.Partition = "p2"
	rep, err := c2.sync(&ssp2.PullHeader{Accept: 1})
	if err != nil {
		f.t.Fatal(err)
	}
	e := rep.Header().LogEpoch
	c2.epoch = &e
	if pr := c2.push("x1", upsert("tasks", "x1", f.row("x1", "A", "other partition"), nil)); pr.Status != ssp2.CommitApplied {
		f.t.Fatalf("seed x1: %+v", pr)
	}
}

func TestOperationQueryAuthorization(t *testing.T) {
	for _, b := range sqlBackends {
		t.Run(b.name, func(t *testing.T) {
			f, _ := newOpFixture(t, b.open(t))
			seedTasks(f)
			f.allow("alice", map[string][]string{"project_id": {"A"}})
			f.allow("wild", map[string][]string{"project_id": {"*"}})
			f.allow("down", nil) // resolver fails
			f.allow("admin", map[string][]string{})
			proj := func(v any) opwire.Object { return opwire.Object{{Key: "project", Value: v}} }
			cases := []struct {
				name  string
				actor string
				req   *opwire.Request
				want  []string
				code  syncerr.Code
			}{
				{"scoped: allowed project, partition-local", "alice", query("tasksByProject", proj("A")), []string{"a1", "a2"}, ""},
				{"scoped: bound value applies", "alice", query("tasksByProject", append(proj("A"), opwire.Field{Key: "notTitle", Value: "title a1"})), []string{"a2"}, ""},
				{"scoped: other project forbidden", "alice", query("tasksByProject", proj("B")), nil, syncerr.OperationForbidden},
				{"scoped: one forbidden value denies all", "alice", query("tasksByProject", proj([]any{"A", "B"})), nil, syncerr.OperationForbidden},
				{"scoped: wildcard grants listed values", "wild", query("tasksByProject", proj([]any{"A", "B"})), []string{"a1", "a2", "b1"}, ""},
				{"scoped: resolver failure fails closed", "down", query("tasksByProject", proj("A")), nil, syncerr.OperationForbidden},
				{"scoped: missing coverage param", "alice", query("tasksByProject", nil), nil, syncerr.OperationInvalidRequest},
				{"scoped: empty value list", "wild", query("tasksByProject", proj([]any{})), nil, syncerr.OperationInvalidRequest},
				{"privileged: granted", "admin", query("allTasks", nil), []string{"a1", "a2", "b1"}, ""},
				{"privileged: denied", "alice", query("allTasks", nil), nil, syncerr.OperationForbidden},
				{"privileged: authorize error fails closed", "broken", query("allTasks", nil), nil, syncerr.OperationForbidden},
				{"unknown operation", "admin", query("nope", nil), nil, syncerr.OperationUnknown},
				{"command ID as a query", "admin", query("addTask", nil), nil, syncerr.OperationUnknown},
				{"SQL failure", "admin", query("broken", nil), nil, syncerr.OperationQueryFailed},
				{"reserved clientId", "admin", &opwire.Request{Kind: opwire.KindQuery, ClientID: `["remote-command","x"]`, OperationID: "allTasks"}, nil, syncerr.InvalidClientID},
				{"clientId of another actor", "admin", &opwire.Request{Kind: opwire.KindQuery, ClientID: "seed", OperationID: "allTasks"}, nil, syncerr.InvalidClientID},
			}
			for _, c := range cases {
				res, err := f.op(c.actor, "p1", c.req)
				if c.code != "" {
					if syncerr.CodeOf(err) != c.code {
						t.Errorf("%s: err %v, want %s", c.name, err, c.code)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: %v", c.name, err)
					continue
				}
				if got := ids(res); !reflect.DeepEqual(got, c.want) {
					t.Errorf("%s: rows %v, want %v", c.name, got, c.want)
				}
				if res.Query.MaxCommitSeq != 3 {
					t.Errorf("%s: maxCommitSeq %d, want 3", c.name, res.Query.MaxCommitSeq)
				}
			}
			// The full row shape: declared columns only, in declared order.
			res, err := f.op("admin", "p1", query("allTasks", nil))
			if err != nil {
				t.Fatal(err)
			}
			want := opwire.Object{{Key: "id", Value: "a1"}, {Key: "project_id", Value: "A"}, {Key: "title", Value: "title a1"}}
			if !reflect.DeepEqual(res.Query.Rows[0], want) {
				t.Fatalf("row %v, want %v", res.Query.Rows[0], want)
			}
		})
	}
}

func TestOperationQueryResultTooLarge(t *testing.T) {
	for _, b := range sqlBackends {
		t.Run(b.name, func(t *testing.T) {
			f, _ := newOpFixture(t, b.open(t))
			seedTasks(f)
			p := func(v any) opwire.Object { return opwire.Object{{Key: "project", Value: v}} }
			if _, err := f.op("x", "p1", query("tiny", p([]any{"A", "B"}))); syncerr.CodeOf(err) != syncerr.OperationResultTooLarge {
				t.Fatalf("3 rows over maxRows 2: %v", err)
			}
			res, err := f.op("x", "p1", query("tiny", p("A")))
			if err != nil || !reflect.DeepEqual(ids(res), []string{"a1", "a2"}) {
				t.Fatalf("exactly maxRows: %v %v", ids(res), err)
			}
		})
	}
}

// TestOperationQuerySnapshot: every commit adds one row, so in any
// consistent snapshot count(rows) == maxCommitSeq; queries racing a
// stream of pushes must never see them differ.
func TestOperationQuerySnapshot(t *testing.T) {
	for _, b := range sqlBackends {
		t.Run(b.name, func(t *testing.T) {
			f, _ := newOpFixture(t, b.open(t))
			const writers, perWriter = 4, 15
			var wg sync.WaitGroup
			for w := range writers {
				c := f.client(fmt.Sprintf("w%d", w), fmt.Sprintf("cw%d", w))
				wg.Go(func() {
					for i := range perWriter {
						id := fmt.Sprintf("w%d-%d", w, i)
						if pr := c.push(id, upsert("tasks", id, f.row(id, "A", id), nil)); pr.Status != ssp2.CommitApplied {
							t.Errorf("push %s: %+v", id, pr)
						}
					}
				})
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			seen := map[int64]bool{}
			for finished := false; !finished; {
				select {
				case <-done:
					finished = true // one more query after the last push
				default:
				}
				res, err := f.op("x", "p1", query("countTasks", nil))
				if err != nil {
					t.Fatal(err)
				}
				n, _ := res.Query.Rows[0].Get("n")
				if n.(int64) != res.Query.MaxCommitSeq {
					t.Fatalf("torn read: %d rows at maxCommitSeq %d", n, res.Query.MaxCommitSeq)
				}
				seen[res.Query.MaxCommitSeq] = true
			}
			if !seen[writers*perWriter] {
				t.Fatalf("the last query did not see every commit: %v", seen)
			}
		})
	}
}

func TestOperationQueryServeGate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db.sqlite")
	decl := storage.CheckpointDeclaration{Partition: "p1", Name: "proj", SchemaVersion: 1}
	fa, _ := newOpFixture(t, openShared(t, path), func(c *engine.Config) { c.Checkpoints = []storage.CheckpointDeclaration{decl} })
	fb, _ := newOpFixture(t, openShared(t, path))
	if _, err := fa.op("x", "p1", query("countTasks", nil)); err != nil {
		t.Fatalf("the declaring process serves queries: %v", err)
	}
	_, err := fb.op("x", "p1", query("countTasks", nil))
	wantNotReady(t, err, `{"partition":"p1","projection":"proj"}`)
	if out, err := fa.store.Checkpoints.ActivateCheckpoint(context.Background(), "p1", "proj", 0, 0, []string{"nothing"}, 0); err != nil || out != storage.Activated {
		t.Fatalf("activate: %v %v", out, err)
	}
	if _, err := fb.op("x", "p1", query("countTasks", nil)); err != nil {
		t.Fatalf("after activation: %v", err)
	}
}

// TestOperationQueryUnsupportedStorage: the memory store cannot run
// registered SQL, so it has no Queries role and an engine registering
// queries on it is refused at start (it used to start and answer every
// query operation.storage_unsupported at request time).
func TestOperationQueryUnsupportedStorage(t *testing.T) {
	s, err := schema.Parse([]byte(testSchemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	h := &opHost{}
	_, err = engine.New(context.Background(), engine.Config{Schema: s, Backend: memory.New().Backend(),
		Resolver: engine.AllowAll(s), Operations: operations.Options{Registry: h.registry(t, s)}})
	if err == nil || !strings.Contains(err.Error(), "registered remote queries (Config.Operations) needs the storage role Queries") {
		t.Fatalf("engine.New on the memory store with registered queries: %v, want the missing Queries role", err)
	}
}

func TestOperationCommand(t *testing.T) {
	for _, b := range sqlBackends {
		t.Run(b.name, func(t *testing.T) {
			var mu sync.Mutex
			var commits []int64
			f, h := newOpFixture(t, b.open(t), func(c *engine.Config) {
				c.OnCommit = func(p string, seq int64) {
					mu.Lock()
					commits = append(commits, seq)
					mu.Unlock()
				}
			})
			f.allow("alice", map[string][]string{"project_id": {"A"}})
			f.allow("down", nil)
			task := func(id, project, title string) opwire.Object {
				return opwire.Object{{Key: "id", Value: id}, {Key: "project", Value: project}, {Key: "title", Value: title}}
			}

			// Applied: one run, a new commit, fanned out.
			res, err := f.op("alice", "p1", command("addTask", "r1", task("t1", "A", "hello")))
			if err != nil || res.Command.Status != opwire.StatusApplied || res.Command.CommitSeq != 1 || h.addRuns.Load() != 1 {
				t.Fatalf("first run: %+v %v runs=%d", res.Command, err, h.addRuns.Load())
			}
			mu.Lock()
			if !reflect.DeepEqual(commits, []int64{1}) {
				t.Fatalf("OnCommit saw %v, want [1]", commits)
			}
			mu.Unlock()

			// Retry: cached, same commit, the callback not run again.
			for range 2 {
				res, err = f.op("alice", "p1", command("addTask", "r1", task("t1", "A", "hello")))
				if err != nil || res.Command.Status != opwire.StatusCached || res.Command.CommitSeq != 1 {
					t.Fatalf("retry: %+v %v", res.Command, err)
				}
			}
			if h.addRuns.Load() != 1 {
				t.Fatalf("a retry re-ran the command: runs=%d", h.addRuns.Load())
			}

			// A new requestId runs again and reads the stored row.
			res, err = f.op("alice", "p1", command("addTask", "r2", task("t1", "A", "again")))
			if err != nil || res.Command.Status != opwire.StatusApplied || res.Command.CommitSeq != 2 || h.addRuns.Load() != 2 {
				t.Fatalf("second request: %+v %v", res.Command, err)
			}

			// The commits reach an ordinary pull.
			c := f.client("alice", "reader")
			s := c.pull(ssp2.PullHeader{Accept: 1}, sub("s", -1, "A"))["s"]
			if len(s.rows) != 1 {
				t.Fatalf("pull after commands: %d rows", len(s.rows))
			}
			if got := s.rows[0]; got.Values[2] != "hello+again" || got.ServerVersion != 2 {
				t.Fatalf("pulled row %+v", got)
			}

			// Write-path rejection: stored, replayed as rejected, not re-run.
			for i := range 2 {
				res, err = f.op("alice", "p1", command("addTask", "r3", task("t9", "B", "x")))
				if err != nil || res.Command.Status != opwire.StatusRejected || res.Command.CommitSeq != 0 || len(res.Command.Results) != 1 {
					t.Fatalf("rejected %d: %+v %v", i, res.Command, err)
				}
				if code, _ := res.Command.Results[0].(opwire.Object).Get("code"); code != string(syncerr.Forbidden) {
					t.Fatalf("rejection code %v", code)
				}
			}
			if h.addRuns.Load() != 3 {
				t.Fatalf("runs after a replayed rejection = %d, want 3", h.addRuns.Load())
			}
			// A resolver failure denies the command's writes (fail closed).
			down := command("addTask", "r4", task("t8", "A", "x"))
			down.ClientID = "down-client"
			res, err = f.op("down", "p1", down)
			if err != nil || res.Command.Status != opwire.StatusRejected {
				t.Fatalf("resolver failure: %+v %v", res.Command, err)
			}

			// Callback failure: not stored, a retry runs it again.
			for i := range 2 {
				if _, err := f.op("alice", "p1", command("failing", "r1", nil)); syncerr.CodeOf(err) != syncerr.OperationExecutionFailed {
					t.Fatalf("failing %d: %v", i, err)
				}
			}
			if h.failRuns.Load() != 2 {
				t.Fatalf("failing command ran %d times, want 2 (failures are not stored)", h.failRuns.Load())
			}
			for _, c := range []struct {
				name  string
				actor string
				req   *opwire.Request
				code  syncerr.Code
			}{
				{"empty mutations", "alice", command("empty", "r1", nil), syncerr.OperationInvalidRequest},
				{"invalid mutation", "alice", command("badMutation", "r1", nil), syncerr.OperationInvalidRequest},
				{"panicking command", "alice", command("panics", "r1", nil), syncerr.OperationExecutionFailed},
				{"authorize denies", "blocked", command("addTask", "r1", task("t1", "A", "x")), syncerr.OperationForbidden},
				{"unknown", "alice", command("nope", "r1", nil), syncerr.OperationUnknown},
				{"query ID as a command", "alice", command("allTasks", "r1", nil), syncerr.OperationUnknown},
				{"clientId of another actor", "bob", command("addTask", "r1", task("t1", "A", "x")), syncerr.InvalidClientID},
			} {
				if _, err := f.op(c.actor, "p1", c.req); syncerr.CodeOf(err) != c.code {
					t.Errorf("%s: %v, want %s", c.name, err, c.code)
				}
			}
			// Nothing above allocated a commit, and the partition's actor
			// still serves commands.
			res, err = f.op("alice", "p1", query("countTasks", nil))
			if err != nil || res.Query.MaxCommitSeq != 2 {
				t.Fatalf("maxCommitSeq after refusals: %+v %v", res.Query, err)
			}
			res, err = f.op("alice", "p1", command("addTask", "r5", task("t5", "A", "after")))
			if err != nil || res.Command.Status != opwire.StatusApplied || res.Command.CommitSeq != 3 {
				t.Fatalf("command after refusals: %+v %v", res.Command, err)
			}
			res, err = f.op("alice", "p1", query("countTasks", nil))
			if err != nil || res.Query.MaxCommitSeq != 3 {
				t.Fatalf("maxCommitSeq after refusals: %+v %v", res.Query, err)
			}
		})
	}
}

func TestCommandIdempotencyIdentity(t *testing.T) {
	for _, c := range []struct{ actor, client, op, req, wantClient, wantCommit string }{
		{"a", "c", "op", "r", `["remote-command","a","c"]`, `["op","r"]`},
		{`a"b`, "c\\d", "o,p", "r\n", `["remote-command","a\"b","c\\d"]`, `["o,p","r\n"]`},
		{"é<>&", "\x01", "\u2028", "r", "[\"remote-command\",\"é<>&\",\"\\u0001\"]", "[\"\u2028\",\"r\"]"},
	} {
		if got := operations.CommandClientID(c.actor, c.client); got != c.wantClient {
			t.Errorf("CommandClientID(%q,%q) = %s, want %s", c.actor, c.client, got, c.wantClient)
		}
		if got := operations.CommandCommitID(c.op, c.req); got != c.wantCommit {
			t.Errorf("CommandCommitID(%q,%q) = %s, want %s", c.op, c.req, got, c.wantCommit)
		}
	}
}

// A command's commit goes through the host's row validators like a push:
// the host code is the rejection, stored and replayed without re-running.
func TestOperationCommandRunsValidators(t *testing.T) {
	for _, b := range sqlBackends {
		t.Run(b.name, func(t *testing.T) {
			var validated atomic.Int64
			f, h := newOpFixture(t, b.open(t), func(c *engine.Config) {
				c.Validators = map[string]engine.RowValidator{"tasks": func(_ context.Context, w *engine.RowWrite) error {
					validated.Add(1)
					if w.Row != nil && w.Row[2] == "forbidden title" {
						return &engine.Rejection{Code: "tasks.title_taken", Message: "pick another title"}
					}
					return nil
				}}
			})
			p := opwire.Object{{Key: "id", Value: "t1"}, {Key: "project", Value: "A"}, {Key: "title", Value: "forbidden title"}}
			for i := range 2 {
				res, err := f.op("alice", "p1", command("addTask", "r1", p))
				if err != nil || res.Command.Status != opwire.StatusRejected || len(res.Command.Results) != 1 {
					t.Fatalf("attempt %d: %+v %v", i, res.Command, err)
				}
				if code, _ := res.Command.Results[0].(opwire.Object).Get("code"); code != "tasks.title_taken" {
					t.Fatalf("attempt %d: code %v", i, code)
				}
			}
			if h.addRuns.Load() != 1 || validated.Load() != 1 {
				t.Fatalf("runs %d validations %d, want 1 and 1 (the replay runs neither)", h.addRuns.Load(), validated.Load())
			}
		})
	}
}
