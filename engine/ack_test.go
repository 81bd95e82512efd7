package engine_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
)

// ackClock is a test clock the ack cases move by hand.
type ackClock struct{ ms atomic.Int64 }

func (c *ackClock) now() time.Time { return time.UnixMilli(c.ms.Load()) }

// sharedStores opens two handles on one fresh database per in-process
// backend: two processes sharing it.
func sharedStores(t *testing.T) map[string]func() (backend, backend) {
	return map[string]func() (backend, backend){
		"memory": func() (backend, backend) { s := memory.New(); return s, s.Share() },
		"sqlite": func() (backend, backend) {
			path := filepath.Join(t.TempDir(), "db.sqlite")
			return openShared(t, path), openShared(t, path)
		},
	}
}

// ackEngine is an engine whose client records are written back only when
// the test says so (flush).
type ackEngine struct {
	*fixture
	clock *ackClock
}

func newAckEngine(t *testing.T, st backend, clock *ackClock) *ackEngine {
	f := newFixture(t, st, func(c *engine.Config) {
		c.Now = clock.now
		c.ClientFlushInterval = time.Hour
	})
	return &ackEngine{fixture: f, clock: clock}
}

// flush writes the engine's buffered client records back: an hour later,
// any job of the partition writes them after it answered (an empty ack
// batch is one); the next job runs once that write-back is done.
func (a *ackEngine) flush() {
	a.t.Helper()
	a.clock.ms.Add(2 * time.Hour.Milliseconds())
	for range 2 {
		if err := a.eng.Ack(context.Background(), "p1", nil); err != nil {
			a.t.Fatal(err)
		}
	}
}

func (a *ackEngine) ack(cid string, cursor int64, epoch string) {
	a.t.Helper()
	if err := a.eng.Ack(context.Background(), "p1", []engine.Ack{{ClientID: cid, ActorID: "ada", Cursor: cursor, LogEpoch: epoch}}); err != nil {
		a.t.Fatal(err)
	}
}

