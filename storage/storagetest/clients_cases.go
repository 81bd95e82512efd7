package storagetest

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/synclane/synclane/storage"
)

func (e *env) wantClient(what, partition, id string, want *storage.ClientRecord) {
	e.t.Helper()
	got, err := e.b.Clients.GetClient(e.ctx, partition, id)
	if err != nil {
		e.t.Fatalf("%s: GetClient: %v", what, err)
	}
	if want == nil {
		if got != nil {
			e.t.Fatalf("%s: got %+v, want nil", what, got)
		}
		return
	}
	if got == nil || got.ClientID != want.ClientID || got.ActorID != want.ActorID || !bytes.Equal(got.Subscriptions, want.Subscriptions) ||
		got.Cursor != want.Cursor || got.WireVersion != want.WireVersion || got.UpdatedAtMs != want.UpdatedAtMs {
		e.t.Fatalf("%s: got %+v, want %+v", what, got, want)
	}
}

var clientTests = []test{
	{name: "PutGetReplace", fn: func(e *env) {
		e.touch("p")
		e.wantClient("absent", "p", "c1", nil)
		c1 := storage.ClientRecord{ClientID: "c1", ActorID: "actor😀", Subscriptions: json.RawMessage(` [ {"id": "s1",  "cursor":-1} ] `),
			Cursor: -1, WireVersion: 2, UpdatedAtMs: 1_700_000_000_123}
		c2 := storage.ClientRecord{ClientID: "c2", ActorID: "a2", Subscriptions: json.RawMessage(`[]`), Cursor: 1 << 40, WireVersion: 1, UpdatedAtMs: 5}
		for _, c := range []storage.ClientRecord{c1, c2} {
			if err := e.b.Clients.PutClient(e.ctx, "p", c); err != nil {
				e.t.Fatal(err)
			}
		}
		e.wantClient("c1", "p", "c1", &c1)
		e.wantClient("c2", "p", "c2", &c2)
		c1b := storage.ClientRecord{ClientID: "c1", ActorID: "actor2", Subscriptions: json.RawMessage(`{"x":1}`), Cursor: 17, WireVersion: 1, UpdatedAtMs: 9}
		if err := e.b.Clients.PutClient(e.ctx, "p", c1b); err != nil {
			e.t.Fatal(err)
		}
		// Everything is replaced but the actor: the binding is immutable.
		c1b.ActorID = c1.ActorID
		e.wantClient("c1 replaced", "p", "c1", &c1b)
		e.wantClient("c2 untouched", "p", "c2", &c2)
		e.wantClient("other partition", "q", "c1", nil)
	}},
	{name: "AdvanceClients", fn: func(e *env) {
		// SPEC §8.2 ack persistence: only an existing record's cursor and
		// timestamp move, each to its maximum, for the session's actor and
		// the current epoch; nothing is created.
		epoch := e.touch("p").LogEpoch
		c1 := storage.ClientRecord{ClientID: "c1", ActorID: "a1", Subscriptions: json.RawMessage(`[{"id":"s1","cursor":4}]`), Cursor: 4, WireVersion: 3, UpdatedAtMs: 100}
		c2 := storage.ClientRecord{ClientID: "c2", ActorID: "a2", Subscriptions: json.RawMessage(`[]`), Cursor: 10, WireVersion: 3, UpdatedAtMs: 500}
		if err := e.b.Clients.PutClient(e.ctx, "p", c1, c2); err != nil {
			e.t.Fatal(err)
		}
		advance := func(what, partition, epoch string, want int, acks ...storage.ClientAdvance) {
			e.t.Helper()
			n, err := e.b.Clients.AdvanceClients(e.ctx, partition, epoch, acks...)
			if err != nil || n != want {
				e.t.Fatalf("%s: AdvanceClients = %d, %v; want %d updated", what, n, err, want)
			}
		}
		advance("acks at the current epoch", "p", epoch, 2,
			storage.ClientAdvance{ClientID: "c1", ActorID: "a1", Cursor: 9, AtMs: 200},        // both rise
			storage.ClientAdvance{ClientID: "c2", ActorID: "a2", Cursor: 7, AtMs: 300},        // neither falls
			storage.ClientAdvance{ClientID: "c3", ActorID: "a1", Cursor: 5, AtMs: 200},        // no record: none created
			storage.ClientAdvance{ClientID: "c1", ActorID: "intruder", Cursor: 50, AtMs: 900}, // another actor
			storage.ClientAdvance{ClientID: "bad\x00id", ActorID: "a1", Cursor: 5, AtMs: 200}) // unstorable: missing
		c1.Cursor, c1.UpdatedAtMs = 9, 200
		e.wantClient("c1 advanced, subscriptions, wire version and actor kept", "p", "c1", &c1)
		e.wantClient("c2 never lowered", "p", "c2", &c2)
		e.wantClient("no record created", "p", "c3", nil)
		advance("another epoch", "p", "not-the-epoch", 0, storage.ClientAdvance{ClientID: "c1", ActorID: "a1", Cursor: 20, AtMs: 1000})
		advance("an empty epoch", "p", "", 0, storage.ClientAdvance{ClientID: "c1", ActorID: "a1", Cursor: 20, AtMs: 1000})
		e.wantClient("c1 after acks of another epoch", "p", "c1", &c1)
		advance("a partition never created", "never", epoch, 0, storage.ClientAdvance{ClientID: "c1", ActorID: "a1", Cursor: 20, AtMs: 1000})
		e.wantClient("nothing created in it", "never", "c1", nil)
		advance("no acks", "p", epoch, 0)
		// A delayed ack from before a rotation cannot update the record the
		// client registers after it.
		rotated, err := e.b.Log.RotateLogEpoch(e.ctx, "p", 2000)
		if err != nil {
			e.t.Fatal(err)
		}
		if got := e.bind(e.b, "p", "c1", "a1", 2000); got != "a1" {
			e.t.Fatalf("rebinding after the rotation: %q", got)
		}
		advance("an ack of the old epoch", "p", epoch, 0, storage.ClientAdvance{ClientID: "c1", ActorID: "a1", Cursor: 30, AtMs: 3000})
		e.wantClient("the new record", "p", "c1", &storage.ClientRecord{ClientID: "c1", ActorID: "a1", Cursor: -1, UpdatedAtMs: 2000})
		advance("an ack of the new epoch", "p", rotated, 1, storage.ClientAdvance{ClientID: "c1", ActorID: "a1", Cursor: 30, AtMs: 3000})
		e.wantClient("the new record advanced", "p", "c1", &storage.ClientRecord{ClientID: "c1", ActorID: "a1", Cursor: 30, UpdatedAtMs: 3000})
	}},
}

