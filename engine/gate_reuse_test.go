package engine_test

import (
	"path/filepath"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// pullReads runs one pull of a's project P and returns its error and the
// gate reads it made outside push transactions.
func pullReads(cs *countingStore, a *client) (int64, error) {
	reads := cs.gateReads.Load()
	_, err := a.sync(&ssp2.PullHeader{Accept: 1}, sub("s", 0, "P"))
	return cs.gateReads.Load() - reads, err
}

// A pull after a verified reply (a push group's, another pull's) is built
// under the gate that verify read: one gate read per pull, its own verify.
func TestPullOpensUnderLastVerifiedGate(t *testing.T) {
	cs := &countingStore{Store: openShared(t, filepath.Join(t.TempDir(), "db.sqlite"))}
	f := newFixture(t, cs)
	a := f.client("alice", "ca")
	if pr := a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "x"), nil)); pr.Status != ssp2.CommitApplied {
		t.Fatalf("push: %+v", pr)
	}
	for i := range 3 {
		n, err := pullReads(cs, a)
		if err != nil {
			t.Fatalf("pull %d: %v", i, err)
		}
		if n != 1 {
			t.Fatalf("pull %d: %d gate reads, want 1 (its verify; the gate was opened by the previous verify)", i, n)
		}
	}
}

// A gate that closed since the last verify refuses the next pull exactly
// as a fresh read does: the reply built under the old token is dropped
// and the request served again under a fresh read, which refuses; while
// it stays closed every pull reads it afresh; once it opens the pulls are
// served, and the next one reuses the verify again.
func TestPullUnderClosedGateRefusedAsFresh(t *testing.T) {
	cs := &countingStore{Store: openShared(t, filepath.Join(t.TempDir(), "db.sqlite"))}
	f := newFixture(t, cs)
	a := f.client("alice", "ca")
	a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "x"), nil))
	if _, err := pullReads(cs, a); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		gate    func(storage.ServeGate) storage.ServeGate
		details string
	}{
		{"pending checkpoint of another process", func(g storage.ServeGate) storage.ServeGate {
			g.Pending = append(g.Pending, storage.CheckpointRef{Partition: "p1", Name: "other"})
			return g
		}, `{"partition":"p1","projection":"other"}`},
		{"newer stored schema", func(g storage.ServeGate) storage.ServeGate {
			g.StoredSchemaVersion = 9
			return g
		}, `{"runningSchemaVersion":1,"storedSchemaVersion":9}`},
		{"rotated log epoch", func(g storage.ServeGate) storage.ServeGate {
			g.LogEpoch = "rotated"
			return g
		}, `{"logEpochChanged":true}`},
	} {
		cs.gate = c.gate
		n, err := pullReads(cs, a)
		wantNotReady(t, err, c.details)
		if n != 2 {
			t.Fatalf("%s: %d gate reads, want 2 (the verify under the reused token, then the fresh read)", c.name, n)
		}
		if n, err = pullReads(cs, a); n > 2 {
			t.Fatalf("%s, still closed: %d gate reads, want at most 2", c.name, n)
		}
		wantNotReady(t, err, c.details)
		cs.gate = nil
		if n, err = pullReads(cs, a); err != nil || n != 2 {
			t.Fatalf("%s, open again: %v, %d gate reads (want served, 2: open and verify)", c.name, err, n)
		}
		if n, err = pullReads(cs, a); err != nil || n != 1 {
			t.Fatalf("%s, next pull: %v, %d gate reads (want served, 1)", c.name, err, n)
		}
	}
}