// TestAckPersistence (SPEC §8.2): an ack moves only the existing client
// record's cursor and timestamp, each to its maximum; it requires the
// session's actor and the partition's current log epoch; it never creates
// a record; and what a concurrent sync round wrote (subscriptions, wire
// version) stays.
func TestAckPersistence(t *testing.T) {
	images := ssp2.PullHeader{Accept: ssp2.AcceptInlineRows}
	for sname, open := range sharedStores(t) {
		t.Run(sname+"/an ack of an old epoch does not reach the new record", func(t *testing.T) {
			st, _ := open()
			clock := &ackClock{}
			clock.ms.Store(1_700_000_000_000)
			a := newAckEngine(t, st, clock)
			a.client("writer", "w").seedTitled(3, "t ")
			r := a.client("ada", "c")
			old := *r.epoch
			r.pull(images, sub("s", -1, "P"))
			a.flush()
			if _, err := a.store.Log.RotateLogEpoch(context.Background(), "p1", clock.ms.Load()); err != nil {
				t.Fatal(err)
			}
			r = a.client("ada", "c") // the new epoch
			if sec := r.pull(images, sub("s", -1, "P"))["s"]; sec.end.NextCursor != 3 {
				t.Fatalf("bootstrap after the rotation ended at %d, want 3", sec.end.NextCursor)
			}
			w := a.client("writer", "w")
			w.push("c4", upsert("tasks", "t4", a.row("t4", "P", "x"), nil))
			w.push("c5", upsert("tasks", "t5", a.row("t5", "P", "x"), nil))
			a.flush()
			a.ack("c", 5, old) // delayed, from a socket of the old epoch
			a.flush()
			if rec := a.storedClient("c"); rec.Cursor != 3 {
				t.Fatalf("after an ack of the old epoch the cursor is %d, want 3", rec.Cursor)
			}
			a.ack("c", 5, *r.epoch)
			a.flush()
			if rec := a.storedClient("c"); rec.Cursor != 5 {
				t.Fatalf("after an ack of the current epoch the cursor is %d, want 5", rec.Cursor)
			}
		})
		t.Run(sname+"/an ack never creates a record", func(t *testing.T) {
			st, _ := open()
			clock := &ackClock{}
			clock.ms.Store(1_700_000_000_000)
			a := newAckEngine(t, st, clock)
			w := a.client("writer", "w")
			w.seedTitled(3, "t ")
			r := a.client("ada", "c")
			r.pull(images, sub("s", -1, "P"))
			w.push("c4", upsert("tasks", "t4", a.row("t4", "P", "x"), nil))
			a.flush()
			a.ack("c", 4, *r.epoch)
			// Another process rotates the epoch (deleting the client
			// records) before this one writes the ack back.
			if _, err := a.store.Log.RotateLogEpoch(context.Background(), "p1", clock.ms.Load()); err != nil {
				t.Fatal(err)
			}
			a.flush()
			if rec, err := a.store.Clients.GetClient(context.Background(), "p1", "c"); err != nil || rec != nil {
				t.Fatalf("the ack's write-back recreated the deleted record: %+v, %v", rec, err)
			}
		})
		t.Run(sname+"/an ack keeps what a concurrent round wrote", func(t *testing.T) {
			sa, sb := open()
			clock := &ackClock{}
			clock.ms.Store(1_700_000_000_000)
			a := newAckEngine(t, sa, clock)
			b := newAckEngine(t, sb, clock) // another process on the same database
			w := a.client("writer", "w")
			w.seedTitled(3, "t ")
			ra := a.client("ada", "c")
			ra.pull(images, sub("on-a", -1, "P"))
			a.flush()
			// The client's next round reaches the other process: it
			// registers other subscriptions there.
			clock.ms.Add(1000)
			rb := b.client("ada", "c")
			rb.pull(images, sub("on-b", -1, "Q"))
			b.flush()
			byB := a.storedClient("c")
			w.push("c4", upsert("tasks", "t4", a.row("t4", "P", "x"), nil))
			a.ack("c", 4, *ra.epoch) // a socket on the first process
			a.flush()
			rec := a.storedClient("c")
			if !strings.Contains(string(rec.Subscriptions), `"on-b"`) || strings.Contains(string(rec.Subscriptions), `"on-a"`) ||
				rec.WireVersion != byB.WireVersion || rec.ActorID != "ada" {
				t.Fatalf("after the ack the record is %+v (subscriptions %s); want the other process's registration %s kept", rec, rec.Subscriptions, byB.Subscriptions)
			}
			if rec.Cursor != 4 || rec.UpdatedAtMs < byB.UpdatedAtMs {
				t.Fatalf("after the ack: cursor %d at %d, want 4 and a timestamp not before %d", rec.Cursor, rec.UpdatedAtMs, byB.UpdatedAtMs)
			}
		})
		t.Run(sname+"/a connect reads acked cursors from storage", func(t *testing.T) {
			sa, sb := open()
			clock := &ackClock{}
			clock.ms.Store(1_700_000_000_000)
			a := newAckEngine(t, sa, clock)
			b := newAckEngine(t, sb, clock)
			w := a.client("writer", "w")
			w.seedTitled(3, "t ")
			r := a.client("ada", "c")
			r.pull(images, sub("s", -1, "P"))
			w.push("c4", upsert("tasks", "t4", a.row("t4", "P", "x"), nil))
			w.push("c5", upsert("tasks", "t5", a.row("t5", "P", "x"), nil))
			a.flush()
			a.ack("c", 5, *r.epoch)
			a.flush()
			// A socket of the client connecting to the other process starts
			// its ready subscription at the acked cursor.
			st, err := b.eng.ClientState(context.Background(), engine.Identity{ActorID: "ada", Partition: "p1"}, "c")
			if err != nil {
				t.Fatal(err)
			}
			if st.Cursor != 5 || len(st.Subscriptions) != 1 || st.Subscriptions[0].Cursor != 5 || st.Subscriptions[0].Pending {
				t.Fatalf("client state on the other process: cursor %d, subscriptions %+v; want 5 and the subscription at 5", st.Cursor, st.Subscriptions)
			}
		})
	}
}

func (a *ackEngine) storedClient(cid string) storedRecord {
	a.t.Helper()
	rec, err := a.store.Clients.GetClient(context.Background(), "p1", cid)
	if err != nil || rec == nil {
		a.t.Fatalf("GetClient(%s): %+v, %v", cid, rec, err)
	}
	return storedRecord{ActorID: rec.ActorID, Subscriptions: rec.Subscriptions, Cursor: rec.Cursor, WireVersion: rec.WireVersion, UpdatedAtMs: rec.UpdatedAtMs}
}

// storedRecord is the part of a stored client record the cases compare.
type storedRecord struct {
	ActorID       string
	Subscriptions json.RawMessage
	Cursor        int64
	WireVersion   uint16
	UpdatedAtMs   int64
}
