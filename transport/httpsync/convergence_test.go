package httpsync_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
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
// small pull limits interleave whole-row and sparse upserts (last write
// wins, baseVersion 0 recreations, versioned patches), deletes and pulls
// over HTTP in a random order; every refusal is one wire version 3's rules
// give that kind of operation (SPEC §6.2), and afterwards every replica
// holds exactly the server's rows and versions.
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
	appliedKinds, refusals := map[opKind]int{}, map[string]int{}
	for step := range 300 {
		r := reps[rng.IntN(clients)]
		switch rng.IntN(4) {
		case 0: // pull a round
			if _, err := r.Pull(ctx); err != nil {
				t.Fatalf("step %d pull: %v", step, err)
			}
		default: // push one commit of 1-3 ops
			var ops []ssp2.Operation
			var kinds []opKind
			var scopedOps []bool
			for range 1 + rng.IntN(3) {
				id := ids[rng.IntN(len(ids))]
				row := ssp2.Row{id, "L", fmt.Sprintf("s%d", step), rng.IntN(2) == 0, int64(step), int64(step)}
				op := ssp2.Operation{Table: "todos", RowID: id, Op: ssp2.OpUpsert}
				var kind opKind
				scoped := true
				switch k := rng.IntN(8); {
				case k < 2:
					op, kind = ssp2.Operation{Table: "todos", RowID: id, Op: ssp2.OpDelete}, opDelete
				case k < 4: // a whole row, last write wins
					op.Payload, kind = fullTodo(t, row), opFull
				case k == 4: // a whole row meant as a (re)creation
					zero := int64(0)
					op.Payload, op.BaseVersion, kind = fullTodo(t, row), &zero, opCreate
				default: // a sparse patch of some columns, maybe versioned
					present := ssp2.NewColumnSet(len(row))
					present.Add(0)
					for c := 1; c < len(row); c++ { // list_id (the scope, never changed) too, sometimes
						if rng.IntN(2) == 0 {
							present.Add(c)
						}
					}
					present.Add(2 + rng.IntN(len(row)-2)) // at least one column besides the key
					var err error
					if op.Payload, err = codec.AppendSparse(nil, row, present, 0); err != nil {
						t.Fatal(err)
					}
					kind = opPatch
					scoped = present.Has(1)
					if known, ok := r.Rows["todos"][id]; ok && rng.IntN(2) == 0 {
						v := known.Version // optimistic: may conflict, that is fine
						op.BaseVersion, kind = &v, opVersioned
					}
				}
				ops = append(ops, op)
				kinds = append(kinds, kind)
				scopedOps = append(scopedOps, scoped)
			}
			res, err := r.Client.Push(ctx, &ssp2.PushCommit{ClientCommitID: fmt.Sprintf("s%d", step), Operations: ops})
			if err != nil {
				t.Fatalf("step %d push: %v", step, err)
			}
			if res[0].Status == ssp2.CommitApplied {
				for _, k := range kinds {
					appliedKinds[k]++
				}
			}
			if res[0].Status == ssp2.CommitRejected {
				rej := res[0].Results[0]
				refusals[rej.Code]++
				if !kinds[rej.OpIndex].mayRefuse(rej, scopedOps[rej.OpIndex]) {
					t.Fatalf("step %d: op %d (%s) refused with %+v, which v3's rules (SPEC §6.2) never answer it", step, rej.OpIndex, kinds[rej.OpIndex], rej)
				}
			}
		}
	}
	t.Logf("applied operations by kind %v, refusals by code %v", appliedKinds, refusals)
	if appliedKinds[opPatch]+appliedKinds[opVersioned] == 0 {
		t.Fatalf("the run applied no sparse patch: the seed exercises too little")
	}
	if refusals["sync.row_deleted"] == 0 {
		t.Errorf("%d deletes applied, yet no upsert met a tombstone (sync.row_deleted): does the backend record them (SPEC §2.2)?", appliedKinds[opDelete])
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

// opKind is the shape of one randomized operation.
type opKind int

const (
	opDelete    opKind = iota
	opFull             // every column, no baseVersion
	opCreate           // every column, baseVersion 0
	opPatch            // some columns, no baseVersion
	opVersioned        // some columns, baseVersion of the replica's copy
)

func (k opKind) String() string {
	return [...]string{"delete", "whole row", "whole row at baseVersion 0", "patch", "versioned patch"}[k]
}

// mayRefuse reports whether v3's rules (SPEC §6.2) may refuse an operation
// of kind k with r, the scope column never changing: a delete never fails;
// a whole row without baseVersion only when a live tombstone says the row
// was deleted; baseVersion 0 only when the row exists (a lost insert
// race); a patch without baseVersion when the row is absent (deleted, or
// never there: a partial payload cannot insert); a versioned patch on a
// conflict, an absent row, or a row recreated below the version the
// replica knew. scoped says whether the payload presents the scope
// column: a versioned patch of an absent row is authorized as an insert
// before it is answered sync.row_missing (so absence is not disclosed), and
// a payload without the scope column cannot be (sync.forbidden).
func (k opKind) mayRefuse(r ssp2.OpResult, scoped bool) bool {
	switch k {
	case opFull:
		return r.Code == "sync.row_deleted"
	case opCreate:
		return r.Code == "sync.version_conflict"
	case opPatch:
		return r.Code == "sync.row_deleted" || r.Code == "sync.row_missing"
	case opVersioned:
		return r.Code == "sync.version_conflict" || r.Code == "sync.row_missing" || !scoped && r.Code == "sync.forbidden" ||
			r.Code == "sync.invalid_request" && strings.Contains(r.Message, "exceeds the row's server_version")
	}
	return false
}

func fullTodo(t *testing.T, row ssp2.Row) []byte {
	t.Helper()
	b, err := codec.AppendSparse(nil, row, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
