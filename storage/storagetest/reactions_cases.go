package storagetest

import (
	"errors"
	"fmt"
	"sync"

	"github.com/synclane/synclane/storage"
)

// reactions returns the backend's Reactions role (the Reactions cases
// run only on a backend that has it).
func (e *env) reactions() storage.Reactions { return e.b.Reactions }

// putReactions stores rs in tx (storage.ReactionTx).
func (e *env) putReactions(tx storage.PushTx, rs ...storage.NewReaction) error {
	e.t.Helper()
	return tx.PutReactions(e.ctx, rs)
}

func reaction(name string, seq int64) storage.NewReaction {
	return storage.NewReaction{Name: name, Payload: []byte("payload-" + name), MaxAttempts: 3, CommitSeq: seq, CreatedAtMs: 1000}
}

func (e *env) listReactions(f storage.ReactionFilter) []storage.Reaction {
	e.t.Helper()
	rs, err := e.reactions().ListReactions(e.ctx, f)
	if err != nil {
		e.t.Fatalf("ListReactions: %v", err)
	}
	return rs
}

func reactionNames(rs []storage.Reaction) string {
	s := ""
	for i, r := range rs {
		if i > 0 {
			s += ","
		}
		s += r.Name
	}
	return s
}

func (e *env) claimReactions(nowMs, leaseMs int64, limit int) []storage.Reaction {
	e.t.Helper()
	rs, err := e.reactions().ClaimReactions(e.ctx, nowMs, leaseMs, limit)
	if err != nil {
		e.t.Fatalf("ClaimReactions: %v", err)
	}
	return rs
}

