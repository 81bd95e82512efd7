package engine_test

import (
	"context"
	"fmt"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/reactions"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
)

const exampleSchema = `{"version":1,"tables":[{"name":"tasks","columns":[
 {"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"title","type":"string"}],
 "primaryKey":"id","scopes":["project:{project_id}"]}]}`

// examplePush pushes one commit upserting row and prints its outcome.
func examplePush(eng *engine.Engine, s *schema.Schema, ccid string, row ssp2.Row) {
	ctx := context.Background()
	id := engine.Identity{ActorID: "alice", Partition: "demo"}
	payload, _ := ssp2.NewRowCodec(s.Table("tasks").Columns).AppendSparse(nil, row, nil, 0)
	// A client first acquires the partition's log epoch.
	hello, _ := eng.Sync(ctx, id, &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: "c1", SchemaVersion: 1}, &ssp2.PullHeader{Accept: 1}}})
	epoch := hello.Header().LogEpoch
	rep, err := eng.Sync(ctx, id, &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: "c1", SchemaVersion: 1, LogEpoch: &epoch},
		&ssp2.PushCommit{ClientCommitID: ccid, Operations: []ssp2.Operation{
			{Table: "tasks", RowID: row[0].(string), Op: ssp2.OpUpsert, Payload: payload}}}}})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	for _, f := range rep.Frames {
		switch x := f.(type) {
		case *ssp2.PushResult:
			if x.Status == ssp2.CommitRejected {
				fmt.Println(ccid, "rejected:", x.Results[0].Code, "-", x.Results[0].Message)
			} else {
				fmt.Println(ccid, "applied at seq", *x.CommitSeq)
			}
		case *ssp2.PushResultDetails:
			fmt.Println("details:", x.Entries[0].DetailsJSON)
		}
	}
}

// A row validator rejects a write with the host's own code and structured
// details; a whole-commit validator reads the candidate state (the
// commit's own rows included) inside the push transaction.
func ExampleConfig_validators() {
	s, _ := schema.Parse([]byte(exampleSchema))
	eng, err := engine.New(context.Background(), engine.Config{
		Schema: s, Backend: memory.New().Backend(), Resolver: engine.AllowAll(s),
		Validators: map[string]engine.RowValidator{
			"tasks": func(ctx context.Context, w *engine.RowWrite) error {
				// Columns by name: the row as it would be stored (a sparse
				// patch's columns laid over the stored row).
				if title, ok := w.Value("title"); ok && title == "" {
					return &engine.Rejection{Code: "app.title_required", Message: "a task needs a title",
						Details: &engine.RejectionDetails{FieldPaths: []string{"title"}, Reason: "empty"}}
				}
				return nil
			},
		},
		CommitValidator: func(ctx context.Context, c *engine.CommitView) error {
			rows, err := c.ScanRows(ctx, engine.ScanQuery{Table: "tasks",
				Scopes: map[string][]string{"project_id": {"P"}}, Limit: 3})
			if err != nil {
				return err // a read failure rejects with sync.constraint_violation
			}
			if len(rows) > 2 {
				return &engine.Rejection{Code: "app.project_full", Message: "project P holds at most two tasks"}
			}
			return nil
		},
	})
	if err != nil {
		panic(err)
	}
	defer eng.Close()
	examplePush(eng, s, "k1", ssp2.Row{"t1", "P", ""})
	examplePush(eng, s, "k2", ssp2.Row{"t1", "P", "one"})
	examplePush(eng, s, "k3", ssp2.Row{"t2", "P", "two"})
	examplePush(eng, s, "k4", ssp2.Row{"t3", "P", "three"})
	// Output:
	// k1 rejected: app.title_required - a task needs a title
	// details: {"fieldPaths":["title"],"reason":"empty"}
	// k2 applied at seq 1
	// k3 applied at seq 2
	// k4 rejected: app.project_full - project P holds at most two tasks
}

// A validator schedules a durable reaction with its commit; the engine's
// worker delivers it after the commit, at least once, retrying failures
// with backoff and dead-lettering after MaxAttempts.
func ExampleConfig_reactions() {
	s, _ := schema.Parse([]byte(exampleSchema))
	sent := make(chan string, 1)
	eng, err := engine.New(context.Background(), engine.Config{
		Schema: s, Backend: memory.New().Backend(), Resolver: engine.AllowAll(s),
		Validators: map[string]engine.RowValidator{
			"tasks": func(ctx context.Context, w *engine.RowWrite) error {
				if w.Stored == nil && w.Row != nil { // a new task
					return w.React(engine.Reaction{Name: "welcome-mail", Payload: []byte(w.RowID), MaxAttempts: 5})
				}
				return nil
			},
		},
		Reactions: reactions.Options{Handlers: map[string]reactions.Handler{
			"welcome-mail": func(ctx context.Context, r reactions.Stored) error {
				sent <- fmt.Sprintf("mail about task %s (commit %d, attempt %d)", r.Payload, r.CommitSeq, r.Attempts)
				return nil
			},
		}},
	})
	if err != nil {
		panic(err)
	}
	defer eng.Close()
	examplePush(eng, s, "k1", ssp2.Row{"t1", "P", "write the report"})
	fmt.Println(<-sent)
	// Output:
	// k1 applied at seq 1
	// mail about task t1 (commit 1, attempt 1)
}
