package httpsync_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
)

// Randomized convergence (Appendix B scenario 1): several clients with
// small pull limits interleave LWW and baseVersion upserts, deletes and
// pulls over HTTP in a random order; afterwards every replica holds
// exactly the server's rows and versions.
func TestRandomizedConvergence(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprint("memory/seed", seed), func(t *testing.T) { convergeOnce(t, seed, memory.New()) })
	}
	for seed := uint64(6); seed <= 7; seed++ {
		t.Run(fmt.Sprint("sqlite/seed", seed), func(t *testing.T) {
			st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "db"), sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			convergeOnce(t, seed, st)
		})
	}
}

func convergeOnce(t *testing.T, seed uint64, st testStore) {
	ctx := context.Background()
	s := schema.MustDemo()
	eng, err := engine.New(ctx, engine.Config{Schema: s, Backend: st.Backend(), Resolver: engine.AllowAll(s)})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	srv := httptest.NewServer(httpsync.NewMux(eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{}}}))
	defer srv.Close()

	rng := rand.New(rand.NewPCG(seed, 99))
	const clients = 4
	reps := make([]*httpsynctest.Replica, clients)
	for i := range reps {
		c := &httpsync.Client{URL: srv.URL + "/sync", ClientID: fmt.Sprintf("c%d", i), Header: http.Header{"X-Actor": {fmt.Sprintf("a%d", i)}}}
		reps[i] = httpsynctest.NewReplica(c, s)
		reps[i].Limits = ssp2.PullHeader{Accept: ssp2.AcceptInlineRows, LimitCommits: int32(1 + rng.IntN(5)), LimitSnapshotRows: int32(1 + rng.IntN(7)), MaxSnapshotPages: 1}
		reps[i].Subscribe("todos", "todos", map[string][]string{"list_id": {"L"}})
	}
	ids := []string{"a", "b", "c", "d", "e", "f"}
	for step := range 300 {
		r := reps[rng.IntN(clients)]
		switch rng.IntN(4) {
		case 0: // pull a round
			if _, err := r.Pull(ctx); err != nil {
				t.Fatalf("step %d pull: %v", step, err)
			}
		default: // push one commit of 1-3 ops
			var ops []ssp2.Operation
			for range 1 + rng.IntN(3) {
				id := ids[rng.IntN(len(ids))]
				if rng.IntN(4) == 0 {
					ops = append(ops, ssp2.Operation{Table: "todos", RowID: id, Op: ssp2.OpDelete})
					continue
				}
				payload, _ := codec.Append(nil, ssp2.Row{id, "L", fmt.Sprintf("s%d", step), rng.IntN(2) == 0, int64(step), int64(step)})
				op := ssp2.Operation{Table: "todos", RowID: id, Op: ssp2.OpUpsert, Payload: payload}
				if known, ok := r.Rows["todos"][id]; ok && rng.IntN(2) == 0 {
					v := known.Version // optimistic: may conflict, that is fine
					op.BaseVersion = &v
				}
				ops = append(ops, op)
			}
			res, err := r.Client.Push(ctx, &ssp2.PushCommit{ClientCommitID: fmt.Sprintf("s%d", step), Operations: ops})
			if err != nil {
				t.Fatalf("step %d push: %v", step, err)
			}
			if res[0].Status == ssp2.CommitRejected && res[0].Results[0].Code != "sync.version_conflict" && res[0].Results[0].Code != "sync.row_missing" {
				t.Fatalf("step %d: unexpected rejection %+v", step, res[0].Results[0])
			}
		}
	}
	server, err := st.Backend().Rows.ScanRows(ctx, "default", storage.RowQuery{Table: s.Table("todos"), Scopes: map[string][]string{}, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reps {
		if err := r.SyncUntilIdle(ctx, 200); err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
		if len(r.Rows["todos"]) != len(server) {
			t.Fatalf("replica %d has %d rows, server %d", i, len(r.Rows["todos"]), len(server))
		}
		for _, sr := range server {
			got, ok := r.Rows["todos"][sr.RowID]
			if !ok || got.Version != sr.Version || fmt.Sprint(got.Values) != fmt.Sprint(sr.Values) {
				t.Fatalf("replica %d row %s = %+v, server %+v", i, sr.RowID, got, sr)
			}
		}
	}
}
