package storagetest

import "github.com/synclane/synclane/storage"

// testDeadLetters: RedriveReaction and DeleteDeadReaction act on
// dead-lettered reactions only.
func testDeadLetters(e *env) {
	dl := e.reactions()
	e.push("p", func(tx storage.PushTx) {
		if err := e.putReactions(tx, reaction("a", 1), reaction("b", 1), reaction("c", 1)); err != nil {
			e.t.Fatal(err)
		}
	})
	claimed := e.claimReactions(2000, 1000, 2) // a and b
	if reactionNames(claimed) != "a,b" {
		e.t.Fatalf("claimed %s", reactionNames(claimed))
	}
	for _, r := range claimed {
		if ok, err := e.reactions().FailReaction(e.ctx, r.ID, r.Attempts, "boom", 0, true, 2100); err != nil || !ok {
			e.t.Fatalf("FailReaction(%s) = %v, %v", r.Name, ok, err)
		}
	}
	a, b := claimed[0].ID, claimed[1].ID
	c := e.listReactions(storage.ReactionFilter{AfterID: b})[0].ID
	cases := []struct {
		name string
		call func() (bool, error)
		want bool
	}{
		{"redrive a pending reaction", func() (bool, error) { return dl.RedriveReaction(e.ctx, c, 5000) }, false},
		{"redrive an unknown id", func() (bool, error) { return dl.RedriveReaction(e.ctx, c+100, 5000) }, false},
		{"redrive a dead letter", func() (bool, error) { return dl.RedriveReaction(e.ctx, a, 5000) }, true},
		{"redrive it again", func() (bool, error) { return dl.RedriveReaction(e.ctx, a, 5000) }, false},
		{"delete a pending reaction", func() (bool, error) { return dl.DeleteDeadReaction(e.ctx, c) }, false},
		{"delete the redriven one", func() (bool, error) { return dl.DeleteDeadReaction(e.ctx, a) }, false},
		{"delete a dead letter", func() (bool, error) { return dl.DeleteDeadReaction(e.ctx, b) }, true},
		{"delete it again", func() (bool, error) { return dl.DeleteDeadReaction(e.ctx, b) }, false},
	}
	for _, tc := range cases {
		if got, err := tc.call(); err != nil || got != tc.want {
			e.t.Errorf("%s = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	all := e.listReactions(storage.ReactionFilter{})
	if reactionNames(all) != "a,c" {
		e.t.Fatalf("after the actions: %s, want a,c", reactionNames(all))
	}
	r := all[0]
	if r.State != storage.ReactionPending || r.Attempts != 1 || r.MaxAttempts != 1+3 || r.NextAttemptAtMs != 5000 || r.UpdatedAtMs != 5000 || r.LastError != "boom" {
		e.t.Fatalf("redriven reaction %+v; want pending, attempts kept (1), MaxAttempts 3 more (4)", r)
	}
	// The redriven reaction is claimable again; its attempt number goes on
	// from where it was (claim order is not part of the contract).
	got := e.claimReactions(5000, 1000, 10)
	if len(got) != 2 {
		e.t.Fatalf("claim after the redrive: %s", reactionNames(got))
	}
	for _, r := range got {
		if r.Name == "a" && r.Attempts != 2 {
			e.t.Fatalf("redriven reaction claimed with attempts %d, want 2", r.Attempts)
		}
	}
	// A late outcome of a claim from before the dead letter (attempt 1)
	// does not match the new claim (attempt 2).
	if ok, err := e.reactions().FailReaction(e.ctx, a, 1, "a stale outcome", 0, true, 5100); err != nil || ok {
		e.t.Fatalf("a stale outcome after the redrive = %v, %v; want refused", ok, err)
	}
	if r := e.listReactions(storage.ReactionFilter{})[0]; r.State != storage.ReactionPending || r.LastError != "boom" {
		e.t.Fatalf("the stale outcome changed the redriven reaction: %+v", r)
	}
}

// testSpentLeases: a reaction whose last attempt's lease ran out without
// an outcome (its worker died) is dead-lettered at the next claim, never
// handed out beyond its MaxAttempts.
func testSpentLeases(e *env) {
	e.push("p", func(tx storage.PushTx) {
		poison := reaction("poison", 1)
		poison.MaxAttempts = 2
		if err := e.putReactions(tx, poison); err != nil {
			e.t.Fatal(err)
		}
	})
	now := int64(1000)
	for attempt := 1; attempt <= 2; attempt++ { // two claims, no outcome recorded
		got := e.claimReactions(now, 1000, 10)
		if len(got) != 1 || got[0].Attempts != attempt {
			e.t.Fatalf("claim %d: %+v", attempt, got)
		}
		now += 1001
	}
	if got := e.claimReactions(now, 1000, 10); len(got) != 0 {
		e.t.Fatalf("a reaction claimed beyond its MaxAttempts: %+v", got)
	}
	r := e.listReactions(storage.ReactionFilter{})[0]
	if r.State != storage.ReactionDead || r.LastError != storage.LeaseExpiredError || r.Attempts != 2 {
		e.t.Fatalf("after its last lease ran out: %+v; want dead-lettered with the lease error", r)
	}
}
