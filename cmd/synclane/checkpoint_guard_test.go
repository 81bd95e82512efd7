package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// TestCheckpointDeclareNeedsYes: declare against a serving partition
// refuses without --yes (exit 2, the 503 consequence spelled out, nothing
// declared, the partition still served); with --yes it declares and the
// partition is refused until activation. activate explains a stale
// outcome with the partition's log head, and succeeds at that watermark.
func TestCheckpointDeclareNeedsYes(t *testing.T) {
	for name, store := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			base := startServe(t, store...)
			for _, id := range []string{"t1", "t2"} {
				if pr, err := pushTodo(t, base, "ada", id); err != nil || pr.Status != ssp2.CommitApplied {
					t.Fatalf("push %s: %+v %v", id, pr, err)
				}
			}
			code, out, errOut := runCmd(t, append([]string{"checkpoint", "declare", "default/todo_search"}, store...)...)
			if code != 2 || out != "" {
				t.Fatalf("declare without --yes: exit %d, stdout %q; want 2 and nothing", code, out)
			}
			for _, want := range []string{"503 sync.schema_not_ready", "until the checkpoint is activated", "--yes", "Nothing was declared", "schema version 1"} {
				if !strings.Contains(errOut, want) {
					t.Errorf("declare without --yes says no %q:\n%s", want, errOut)
				}
			}
			if code, out, _ := runCmd(t, append([]string{"checkpoint", "list"}, store...)...); code != 0 || strings.Contains(out, "todo_search") {
				t.Fatalf("after the refused declare: exit %d\n%s", code, out)
			}
			if pr, err := pushTodo(t, base, "ada", "t3"); err != nil || pr.Status != ssp2.CommitApplied {
				t.Fatalf("the partition stopped serving after a refused declare: %+v %v", pr, err)
			}

			code, out, errOut = runCmd(t, append([]string{"checkpoint", "declare", "--yes", "default/todo_search"}, store...)...)
			if code != 0 || !strings.Contains(out, "declared") || !strings.Contains(out, "503 sync.schema_not_ready") {
				t.Fatalf("declare --yes: exit %d\n%s\n%s", code, out, errOut)
			}
			_, err := pushTodo(t, base, "ada", "t4")
			notReady(t, err)

			code, out, errOut = runCmd(t, append([]string{"checkpoint", "activate", "--sources", "todos", "default/todo_search"}, store...)...)
			if code != 1 {
				t.Fatalf("stale activation: exit %d\n%s\n%s", code, out, errOut)
			}
			for _, want := range []string{"stale: a source table (todos) changed after watermark 0", "log is now at\ncommit seq 3", "--watermark 3"} {
				if !strings.Contains(out, want) {
					t.Errorf("stale activation says no %q:\n%s", want, out)
				}
			}
			code, out, _ = runCmd(t, append([]string{"checkpoint", "activate", "--sources", "todos", "--watermark", "3", "default/todo_search"}, store...)...)
			if code != 0 || !strings.HasPrefix(out, "activated\n") {
				t.Fatalf("activation at the named watermark: exit %d\n%s", code, out)
			}
			if pr, err := pushTodo(t, base, "ada", "t4"); err != nil || pr.Status != ssp2.CommitApplied {
				t.Fatalf("after activation: %+v %v", pr, err)
			}
			code, out, _ = runCmd(t, append([]string{"checkpoint", "activate", "--sources", "todos", "--watermark", "4", "default/todo_search"}, store...)...)
			if code != 1 || !strings.Contains(out, "already activated (at watermark 3)") {
				t.Errorf("activating twice: exit %d\n%s", code, out)
			}
		})
	}
}

// TestCheckpointActivateUnverifiable: history pruned above the watermark
// is explained with the horizon the backfill's watermark must reach.
func TestCheckpointActivateUnverifiable(t *testing.T) {
	for name, store := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			base := startServe(t, store...)
			for _, id := range []string{"t1", "t2", "t3"} {
				if pr, err := pushTodo(t, base, "ada", id); err != nil || pr.Status != ssp2.CommitApplied {
					t.Fatalf("push %s: %+v %v", id, pr, err)
				}
			}
			if code, out, errOut := runCmd(t, append([]string{"checkpoint", "declare", "--yes", "default/todo_search"}, store...)...); code != 0 {
				t.Fatalf("declare --yes: exit %d\n%s\n%s", code, out, errOut)
			}
			var c serveConfig
			if store[0] == "--data" {
				c.data = store[1]
			} else {
				c.postgresURL = store[1]
			}
			st, _, err := openStore(context.Background(), c, zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			sch, err := schema.Parse([]byte(schema.Demo))
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Lifecycle.EnsureSchema(context.Background(), sch); err != nil && !errors.Is(err, storage.ErrCheckpointIncomplete) {
				t.Fatal(err)
			}
			err = st.Checkpoints.PruneThrough(context.Background(), "default", 3)
			st.Close()
			if err != nil {
				t.Fatal(err)
			}
			code, out, errOut := runCmd(t, append([]string{"checkpoint", "activate", "--sources", "todos", "--watermark", "1", "default/todo_search"}, store...)...)
			if code != 1 {
				t.Fatalf("activation over pruned history: exit %d\n%s\n%s", code, out, errOut)
			}
			for _, want := range []string{"unverifiable: the partition's commits through seq 3 were pruned (horizon 3 is above watermark 1)", "watermark is at least 3"} {
				if !strings.Contains(out, want) {
					t.Errorf("unverifiable activation says no %q:\n%s", want, out)
				}
			}
		})
	}
}

// TestExplainActivation: each cause of a refused activation is named
// with the numbers that decide it.
func TestExplainActivation(t *testing.T) {
	cp := storage.Checkpoint{Partition: "p", Name: "n", State: storage.CheckpointDeclared, Watermark: 5, OwnerEpoch: 2}
	activated := cp
	activated.State = storage.CheckpointActivated
	part := storage.PartitionInfo{Partition: "p", Exists: true, MaxCommitSeq: 40, HorizonSeq: 12}
	for _, tc := range []struct {
		name  string
		out   storage.ActivationOutcome
		cur   storage.Checkpoint
		epoch int64
		want  []string
	}{
		{"activated", storage.Activated, cp, 2, nil},
		{"already activated", storage.Stale, activated, 2, []string{"p/n is already activated (at watermark 5)"}},
		{"owner epoch", storage.Stale, cp, 1, []string{"owner epoch 1 is not the checkpoint's owner epoch 2", "--epoch 2"}},
		{"source changed", storage.Stale, cp, 2, []string{"(a,b) changed after watermark 5", "commit seq 40", "--watermark 40"}},
		{"unverifiable", storage.Unverifiable, cp, 2, []string{"through seq 12 were pruned (horizon 12 is above watermark 5)", "at least 12 (the log is at 40)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			explainActivation(&b, tc.out, tc.cur, tc.epoch, 5, []string{"a", "b"}, part)
			if tc.want == nil && b.Len() != 0 {
				t.Errorf("explained an activation: %q", b.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("explanation lacks %q:\n%s", w, b.String())
				}
			}
		})
	}
}
