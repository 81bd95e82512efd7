package storagetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/synclane/synclane/storage"
)

// handOver calls HandOverClients on e's backend under ctx and checks how
// many records it wrote (and that it did not fail).
func (e *env) handOver(ctx context.Context, what, partition, epoch string, want int, recs ...storage.ClientRecord) {
	e.t.Helper()
	n, err := e.b.HandOver.HandOverClients(ctx, partition, epoch, recs...)
	if err != nil || n != want {
		e.t.Fatalf("%s: HandOverClients = %d, %v; want %d written", what, n, err, want)
	}
}

// handedRecord is a client record as a test hands it over: its one
// subscription's cursor is the record's cursor.
func handedRecord(id, actor string, cursor, atMs int64) storage.ClientRecord {
	return storage.ClientRecord{ClientID: id, ActorID: actor, Subscriptions: json.RawMessage(fmt.Sprintf(`[{"id":"s","cursor":%d}]`, cursor)),
		Cursor: cursor, WireVersion: 3, UpdatedAtMs: atMs}
}

var handOverTests = []test{
	{name: "Conditional", fn: func(e *env) {
		// A record is created when absent and replaces the stored one only
		// when that is not newer and bound to the same actor; all in one
		// call.
		epoch := e.touch("p").LogEpoch
		older, newer, same, other := handedRecord("older", "a1", 1, 100), handedRecord("newer", "a2", 9, 500),
			handedRecord("same", "a3", 3, 300), handedRecord("other", "x", 4, 100)
		if err := e.b.Clients.PutClient(e.ctx, "p", older, newer, same, other); err != nil {
			e.t.Fatal(err)
		}
		if got := e.bind(e.b, "p", "fresh", "a5", 700); got != "a5" {
			e.t.Fatalf("BindClient = %q", got)
		}
		cases := []struct {
			name         string
			handed, want storage.ClientRecord
		}{
			{"absent: created", handedRecord("absent", "a4", 7, 200), handedRecord("absent", "a4", 7, 200)},
			{"stored older: replaced", handedRecord("older", "a1", 5, 200), handedRecord("older", "a1", 5, 200)},
			{"stored newer: kept", handedRecord("newer", "a2", 2, 400), newer},
			{"stored as old: replaced", handedRecord("same", "a3", 8, 300), handedRecord("same", "a3", 8, 300)},
			{"stored bound to another actor: kept", handedRecord("other", "y", 6, 900), other},
			{"bound in the same millisecond: replaced", handedRecord("fresh", "a5", 2, 700), handedRecord("fresh", "a5", 2, 700)},
		}
		var handed []storage.ClientRecord
		for _, c := range cases {
			handed = append(handed, c.handed)
		}
		e.handOver(e.ctx, "mixed records", "p", epoch, 4, handed...)
		for _, c := range cases {
			e.wantClient(c.name, "p", c.want.ClientID, &c.want)
		}
		e.wantClient("other partition untouched", "q", "absent", nil)

		// Handing the same records over again changes nothing (the
		// records it writes again are the ones stored).
		e.handOver(e.ctx, "the same records again", "p", epoch, 4, handed...)
		for _, c := range cases {
			e.wantClient(c.name+", again", "p", c.want.ClientID, &c.want)
		}
		e.handOver(e.ctx, "no records", "p", epoch, 0)
	}},
	{name: "Epoch", fn: func(e *env) {
		// Records of another epoch than the partition's are never written:
		// a rotation deleted them, and with them the bindings.
		epoch := e.touch("p").LogEpoch
		c1 := handedRecord("c1", "a1", 4, 100)
		e.handOver(e.ctx, "another epoch", "p", "not-the-epoch", 0, c1)
		e.handOver(e.ctx, "an empty epoch", "p", "", 0, c1)
		e.wantClient("nothing written at another epoch", "p", "c1", nil)
		e.handOver(e.ctx, "a partition never created", "never", epoch, 0, c1)
		e.wantClient("nothing created in it", "never", "c1", nil)
		e.handOver(e.ctx, "the partition's epoch", "p", epoch, 1, c1)
		rotated, err := e.b.Log.RotateLogEpoch(e.ctx, "p", 2000)
		if err != nil {
			e.t.Fatal(err)
		}
		late := handedRecord("c1", "a1", 9, 3000)
		e.handOver(e.ctx, "a record of the old epoch after the rotation", "p", epoch, 0, late)
		e.wantClient("not brought back", "p", "c1", nil)
		e.handOver(e.ctx, "the new epoch", "p", rotated, 1, late)
		e.wantClient("written at the new epoch", "p", "c1", &late)
	}},
	{name: "SkipsUnstorable", fn: func(e *env) {
		epoch := e.touch("p").LogEpoch
		good := handedRecord("good", "a1", 2, 10)
		bad := storage.ClientRecord{ClientID: "bad\x00nul", ActorID: "a1", UpdatedAtMs: 10}
		n, err := e.b.HandOver.HandOverClients(e.ctx, "p", epoch, bad, good)
		wantErrIs(e, "HandOverClients with an unstorable record", err, storage.ErrUnstorable)
		if n != 1 || !strings.Contains(err.Error(), strconv.Quote(bad.ClientID)) {
			e.t.Fatalf("HandOverClients = %d, %v; want the storable record written and the other named", n, err)
		}
		e.wantClient("storable record written", "p", "good", &good)
		e.wantClient("unstorable record skipped", "p", bad.ClientID, nil)
	}},
	{name: "IgnoresTheFence", roles: []string{"Ownership"}, fn: func(e *env) {
		// A deposed owner's write-back is refused by the fence; handed
		// over, the same records land (conditionally).
		e.claimPartition(e.b, "p", "member-a", 1)
		epoch := e.readPartition("p").LogEpoch
		e.claimPartition(e.b, "p", "member-b", 2)
		stale := storage.WithFence(e.ctx, 1)
		rec := handedRecord("c1", "a1", 5, 100)
		wantErrIs(e, "fenced PutClient of the deposed owner", e.b.Clients.PutClient(stale, "p", rec), storage.ErrOwnershipLost)
		e.wantClient("refused by the fence", "p", "c1", nil)
		e.handOver(stale, "handed over under the stale fence", "p", epoch, 1, rec)
		e.wantClient("handed over", "p", "c1", &rec)
		// WithoutFence lifts the fence of a context: an unfenced PutClient.
		rec2 := handedRecord("c1", "a1", 6, 200)
		if err := e.b.Clients.PutClient(storage.WithoutFence(stale), "p", rec2); err != nil {
			e.t.Fatalf("PutClient without the fence: %v", err)
		}
		e.wantClient("written without the fence", "p", "c1", &rec2)
		// An ack refused by the fence lands without it (an advance only
		// raises the cursor and time to their maxima).
		ack := storage.ClientAdvance{ClientID: "c1", ActorID: "a1", Cursor: 8, AtMs: 300}
		_, err := e.b.Clients.AdvanceClients(stale, "p", epoch, ack)
		wantErrIs(e, "fenced AdvanceClients of the deposed owner", err, storage.ErrOwnershipLost)
		e.wantClient("ack refused by the fence", "p", "c1", &rec2)
		if n, err := e.b.Clients.AdvanceClients(storage.WithoutFence(stale), "p", epoch, ack); err != nil || n != 1 {
			e.t.Fatalf("AdvanceClients without the fence = %d, %v; want 1", n, err)
		}
		rec2.Cursor, rec2.UpdatedAtMs = 8, 300
		e.wantClient("ack written without the fence", "p", "c1", &rec2)
	}},
	{name: "NeverOverANewerConcurrentWrite", fn: func(e *env) {
		// The new owner's write-back (newer records) and the old owner's
		// hand-over (older ones) race; whichever lands first, the newer
		// records stand.
		epoch := e.touch("p").LogEpoch
		const clients, rounds = 8, 10
		for r := range rounds {
			var olds, news []storage.ClientRecord
			for i := range clients {
				id := "c" + strconv.Itoa(i)
				olds = append(olds, handedRecord(id, "a", int64(10*r+1), int64(1000*r+1)))
				news = append(news, handedRecord(id, "a", int64(10*r+2), int64(1000*r+2)))
			}
			var wg sync.WaitGroup
			var putErr, handErr error
			start := make(chan struct{})
			wg.Go(func() { <-start; putErr = e.b.Clients.PutClient(e.ctx, "p", news...) })
			wg.Go(func() { <-start; _, handErr = e.b.HandOver.HandOverClients(e.ctx, "p", epoch, olds...) })
			close(start)
			wg.Wait()
			if putErr != nil || handErr != nil {
				e.t.Fatalf("round %d: PutClient %v, HandOverClients %v", r, putErr, handErr)
			}
			for i := range news {
				e.wantClient(fmt.Sprintf("round %d", r), "p", news[i].ClientID, &news[i])
			}
		}
	}},
}