func (e *env) bind(s storage.Backend, partition, clientID, actorID string, nowMs int64) string {
	e.t.Helper()
	got, err := s.Clients.BindClient(e.ctx, partition, clientID, actorID, nowMs)
	if err != nil {
		e.t.Fatalf("BindClient(%q, %q, %q): %v", partition, clientID, actorID, err)
	}
	return got
}

// bindRace binds each of the clientIDs to 16 different actors from 16
// goroutines started at once (spread over stores) and checks that every
// call of a clientID returned the same actor, one of the 16, which is the
// stored binding.
func (e *env) bindRace(stores []storage.Backend, clientIDs []string) {
	e.t.Helper()
	const racers = 16
	for _, id := range clientIDs {
		start := make(chan struct{})
		var wg sync.WaitGroup
		got := make([]string, racers)
		errs := make([]error, racers)
		for i := range racers {
			wg.Go(func() {
				<-start
				got[i], errs[i] = stores[i%len(stores)].Clients.BindClient(e.ctx, "p", id, "actor-"+strconv.Itoa(i), int64(i))
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				e.t.Fatalf("%s: racer %d: BindClient: %v", id, i, err)
			}
		}
		winner := got[0]
		if !strings.HasPrefix(winner, "actor-") {
			e.t.Fatalf("%s: BindClient returned %q, not one of the racing actors", id, winner)
		}
		for i, a := range got {
			if a != winner {
				e.t.Fatalf("%s: racer %d got %q, racer 0 got %q: two bindings won", id, i, a, winner)
			}
		}
		for _, s := range stores {
			rec, err := s.Clients.GetClient(e.ctx, "p", id)
			if err != nil || rec == nil || rec.ActorID != winner || rec.Cursor != -1 {
				e.t.Fatalf("%s: stored record %+v, %v; want actor %q, cursor -1", id, rec, err, winner)
			}
		}
	}
}

var bindTests = []test{
	{name: "BindClient", fn: func(e *env) {
		if got := e.bind(e.b, "p", "c1", "alice", 100); got != "alice" {
			e.t.Fatalf("first BindClient returned %q, want alice", got)
		}
		e.wantClient("minimal record", "p", "c1", &storage.ClientRecord{ClientID: "c1", ActorID: "alice", Cursor: -1, UpdatedAtMs: 100})
		if got := e.bind(e.b, "p", "c1", "alice", 200); got != "alice" {
			e.t.Fatalf("rebinding to the same actor returned %q", got)
		}
		if got := e.bind(e.b, "p", "c1", "mallory", 300); got != "alice" {
			e.t.Fatalf("binding to another actor returned %q, want the first binding alice", got)
		}
		e.wantClient("record unchanged by rebinding", "p", "c1", &storage.ClientRecord{ClientID: "c1", ActorID: "alice", Cursor: -1, UpdatedAtMs: 100})

		// PutClient updates the record but never the binding.
		upd := storage.ClientRecord{ClientID: "c1", ActorID: "mallory", Subscriptions: json.RawMessage(`[1]`), Cursor: 5, WireVersion: 2, UpdatedAtMs: 400}
		if err := e.b.Clients.PutClient(e.ctx, "p", upd); err != nil {
			e.t.Fatal(err)
		}
		upd.ActorID = "alice"
		e.wantClient("PutClient with another actor", "p", "c1", &upd)
		if got := e.bind(e.b, "p", "c1", "mallory", 500); got != "alice" {
			e.t.Fatalf("BindClient after PutClient returned %q, want alice", got)
		}
		e.wantClient("existing record left unchanged", "p", "c1", &upd)

		// A record PutClient created is a binding too.
		c2 := storage.ClientRecord{ClientID: "c2", ActorID: "bob", Cursor: 3, UpdatedAtMs: 7}
		if err := e.b.Clients.PutClient(e.ctx, "p", c2); err != nil {
			e.t.Fatal(err)
		}
		if got := e.bind(e.b, "p", "c2", "carol", 8); got != "bob" {
			e.t.Fatalf("BindClient of a PutClient record returned %q, want bob", got)
		}
		e.wantClient("PutClient record unchanged", "p", "c2", &c2)

		// Bindings are per partition.
		if got := e.bind(e.b, "q", "c1", "mallory", 600); got != "mallory" {
			e.t.Fatalf("BindClient in another partition returned %q", got)
		}

		// RotateLogEpoch deletes client records, and with them the bindings.
		if _, err := e.b.Log.RotateLogEpoch(e.ctx, "p", 700); err != nil {
			e.t.Fatal(err)
		}
		e.wantClient("after RotateLogEpoch", "p", "c1", nil)
		if got := e.bind(e.b, "p", "c1", "mallory", 800); got != "mallory" {
			e.t.Fatalf("BindClient after RotateLogEpoch returned %q, want mallory", got)
		}
		e.wantClient("rebound after RotateLogEpoch", "p", "c1", &storage.ClientRecord{ClientID: "c1", ActorID: "mallory", Cursor: -1, UpdatedAtMs: 800})
		if got := e.bind(e.b, "q", "c1", "alice", 900); got != "mallory" {
			e.t.Fatalf("RotateLogEpoch of p touched q's binding: %q", got)
		}

		// A clientID or actor no backend stores is refused, and not bound.
		for _, c := range [][2]string{{"c\x00", "alice"}, {noise(5, 8192), "alice"}, {"c3", "al\x00ice"}, {"c\xff", "alice"}} {
			_, err := e.b.Clients.BindClient(e.ctx, "p", c[0], c[1], 1)
			wantErrIs(e, "BindClient of unstorable values", err, storage.ErrUnstorable)
		}
		e.wantClient("c3 not bound", "p", "c3", nil)
	}},
	{name: "BindClients", fn: func(e *env) {
		// An existing binding (c1: alice) and new ones in one call; c3
		// twice: the first occurrence wins.
		e.bind(e.b, "p", "c1", "alice", 100)
		got, err := e.b.Clients.BindClients(e.ctx, "p", 200,
			storage.ClientBinding{ClientID: "c2", ActorID: "bob"},
			storage.ClientBinding{ClientID: "c1", ActorID: "mallory"},
			storage.ClientBinding{ClientID: "c3", ActorID: "carol"},
			storage.ClientBinding{ClientID: "c3", ActorID: "mallory"})
		if err != nil {
			e.t.Fatalf("BindClients: %v", err)
		}
		want := []storage.BoundClient{{ActorID: "bob", Created: true}, {ActorID: "alice"}, {ActorID: "carol", Created: true}, {ActorID: "carol"}}
		if !slices.Equal(got, want) {
			e.t.Fatalf("BindClients = %+v, want %+v", got, want)
		}
		e.wantClient("created record", "p", "c2", &storage.ClientRecord{ClientID: "c2", ActorID: "bob", Cursor: -1, UpdatedAtMs: 200})
		e.wantClient("existing record unchanged", "p", "c1", &storage.ClientRecord{ClientID: "c1", ActorID: "alice", Cursor: -1, UpdatedAtMs: 100})
		e.wantClient("first of a pair", "p", "c3", &storage.ClientRecord{ClientID: "c3", ActorID: "carol", Cursor: -1, UpdatedAtMs: 200})
		if got := e.bind(e.b, "p", "c2", "mallory", 300); got != "bob" {
			e.t.Fatalf("BindClient after BindClients returned %q, want bob", got)
		}
		if got, err := e.b.Clients.BindClients(e.ctx, "p", 1); err != nil || len(got) != 0 {
			e.t.Fatalf("BindClients of nothing = %+v, %v", got, err)
		}
		// One unstorable binding refuses the call: nothing is bound.
		_, err = e.b.Clients.BindClients(e.ctx, "p", 400,
			storage.ClientBinding{ClientID: "c4", ActorID: "dave"}, storage.ClientBinding{ClientID: "c\x00", ActorID: "dave"})
		wantErrIs(e, "BindClients with an unstorable clientID", err, storage.ErrUnstorable)
		e.wantClient("c4 not bound", "p", "c4", nil)
	}},
	{name: "BindClientConcurrent", fn: func(e *env) {
		e.bindRace([]storage.Backend{e.b}, []string{"c1", "c2", "c3", "c4"})
	}},
	{name: "BindClientTwoHandles", shared: true, fn: func(e *env) {
		b := e.share()
		if err := b.Lifecycle.EnsureSchema(e.ctx, e.sch); err != nil {
			e.t.Fatal(err)
		}
		e.bindRace([]storage.Backend{e.b, b}, []string{"c1", "c2", "c3", "c4"})
	}},
}

var putClientUnstorableTests = []test{
	{name: "PutClientSkipsUnstorable", fn: func(e *env) {
		good1 := storage.ClientRecord{ClientID: "good1", ActorID: "a1", Subscriptions: json.RawMessage(`[]`), Cursor: 1, WireVersion: 2, UpdatedAtMs: 3}
		good2 := storage.ClientRecord{ClientID: "good2", ActorID: "a2", Cursor: 4, WireVersion: 2, UpdatedAtMs: 5}
		bad := []storage.ClientRecord{
			{ClientID: "bad\x00nul", ActorID: "a"},
			{ClientID: noise(6, 8192), ActorID: "a"},
			{ClientID: "bad\xffutf8", ActorID: "a"},
			{ClientID: "bad-actor", ActorID: "a\x00"},
			{ClientID: "bad-subs", ActorID: "a", Subscriptions: json.RawMessage("[\"\x00\"]")},
		}
		recs := []storage.ClientRecord{good1, bad[0], bad[1], bad[2], good2, bad[3], bad[4]}
		err := e.b.Clients.PutClient(e.ctx, "p", recs...)
		wantErrIs(e, "PutClient with unstorable records", err, storage.ErrUnstorable)
		for _, b := range bad {
			name := strconv.Quote(b.ClientID[:min(len(b.ClientID), 64)])
			if !strings.Contains(err.Error(), name) {
				e.t.Errorf("PutClient error does not name skipped client %s: %v", name, err)
			}
			e.wantClient("skipped record", "p", b.ClientID, nil)
		}
		if strings.Contains(err.Error(), "good") {
			e.t.Errorf("PutClient error names a stored client: %v", err)
		}
		e.wantClient("good1 stored", "p", "good1", &good1)
		e.wantClient("good2 stored", "p", "good2", &good2)

		// The partition's later write-backs are not blocked.
		good1.Cursor, good2.Cursor = 10, 11
		if err := e.b.Clients.PutClient(e.ctx, "p", good1, good2); err != nil {
			e.t.Fatalf("PutClient of storable records: %v", err)
		}
		e.wantClient("good1 updated", "p", "good1", &good1)
		e.wantClient("good2 updated", "p", "good2", &good2)
	}},
}