var reactionTests = []test{
	{name: "DeadLetterActions", fn: testDeadLetters},
	{name: "SpentLeasesDeadLetter", fn: testSpentLeases},
	{name: "ReleaseGivesBackAClaim", fn: testReleaseReactions},
	{name: "StoredWithTheCommitOnly", fn: func(e *env) {
		// Rolled back with the transaction.
		tx := e.begin("p")
		if err := e.putReactions(tx, reaction("gone", 1)); err != nil {
			e.t.Fatal(err)
		}
		if err := tx.Rollback(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		// Rolled back with the savepoint; the kept one survives.
		e.push("p", func(tx storage.PushTx) {
			if err := tx.Savepoint(e.ctx); err != nil {
				e.t.Fatal(err)
			}
			e.put(tx, e.items, 1, item("x", "p1", 1))
			if err := e.putReactions(tx, reaction("undone", 1)); err != nil {
				e.t.Fatal(err)
			}
			if err := tx.RollbackToSavepoint(e.ctx); err != nil {
				e.t.Fatal(err)
			}
			if err := tx.ReleaseSavepoint(e.ctx); err != nil {
				e.t.Fatal(err)
			}
			if err := e.putReactions(tx, reaction("kept-a", 1), reaction("kept-b", 1)); err != nil {
				e.t.Fatal(err)
			}
		})
		all := e.listReactions(storage.ReactionFilter{})
		if got := reactionNames(all); got != "kept-a,kept-b" {
			e.t.Fatalf("stored reactions = %s, want kept-a,kept-b", got)
		}
		r := all[0]
		if r.Partition != "p" || r.CommitSeq != 1 || string(r.Payload) != "payload-kept-a" || r.MaxAttempts != 3 || r.Attempts != 0 ||
			r.State != storage.ReactionPending || r.NextAttemptAtMs != 1000 || r.CreatedAtMs != 1000 || r.ID <= 0 || all[1].ID <= r.ID {
			e.t.Fatalf("stored reaction = %+v", r)
		}
		if got := e.listReactions(storage.ReactionFilter{Partition: "other"}); len(got) != 0 {
			e.t.Fatalf("partition filter matched %d", len(got))
		}
		if got := e.listReactions(storage.ReactionFilter{AfterID: r.ID, Limit: 5}); reactionNames(got) != "kept-b" {
			e.t.Fatalf("paging after the first = %s", reactionNames(got))
		}
	}},
	{name: "InvalidRefused", fn: func(e *env) {
		many := make([]storage.NewReaction, storage.MaxReactionsPerCommit+1)
		for i := range many {
			many[i] = reaction(fmt.Sprint("r", i), 1)
		}
		for _, tc := range []struct {
			name string
			rs   []storage.NewReaction
		}{
			{"TooMany", many},
			{"NoName", []storage.NewReaction{{MaxAttempts: 1}}},
			{"ZeroAttempts", []storage.NewReaction{{Name: "x", MaxAttempts: 0}}},
			{"TooManyAttempts", []storage.NewReaction{{Name: "x", MaxAttempts: 101}}},
			{"BigPayload", []storage.NewReaction{{Name: "x", MaxAttempts: 1, Payload: make([]byte, storage.MaxReactionPayloadBytes+1)}}},
		} {
			tx := e.begin("p")
			if err := e.putReactions(tx, tc.rs...); !errors.Is(err, storage.ErrReactionInvalid) {
				e.t.Errorf("%s: PutReactions = %v, want ErrReactionInvalid", tc.name, err)
			}
			if err := tx.Rollback(e.ctx); err != nil {
				e.t.Fatal(err)
			}
		}
	}},
	{name: "ClaimLeaseCompleteFail", fn: func(e *env) {
		e.push("p", func(tx storage.PushTx) {
			if err := e.putReactions(tx, reaction("a", 1), reaction("b", 1), reaction("c", 1)); err != nil {
				e.t.Fatal(err)
			}
		})
		q := e.reactions()
		if got := e.claimReactions(999, 100, 10); len(got) != 0 {
			e.t.Fatalf("claimed %d before they were due", len(got))
		}
		got := e.claimReactions(1000, 100, 2)
		if reactionNames(got) != "a,b" || got[0].Attempts != 1 || got[0].NextAttemptAtMs != 1100 {
			e.t.Fatalf("first claim = %+v", got)
		}
		// Under the lease they are not claimed again; c is.
		if again := e.claimReactions(1050, 100, 10); reactionNames(again) != "c" {
			e.t.Fatalf("claim under lease = %s, want c", reactionNames(again))
		}
		a, b := got[0], got[1]
		// a's lease runs out: it is claimed again (attempt 2), and the
		// stale attempt 1 can no longer complete it.
		re := e.claimReactions(1100, 100, 1)
		if len(re) != 1 || re[0].ID != a.ID || re[0].Attempts != 2 {
			e.t.Fatalf("re-claim after the lease = %+v", re)
		}
		if n, err := q.CompleteReactions(e.ctx, []storage.ReactionClaim{{ID: a.ID, Attempt: 1}}); err != nil || n != 0 {
			e.t.Fatalf("stale complete = %d, %v; want 0", n, err)
		}
		if n, err := q.CompleteReactions(e.ctx, []storage.ReactionClaim{{ID: a.ID, Attempt: 1}, {ID: a.ID, Attempt: 2}, {ID: 1 << 50, Attempt: 1}}); err != nil || n != 1 {
			e.t.Fatalf("complete = %d, %v; want 1 (only the current claim)", n, err)
		}
		// b fails once (retry at 5000), then is dead-lettered.
		if ok, err := q.FailReaction(e.ctx, b.ID, 1, "smtp down", 5000, false, 1100); err != nil || !ok {
			e.t.Fatalf("fail = %v, %v", ok, err)
		}
		if got := e.claimReactions(4999, 100, 10); reactionNames(got) != "c" {
			e.t.Fatalf("claim before the retry = %s, want only c (its lease ran out)", reactionNames(got))
		}
		rb := e.claimReactions(5000, 100, 10)
		if len(rb) != 1 || rb[0].ID != b.ID || rb[0].Attempts != 2 || rb[0].LastError != "smtp down" {
			e.t.Fatalf("retry claim = %+v", rb)
		}
		if ok, err := q.FailReaction(e.ctx, b.ID, 2, "still down", 0, true, 5001); err != nil || !ok {
			e.t.Fatalf("dead-letter = %v, %v", ok, err)
		}
		if got := e.claimReactions(1<<40, 100, 10); reactionNames(got) != "c" {
			e.t.Fatalf("claim after dead-letter = %s, want only c", reactionNames(got))
		}
		dead := storage.ReactionDead
		ds := e.listReactions(storage.ReactionFilter{State: &dead})
		if len(ds) != 1 || ds[0].ID != b.ID || ds[0].LastError != "still down" || ds[0].Attempts != 2 || ds[0].UpdatedAtMs != 5001 {
			e.t.Fatalf("dead letters = %+v", ds)
		}
		c, err := q.CountReactions(e.ctx)
		if err != nil || c != (storage.ReactionCounts{Pending: 1, Dead: 1}) {
			e.t.Fatalf("counts = %+v, %v", c, err)
		}
	}},
	{name: "ConcurrentClaimsAreDisjoint", fn: func(e *env) {
		const n = 60
		e.push("p", func(tx storage.PushTx) {
			rs := make([]storage.NewReaction, n)
			for i := range rs {
				rs[i] = reaction(fmt.Sprint("r", i), 1)
			}
			if err := e.putReactions(tx, rs...); err != nil {
				e.t.Fatal(err)
			}
		})
		var mu sync.Mutex
		seen := map[int64]int{}
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					rs, err := e.reactions().ClaimReactions(e.ctx, 2000, 1_000_000, 7)
					if err != nil {
						e.t.Error(err)
						return
					}
					if len(rs) == 0 {
						return
					}
					mu.Lock()
					for _, r := range rs {
						seen[r.ID]++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(seen) != n {
			e.t.Fatalf("claimed %d distinct reactions, want %d", len(seen), n)
		}
		for id, k := range seen {
			if k != 1 {
				e.t.Fatalf("reaction %d claimed %d times under one lease", id, k)
			}
		}
	}},
}

// testReleaseReactions: a released claim does not count as an attempt and
// is due again at once; a release of a claim that is no longer current
// changes nothing.
func testReleaseReactions(e *env) {
	e.push("p", func(tx storage.PushTx) {
		if err := e.putReactions(tx, reaction("r", 1)); err != nil {
			e.t.Fatal(err)
		}
	})
	got := e.claimReactions(1000, 1000, 10)
	if len(got) != 1 || got[0].Attempts != 1 {
		e.t.Fatalf("claim: %+v", got)
	}
	stale := []storage.ReactionClaim{{ID: got[0].ID, Attempt: 2}}
	if n, err := e.reactions().ReleaseReactions(e.ctx, stale, 1100); err != nil || n != 0 {
		e.t.Fatalf("release of a claim that is not current = %d, %v; want 0", n, err)
	}
	claim := []storage.ReactionClaim{{ID: got[0].ID, Attempt: 1}}
	if n, err := e.reactions().ReleaseReactions(e.ctx, claim, 1100); err != nil || n != 1 {
		e.t.Fatalf("release = %d, %v; want 1", n, err)
	}
	r := e.listReactions(storage.ReactionFilter{})[0]
	if r.State != storage.ReactionPending || r.Attempts != 0 || r.NextAttemptAtMs != 1100 {
		e.t.Fatalf("released reaction %+v; want pending, attempts 0, due at 1100", r)
	}
	if again := e.claimReactions(1100, 1000, 10); len(again) != 1 || again[0].Attempts != 1 {
		e.t.Fatalf("claim after the release: %+v", again)
	}
}
