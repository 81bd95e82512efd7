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

// projectSchema: tasks scoped by project.
const projectSchema = `{"version":1,"tables":[{"name":"tasks","columns":[
 {"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"title","type":"string"}],
 "primaryKey":"id","scopes":["project:{project_id}"]}]}`

// atMostTwoTasks is a CommitValidator: once every operation of a commit
// is staged, it reads the candidate state (the commit's own rows
// included) inside the push transaction and rejects the commit when
// project P would hold more than two tasks.
func atMostTwoTasks(ctx context.Context, c *engine.CommitView) error {
	rows, err := c.ScanRows(ctx, engine.ScanQuery{Table: "tasks",
		Scopes: map[string][]string{"project_id": {"P"}}, Limit: 3})
	if err != nil {
		return err // a read failure fails the push group with the retryable internal error
	}
	if len(rows) > 2 {
		return &engine.Rejection{Code: "app.project_full", Message: "project P holds at most two tasks"}
	}
	return nil
}

// pushCommit pushes one commit of upserts through eng.Sync, as a
// transport would, and prints its outcome.
func pushCommit(eng *engine.Engine, ccid string, rows ...ssp2.Row) {
	ctx := context.Background()
	id := engine.Identity{ActorID: "alice", Partition: "demo"}
	codec := ssp2.NewRowCodec(eng.Schema().Table("tasks").Columns)
	commit := &ssp2.PushCommit{ClientCommitID: ccid}
	for _, row := range rows {
		payload, err := codec.AppendSparse(nil, row, nil, 0)
		if err != nil {
			log.Fatal(err)
		}
		commit.Operations = append(commit.Operations,
			ssp2.Operation{Table: "tasks", RowID: row[0].(string), Op: ssp2.OpUpsert, Payload: payload})
	}
	// A client first acquires the partition's log epoch, then pushes under it.
	hello, err := eng.Sync(ctx, id, &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: "c1", SchemaVersion: 1}, &ssp2.PullHeader{Accept: 1}}})
	if err != nil {
		log.Fatal(err)
	}
	epoch := hello.Header().LogEpoch
	hello.Close()
	rep, err := eng.Sync(ctx, id, &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: "c1", SchemaVersion: 1, LogEpoch: &epoch}, commit}})
	if err != nil {
		log.Fatal(err)
	}
	defer rep.Close()
	for _, pr := range commitResults(rep.Frames) {
		if pr.Status == ssp2.CommitRejected {
			fmt.Println(ccid, "rejected:", pr.Results[0].Code, "-", pr.Results[0].Message)
		} else {
			fmt.Println(ccid, "applied at seq", *pr.CommitSeq)
		}
	}
}

// commitResults returns the PUSH_RESULT frames among frames.
func commitResults(frames []ssp2.Frame) (out []*ssp2.PushResult) {
	for _, f := range frames {
		if pr, ok := f.(*ssp2.PushResult); ok {
			out = append(out, pr)
		}
	}
	return out
}

// The whole-commit validator (Config.CommitValidator) runs once per
// commit, after its operations are staged; its reads see the commit's
// own writes, so a commit of two tasks is judged on both.
func ExampleCommitValidator() {
	sch, err := schema.Parse([]byte(projectSchema))
	if err != nil {
		log.Fatal(err)
	}
	eng, err := engine.New(context.Background(), engine.Config{
		Schema:          sch,
		Backend:         memory.New().Backend(),
		Resolver:        engine.AllowAll(sch),
		CommitValidator: atMostTwoTasks,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()
	pushCommit(eng, "k1", ssp2.Row{"t1", "P", "one"})
	pushCommit(eng, "k2", ssp2.Row{"t2", "P", "two"}, ssp2.Row{"t3", "P", "three"})
	pushCommit(eng, "k3", ssp2.Row{"t2", "P", "two"})
	// Output:
	// k1 applied at seq 1
	// k2 rejected: app.project_full - project P holds at most two tasks
	// k3 applied at seq 2
}
