package storagetest

import "github.com/synclane/synclane/storage"

// testDeadLetters: RedriveReaction and DeleteDeadReaction act on
// dead-lettered reactions only.
func testDeadLetters(e *env) {
	dl, ok := e.s.(storage.DeadLetters)
	if !ok {
		e.t.Fatalf("%T does not implement storage.DeadLetters", e.s)
	}
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
	if r.State != storage.ReactionPending || r.Attempts != 0 || r.NextAttemptAtMs != 5000 || r.UpdatedAtMs != 5000 || r.LastError != "boom" {
		e.t.Fatalf("redriven reaction %+v", r)
	}
	// The redriven reaction is claimable again, with its attempts counted
	// from 0 (claim order is not part of the contract).
	got := e.claimReactions(5000, 1000, 10)
	if len(got) != 2 {
		e.t.Fatalf("claim after the redrive: %s", reactionNames(got))
	}
	for _, r := range got {
		if r.Name == "a" && r.Attempts != 1 {
			e.t.Fatalf("redriven reaction claimed with attempts %d, want 1", r.Attempts)
		}
	}
}
