package engine_test

import (
	"fmt"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
)

// TestHostNotificationPanicsAreContained: a host OnCommit and
// OnRegistration that panic on every call neither fail the requests they
// report on nor stop the partition's actor, however often they fire; the
// commits are applied and the partition keeps its own log.
func TestHostNotificationPanicsAreContained(t *testing.T) {
	f := newFixture(t, memory.New(), func(c *engine.Config) {
		c.OnCommit = func(string, int64) { panic("host OnCommit bug") }
		c.OnRegistration = func(string, partition.Registration) { panic("host OnRegistration bug") }
	})
	c := f.client("ada", "c-ada")
	for i := range 15 { // more than protoactor's default 10 restarts in 10 s
		id := fmt.Sprintf("t%d", i)
		if pr := c.push(fmt.Sprintf("k%d", i), upsert("tasks", id, f.row(id, "P", "x"), nil)); pr.Status != ssp2.CommitApplied || pr.CommitSeq == nil || *pr.CommitSeq != int64(i+1) {
			t.Fatalf("push %d under a panicking OnCommit: %+v", i, pr)
		}
	}
	other := f.client("bob", "c-bob") // a client of the same partition, same epoch
	if *other.epoch != *c.epoch {
		t.Fatalf("partition epoch changed under the panics: %s then %s", *c.epoch, *other.epoch)
	}
	if pr := other.push("b1", upsert("tasks", "b", f.row("b", "P", "y"), nil)); pr.Status != ssp2.CommitApplied || pr.CommitSeq == nil || *pr.CommitSeq != 16 {
		t.Fatalf("push after the panics: %+v", pr)
	}
}
