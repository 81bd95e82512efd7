package partition

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
)

// TestPinMemoMatchesStorage: a scope pin remembered at one max seq and
// brought forward through the log tail to a later one is the answer
// storage's LatestScopeCommit gives at that later seq, for random commits
// (changes of two tables in three scope values, some commits with none)
// and random value lists; without the tail covering the window, or under
// another log epoch, or for a seq below the remembered one, the memo does
// not answer.
func TestPinMemoMatchesStorage(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	if err := st.EnsureSchema(ctx, schema.MustDemo()); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	lists := []string{"a", "b", "c"}
	var tail logTail
	var memo pinMemo
	query := func(vals []string, upTo int64) storage.ScopeCommitQuery {
		return storage.ScopeCommitQuery{Table: "todos", Var: "list_id", Values: vals, UpToSeq: upTo}
	}
	valueSets := [][]string{{"a"}, {"b"}, {"a", "c"}, {"c", "b", "a"}}
	for seq := int64(1); seq <= 400; seq++ {
		tx, err := st.BeginPush(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		var changes []storage.ChangeRecord
		for range rng.IntN(3) {
			table := []string{"todos", "lists"}[rng.IntN(2)]
			changes = append(changes, storage.ChangeRecord{Table: table, RowID: fmt.Sprint(rng.IntN(50)), Op: ssp2.OpDelete,
				Scopes: map[string]string{"list_id": lists[rng.IntN(3)]}})
		}
		c := storage.CommitRecord{Seq: seq, ActorID: "x", ClientID: "c", ClientCommitID: fmt.Sprint(seq), Changes: changes}
		if err := tx.AppendCommit(ctx, c); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		tail.append(c)
		vals := valueSets[rng.IntN(len(valueSets))]
		q := query(vals, seq)
		want, err := st.LatestScopeCommit(ctx, "p", q)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := memo.get(q, "e1", &tail); ok && got != want {
			t.Fatalf("seq %d values %v: memo %d, storage %d", seq, vals, got, want)
		} else if !ok && seq > 10 && rng.IntN(2) == 0 {
			// Remembered once, every later query of these values is
			// answered from memory (the tail holds every commit).
			if _, seen := memo.m[pinKey(q)]; seen {
				t.Fatalf("seq %d values %v: remembered but not answered", seq, vals)
			}
		}
		memo.put(q, "e1", want)
	}
	q := query([]string{"a"}, 400)
	want, err := st.LatestScopeCommit(ctx, "p", q)
	if err != nil {
		t.Fatal(err)
	}
	memo.put(q, "e1", want)
	if _, ok := memo.get(q, "e2", &tail); ok {
		t.Fatal("answered under another log epoch")
	}
	if _, ok := memo.get(query([]string{"a"}, 399), "e1", &tail); ok {
		t.Fatal("answered below the seq it was remembered at")
	}
	memo.put(query([]string{"b"}, 390), "e1", 1)
	tail.append(storage.CommitRecord{Seq: 405}) // a gap: the tail restarts
	if _, ok := memo.get(query([]string{"b"}, 405), "e1", &tail); ok {
		t.Fatal("answered across a window the tail does not hold")
	}
}
