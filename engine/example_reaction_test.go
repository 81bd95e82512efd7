package engine_test

import (
	"context"
	"fmt"
	"log"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/reactions"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
)

// inboxSchema: tasks scoped by project.
const inboxSchema = `{"version":1,"tables":[{"name":"tasks","columns":[
 {"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"title","type":"string"}],
 "primaryKey":"id","scopes":["project:{project_id}"]}]}`

// welcomeNewTasks is a RowValidator that accepts every write and
// schedules a "welcome-mail" reaction for each new task: the reaction is
// stored in the commit's transaction, so it exists exactly when the
// commit does.
func welcomeNewTasks(ctx context.Context, w *engine.RowWrite) error {
	if w.Stored == nil && w.Row != nil {
		return w.React(engine.Reaction{Name: "welcome-mail", Payload: []byte(w.RowID), MaxAttempts: 5})
	}
	return nil
}

// A hook schedules a durable reaction with its commit (RowWrite.React,
// CommitView.React); the engine's worker delivers it to the handler
// registered under its name after the commit, at least once, retrying
// failures with backoff and dead-lettering after MaxAttempts. Handlers
// must be idempotent (the reaction's ID is stable).
func ExampleReaction() {
	sch, err := schema.Parse([]byte(inboxSchema))
	if err != nil {
		log.Fatal(err)
	}
	sent := make(chan string, 1)
	eng, err := engine.New(context.Background(), engine.Config{
		Schema:     sch,
		Backend:    memory.New().Backend(),
		Resolver:   engine.AllowAll(sch),
		Validators: map[string]engine.RowValidator{"tasks": welcomeNewTasks},
		Reactions: reactions.Options{Handlers: map[string]reactions.Handler{
			"welcome-mail": func(ctx context.Context, r reactions.Stored) error {
				sent <- fmt.Sprintf("mail about task %s (commit %d, attempt %d)", r.Payload, r.CommitSeq, r.Attempts)
				return nil // an error retries it later
			},
		}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()

	ctx := context.Background()
	id := engine.Identity{ActorID: "alice", Partition: "demo"}
	payload, err := ssp2.NewRowCodec(sch.Table("tasks").Columns).AppendSparse(nil, ssp2.Row{"t1", "P", "write the report"}, nil, 0)
	if err != nil {
		log.Fatal(err)
	}
	hello, err := eng.Sync(ctx, id, &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: "c1", SchemaVersion: 1}, &ssp2.PullHeader{Accept: 1}}})
	if err != nil {
		log.Fatal(err)
	}
	epoch := hello.Header().LogEpoch
	rep, err := eng.Sync(ctx, id, &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: "c1", SchemaVersion: 1, LogEpoch: &epoch},
		&ssp2.PushCommit{ClientCommitID: "k1", Operations: []ssp2.Operation{
			{Table: "tasks", RowID: "t1", Op: ssp2.OpUpsert, Payload: payload}}}}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("pushed; applied:", rep.Applied)
	fmt.Println(<-sent)
	// Output:
	// pushed; applied: 1
	// mail about task t1 (commit 1, attempt 1)
}
