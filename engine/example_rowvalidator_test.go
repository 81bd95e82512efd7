package engine_test

import (
	"context"
	"fmt"
	"log"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
)

// taskSchema: tasks scoped by project.
const taskSchema = `{"version":1,"tables":[{"name":"tasks","columns":[
 {"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"title","type":"string"}],
 "primaryKey":"id","scopes":["project:{project_id}"]}]}`

// requireTitle is a RowValidator for tasks: it reads the column by name
// (RowWrite.Value: the row as it would be stored, a sparse patch's columns
// laid over the stored row) and rejects with the host's own code and
// structured details (sent as PUSH_RESULT_DETAILS).
func requireTitle(ctx context.Context, w *engine.RowWrite) error {
	if w.Row == nil { // a delete
		return nil
	}
	if title, _ := w.Value("title"); title == "" {
		return &engine.Rejection{Code: "app.title_required", Message: "a task needs a title",
			Details: &engine.RejectionDetails{FieldPaths: []string{"title"}, Reason: "empty"}}
	}
	return nil
}

// pushTask pushes one commit upserting row through eng.Sync, as a
// transport would, and prints its outcome.
func pushTask(eng *engine.Engine, ccid string, row ssp2.Row) {
	ctx := context.Background()
	id := engine.Identity{ActorID: "alice", Partition: "demo"}
	payload, err := ssp2.NewRowCodec(eng.Schema().Table("tasks").Columns).AppendSparse(nil, row, nil, 0)
	if err != nil {
		log.Fatal(err)
	}
	// A client first acquires the partition's log epoch, then pushes under it.
	hello, err := eng.Sync(ctx, id, &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: "c1", SchemaVersion: 1}, &ssp2.PullHeader{Accept: 1}}})
	if err != nil {
		log.Fatal(err)
	}
	epoch := hello.Header().LogEpoch
	hello.Close() // a Reply not written is closed
	rep, err := eng.Sync(ctx, id, &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: "c1", SchemaVersion: 1, LogEpoch: &epoch},
		&ssp2.PushCommit{ClientCommitID: ccid, Operations: []ssp2.Operation{
			{Table: "tasks", RowID: row[0].(string), Op: ssp2.OpUpsert, Payload: payload}}}}})
	if err != nil {
		log.Fatal(err)
	}
	defer rep.Close()
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

// A row validator, one per table in Config.Validators, runs on the
// partition's actor inside the push transaction and can reject a write
// with the host's own code: the whole commit is rejected, its neighbours
// are not.
func ExampleRowValidator() {
	sch, err := schema.Parse([]byte(taskSchema))
	if err != nil {
		log.Fatal(err)
	}
	eng, err := engine.New(context.Background(), engine.Config{
		Schema:     sch,
		Backend:    memory.New().Backend(),
		Resolver:   engine.AllowAll(sch),
		Validators: map[string]engine.RowValidator{"tasks": requireTitle},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()
	pushTask(eng, "k1", ssp2.Row{"t1", "P", ""})
	pushTask(eng, "k2", ssp2.Row{"t1", "P", "write the report"})
	// Output:
	// k1 rejected: app.title_required - a task needs a title
	// details: {"fieldPaths":["title"],"reason":"empty"}
	// k2 applied at seq 1
}
