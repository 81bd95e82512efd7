package engine_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
)

func withRing(ring *events.Ring, slow time.Duration) func(*engine.Config) {
	return func(c *engine.Config) { c.Events, c.SlowRequest = ring, slow }
}

func kinds(evs []events.Event) []events.Kind {
	var out []events.Kind
	for _, e := range evs {
		out = append(out, e.Kind)
	}
	return out
}

func TestEngineEmitsEvents(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, ring *events.Ring)
		want events.Event // Kind, Partition, Actor, Code compared; Message must contain want.Message
	}{
		{"rejected commit says why", func(t *testing.T, ring *events.Ring) {
			f := newFixture(t, memory.New(), withRing(ring, -1))
			a := f.client("alice", "ca")
			if pr := a.push("bad", upsert("nope", "x", f.row("x", "P", "x"), nil)); pr.Status != ssp2.CommitRejected {
				t.Fatalf("push not rejected: %+v", pr)
			}
		}, events.Event{Kind: events.PushRejected, Partition: "p1", Actor: "alice", Code: "sync.unknown_table", Message: "commit bad rejected: operation 0"}},
		{"request refused", func(t *testing.T, ring *events.Ring) {
			f := newFixture(t, memory.New(), withRing(ring, -1))
			if _, err := f.eng.Sync(context.Background(), engine.Identity{ActorID: "bob", Partition: "p1"}, nil); err == nil {
				t.Fatal("a request without a message was served")
			}
		}, events.Event{Kind: events.RequestFailed, Partition: "p1", Actor: "bob", Code: "sync.invalid_request", Message: "not an SSP2 request"}},
		{"gate refusal", func(t *testing.T, ring *events.Ring) {
			path := filepath.Join(t.TempDir(), "db.sqlite")
			decl := storage.CheckpointDeclaration{Partition: "p1", Name: "proj", SchemaVersion: 1}
			newFixture(t, openShared(t, path), func(c *engine.Config) { c.Checkpoints = []storage.CheckpointDeclaration{decl} })
			fb := newFixture(t, openShared(t, path), withRing(ring, -1))
			b := &client{f: fb, id: engine.Identity{ActorID: "bob", Partition: "p1"}, cid: "cb", wire: ssp2.WireV3, sv: 1}
			if _, err := b.sync(&ssp2.PullHeader{Accept: 1}); err == nil {
				t.Fatal("served behind a closed gate")
			}
		}, events.Event{Kind: events.GateRefused, Partition: "p1", Actor: "bob", Code: "sync.schema_not_ready"}},
		{"slow request over the threshold", func(t *testing.T, ring *events.Ring) {
			f := newFixture(t, memory.New(), withRing(ring, time.Nanosecond))
			f.client("carol", "cc")
		}, events.Event{Kind: events.SlowRequest, Partition: "p1", Actor: "carol", Message: "threshold 1ns"}},
		{"operator rotates the epoch", func(t *testing.T, ring *events.Ring) {
			f := newFixture(t, memory.New(), withRing(ring, -1))
			a := f.client("alice", "ca")
			before := *a.epoch
			ep, err := f.eng.RotateEpoch(context.Background(), "p1")
			if err != nil || ep == before || ep == "" {
				t.Fatalf("RotateEpoch = %q, %v (before %q)", ep, err, before)
			}
			info, _ := f.store.Log.ReadPartition(context.Background(), "p1")
			if info.LogEpoch != ep || !info.EpochRequired {
				t.Fatalf("stored partition %+v, want epoch %q required", info, ep)
			}
			// The client's next pull is told to reset.
			rep, err := a.sync(&ssp2.PullHeader{Accept: 1})
			if err != nil || !rep.Header().ResetRequired {
				t.Fatalf("pull after rotation: %v, header %+v", err, rep.Header())
			}
		}, events.Event{Kind: events.EpochRotated, Partition: "p1", Message: "log epoch rotated"}},
		{"passivation", func(t *testing.T, ring *events.Ring) {
			f := newFixture(t, memory.New(), withRing(ring, -1), func(c *engine.Config) { c.IdleTimeout = time.Millisecond })
			f.client("dave", "cd")
			deadline := time.Now().Add(10 * time.Second)
			for {
				if live, _ := f.eng.PartitionLive("p1"); !live {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("partition never passivated")
				}
				time.Sleep(time.Millisecond)
			}
		}, events.Event{Kind: events.ActorPassivated, Partition: "p1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ring := events.NewRing(64, nil)
			c.run(t, ring)
			evs := ring.Recent(0, 0)
			for _, e := range evs {
				if e.Kind == c.want.Kind && e.Partition == c.want.Partition && e.Actor == c.want.Actor &&
					e.Code == c.want.Code && strings.Contains(e.Message, c.want.Message) {
					return
				}
			}
			t.Fatalf("no event like %+v among %+v", c.want, evs)
		})
	}
}

// Accepted fast requests emit nothing: the ring stays out of the push
// path unless something is worth reporting.
func TestAcceptedPushesEmitNothing(t *testing.T) {
	ring := events.NewRing(64, nil)
	f := newFixture(t, memory.New(), withRing(ring, time.Hour))
	a := f.client("alice", "ca")
	for i := range 5 {
		if pr := a.push("ok"+string(rune('a'+i)), upsert("tasks", "t", f.row("t", "P", "x"), nil)); pr.Status == ssp2.CommitRejected {
			t.Fatalf("push rejected: %+v", pr)
		}
	}
	if evs := ring.Recent(0, 0); len(evs) != 0 {
		t.Fatalf("events for accepted pushes: %v", kinds(evs))
	}
}
