package engine_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// Config.IdempotencyFault (the test-control fault) answers exactly the
// next authoritative idempotency read as unreadable, on every backend
// (PostgreSQL answers it from its batched prefetch): the commit is
// rejected with the retryable sync.idempotency_cache_miss, nothing is
// persisted for it, and the retry gets the real outcome.
func TestIdempotencyFaultAnswersOneCacheMiss(t *testing.T) {
	for name, open := range hookStores(t) {
		t.Run(name, func(t *testing.T) {
			var armed atomic.Bool
			var calls atomic.Int32
			f := newFixture(t, open(t), func(c *engine.Config) {
				c.IdempotencyFault = func() bool { calls.Add(1); return armed.CompareAndSwap(true, false) }
			})
			a := f.client("alice", "ca")
			miss := func(pr *ssp2.PushResult) bool {
				return pr.Status == ssp2.CommitRejected && pr.CommitSeq == nil && len(pr.Results) == 1 &&
					pr.Results[0].Code == string(syncerr.IdempotencyCacheMiss) && pr.Results[0].Retryable && pr.Results[0].OpIndex == 0
			}
			if pr := a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "one"), nil)); pr.Status != ssp2.CommitApplied {
				t.Fatalf("first push: %+v", pr)
			}
			// A replay of an applied commit, faulted.
			armed.Store(true)
			if pr := a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "one"), nil)); !miss(pr) {
				t.Fatalf("faulted replay: %+v", pr)
			}
			if pr := a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "one"), nil)); pr.Status != ssp2.CommitCached || *pr.CommitSeq != 1 {
				t.Fatalf("replay after the fault: %+v", pr)
			}
			// A new commit, faulted: not applied, not recorded; in the same
			// request the next commit's read is not faulted.
			armed.Store(true)
			rep, err := a.sync(
				&ssp2.PushCommit{ClientCommitID: "c2", Operations: []ssp2.Operation{upsert("tasks", "t2", f.row("t2", "P", "two"), nil)}},
				&ssp2.PushCommit{ClientCommitID: "c3", Operations: []ssp2.Operation{upsert("tasks", "t3", f.row("t3", "P", "three"), nil)}})
			if err != nil {
				t.Fatal(err)
			}
			rs := results(rep)
			if len(rs) != 2 || !miss(rs[0]) || rs[1].Status != ssp2.CommitApplied || *rs[1].CommitSeq != 2 {
				t.Fatalf("faulted new commit and its neighbour: %+v", rs)
			}
			rows, err := f.store.Rows.ScanRows(context.Background(), "p1", storage.RowQuery{Table: f.schema.Table("tasks"), Scopes: map[string][]string{}, Limit: 10})
			if err != nil || len(rows) != 2 || rows[0].RowID != "t1" || rows[1].RowID != "t3" {
				t.Fatalf("rows after the faulted commit: %+v, %v (want t1 and t3)", rows, err)
			}
			if pr := a.push("c2", upsert("tasks", "t2", f.row("t2", "P", "two"), nil)); pr.Status != ssp2.CommitApplied || *pr.CommitSeq != 3 {
				t.Fatalf("retry of the faulted commit: %+v", pr)
			}
			if n := calls.Load(); n != 6 {
				t.Fatalf("the hook was asked %d times, want once per idempotency read (6)", n)
			}
		})
	}
}
