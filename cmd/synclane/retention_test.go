package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/synclane/synclane/internal/promtext"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
)

// thingsReplica is a client replica subscribed to project p1's things.
func thingsReplica(t *testing.T, base, clientID string) *httpsynctest.Replica {
	t.Helper()
	s, err := schema.Parse([]byte(allTypesSchema))
	if err != nil {
		t.Fatal(err)
	}
	r := httpsynctest.NewReplica(newThingsClient(base, "ada", clientID), s)
	r.Limits.LimitCommits, r.Limits.LimitSnapshotRows, r.Limits.MaxSnapshotPages = 1000, 1000, 4
	r.Subscribe("s", "things", map[string][]string{"project_id": {"p1"}})
	return r
}

// wantConverged checks the replica holds exactly the stored rows.
func wantConverged(t *testing.T, base string, r *httpsynctest.Replica) {
	t.Helper()
	if err := r.SyncUntilIdle(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	var stored []Row
	if code := control(t, "GET", base+"/_test/rows/things", "", &stored); code != http.StatusOK {
		t.Fatalf("rows: %d", code)
	}
	if len(stored) != len(r.Rows["things"]) {
		t.Fatalf("replica holds %d rows, the server %d", len(r.Rows["things"]), len(stored))
	}
	for _, row := range stored {
		got, ok := r.Rows["things"][row.RowID]
		if !ok || got.Version != row.Version {
			t.Fatalf("row %s: replica %+v (present %v), server version %d", row.RowID, got, ok, row.Version)
		}
	}
}

// Row mirrors testcontrol.Row for decoding.
type Row struct {
	RowID   string `json:"rowId"`
	Version int64  `json:"version"`
}

// End to end over HTTP with the control surface: a client offline past
// the horizon gets sync.cursor_expired and converges; a client ahead of a
// restored partition gets resetRequired, bootstraps again and converges.
func TestTestControlPruneAndRestore(t *testing.T) {
	base := startTestControl(t, "--clock-ms", "1700000000000")
	if code := control(t, "PUT", base+"/_test/allowed-scopes/ada", `{"project_id":["*"]}`, nil); code != http.StatusOK {
		t.Fatalf("grant: %d", code)
	}
	w := newThingsClient(base, "ada", "writer")
	push := func(from, to int) {
		for i := from; i < to; i++ {
			if pr := pushThing(t, w, fmt.Sprintf("t%02d", i), "p1", fmt.Sprint("c", i)); pr.Status != ssp2.CommitApplied {
				t.Fatalf("push %d: %+v", i, pr)
			}
		}
	}
	push(0, 10)
	offline := thingsReplica(t, base, "offline")
	ahead := thingsReplica(t, base, "ahead")
	wantConverged(t, base, offline)
	wantConverged(t, base, ahead)

	// The offline client misses 10 commits; the log is pruned past it.
	push(10, 20)
	var h struct {
		HorizonSeq int64 `json:"horizonSeq"`
	}
	if code := control(t, "POST", base+"/_test/prune", `{"activeWindowMs":0,"minRetainedCommits":5}`, &h); code != http.StatusOK || h.HorizonSeq != 15 {
		t.Fatalf("prune: %d %+v, want horizon 15", code, h)
	}
	if code := control(t, "GET", base+"/_test/horizon-seq", "", &h); code != http.StatusOK || h.HorizonSeq != 15 {
		t.Fatalf("horizon-seq: %d %+v", code, h)
	}
	if code, body := get(t, base+"/metrics"); code != http.StatusOK || !promtext.Has([]byte(body), "synclane_retention_horizon_partitions 1") ||
		!promtext.Has([]byte(body), "synclane_retention_horizon_seq_min 15") || !promtext.Has([]byte(body), "synclane_retention_horizon_seq_max 15") ||
		!promtext.Has([]byte(body), "synclane_retention_pruned_commits_total 15") || !promtext.Has([]byte(body), `synclane_retention_passes_total{result="ran"} 0`) {
		t.Fatalf("/metrics after the prune: %d\n%s", code, body)
	}
	if _, err := offline.Pull(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := offline.Subs[0].Status; st != ssp2.SubReset || offline.Subs[0].Cursor != -1 {
		t.Fatalf("offline client's first pull: status %d cursor %d, want reset (sync.cursor_expired) and a re-pull from -1", st, offline.Subs[0].Cursor)
	}
	wantConverged(t, base, offline)
	wantConverged(t, base, ahead) // cursor 10 was pruned too: it resets and converges

	// Capture, write more, restore: a client ahead of the restored log is
	// told to reset and converges on the restored state.
	if code := control(t, "POST", base+"/_test/backup/capture", "", nil); code != http.StatusOK {
		t.Fatalf("capture: %d", code)
	}
	push(20, 25)
	wantConverged(t, base, ahead)
	if len(ahead.Rows["things"]) != 25 {
		t.Fatalf("ahead holds %d rows before the restore", len(ahead.Rows["things"]))
	}
	if code := control(t, "POST", base+"/_test/backup/restore", "", nil); code != http.StatusOK {
		t.Fatalf("restore: %d", code)
	}
	var m struct {
		MaxCommitSeq int64 `json:"maxCommitSeq"`
	}
	if code := control(t, "GET", base+"/_test/max-commit-seq", "", &m); code != http.StatusOK || m.MaxCommitSeq != 20 {
		t.Fatalf("max-commit-seq after restore: %d %+v", code, m)
	}
	_, err := ahead.Client.Pull(context.Background(), ahead.Limits, &ssp2.Subscription{ID: "s", Table: "things",
		Scopes: map[string][]string{"project_id": {"p1"}}, Cursor: ahead.Subs[0].Cursor})
	if !errors.Is(err, httpsync.ErrResetRequired) {
		t.Fatalf("a client ahead of the restored log: %v, want resetRequired", err)
	}
	ahead.Reset()
	wantConverged(t, base, ahead)
	if len(ahead.Rows["things"]) != 20 {
		t.Fatalf("after the restore the client holds %d rows, want the 20 of the backup", len(ahead.Rows["things"]))
	}
	// The writer (its epoch is stale too) re-acquires and writes on top.
	payload, _ := thingsCodec.AppendSparse(nil, ssp2.Row{"t98", "p1", nil, nil, nil, nil, nil, nil, nil}, nil, 0)
	if _, err := w.Push(context.Background(), &ssp2.PushCommit{ClientCommitID: "stale", Operations: []ssp2.Operation{
		{Table: "things", RowID: "t98", Op: ssp2.OpUpsert, Payload: payload}}}); !errors.Is(err, httpsync.ErrResetRequired) {
		t.Fatalf("writer after the restore: %v, want resetRequired", err)
	}
	if pr := pushThing(t, w, "t99", "p1", "after-restore"); pr.Status != ssp2.CommitApplied || *pr.CommitSeq != 21 {
		t.Fatalf("push after restore: %+v", pr)
	}
	wantConverged(t, base, ahead)

	// Bad input.
	if code := control(t, "POST", base+"/_test/prune", `{"minRetainedCommits":-1}`, nil); code != http.StatusBadRequest {
		t.Fatalf("negative limit: %d, want 400", code)
	}
	if code := control(t, "POST", base+"/_test/backup/restore", "", nil); code != http.StatusOK {
		t.Fatalf("second restore of the same capture: %d", code)
	}
	req, _ := http.NewRequest("POST", base+"/_test/backup/restore", nil)
	req.Header.Set("x-partition", "never-captured")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusConflict {
		t.Fatalf("restore without a capture: %d, want 409", res.StatusCode)
	}
}
