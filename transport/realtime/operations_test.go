package realtime_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/synclane/synclane/engine/operations"
	"github.com/synclane/synclane/protocol/opwire"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/transport/httpsync"
)

// A remote command's commit is an ordinary commit: a realtime subscriber
// of its scope receives it as a delta, and a retry adds nothing.
func TestCommandCommitReachesRealtimeSubscriber(t *testing.T) {
	f := newFixture(t, fixtureOpts{ops: func(s *schema.Schema) *operations.Registry {
		reg := operations.NewRegistry(s)
		if err := reg.AddCommand(operations.Command{ID: "addTodo",
			Authorize: func(context.Context, operations.Caller, any) (bool, error) { return true, nil },
			Run: func(_ context.Context, inv operations.Invocation) ([]operations.Mutation, error) {
				return []operations.Mutation{{Table: "todos", Values: map[string]any{"id": "t1", "list_id": "groceries",
					"title": "milk", "done": false, "position": int64(1), "updated_at_ms": int64(1)}}}, nil
			}}); err != nil {
			t.Fatal(err)
		}
		return reg
	}})
	ctx := ctxT(t)
	b := f.replica("bob", "b", "groceries")
	if err := b.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	bs := f.mustDial(ctx, "bob", "b")
	f.waitLive(t, "b")

	oc := &httpsync.OperationsClient{URL: f.srv.URL + "/operations", ClientID: "producer", Header: http.Header{"X-Actor": {"ada"}}}
	a, err := oc.Command(ctx, "addTodo", "r1", nil)
	if err != nil || a.Status != opwire.StatusApplied {
		t.Fatalf("command: %+v %v", a, err)
	}
	d := nextDelta(t, ctx, bs)
	cm := commits(d.Message)
	if len(cm) != 1 || cm[0].CommitSeq != a.CommitSeq || cm[0].ActorID != "ada" || len(cm[0].Changes) != 1 ||
		cm[0].Changes[0].RowID != "t1" {
		t.Fatalf("delta %+v, want the command's commit %d", cm, a.CommitSeq)
	}
	if err := b.ApplyDelta(d.Message); err != nil {
		t.Fatal(err)
	}
	if got := b.Rows["todos"]["t1"]; got.Values[2] != "milk" {
		t.Fatalf("subscriber's row %+v", got)
	}
	if a2, err := oc.Command(ctx, "addTodo", "r1", nil); err != nil || a2.Status != opwire.StatusCached || a2.CommitSeq != a.CommitSeq {
		t.Fatalf("retry: %+v %v", a2, err)
	}
	// The retry made no commit: the next delta is the next ordinary push.
	seq := push(t, ctx, b.Client, "t2", "groceries", "bread")
	if cm := commits(nextDelta(t, ctx, bs).Message); len(cm) != 1 || cm[0].CommitSeq != seq || seq != a.CommitSeq+1 {
		t.Fatalf("after the retry: %+v (push seq %d)", cm, seq)
	}
}
