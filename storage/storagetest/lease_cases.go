package storagetest

import (
	"bytes"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/synclane/synclane/storage"
)

func leaseRec(client, id, actor string, exp int64, mac string) storage.LeaseRecord {
	return storage.LeaseRecord{ClientID: client, LeaseID: id, ActorID: actor, AllowedScopes: []byte(`{"project":["p1"]}`),
		IssuedAtMs: 1_700_000_000_000, ExpiresAtMs: exp, MAC: []byte(mac)}
}

func leaseEqual(a, b *storage.LeaseRecord) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.ClientID == b.ClientID && a.LeaseID == b.LeaseID && a.ActorID == b.ActorID && bytes.Equal(a.AllowedScopes, b.AllowedScopes) &&
		a.IssuedAtMs == b.IssuedAtMs && a.ExpiresAtMs == b.ExpiresAtMs && a.RevokedAtMs == b.RevokedAtMs && bytes.Equal(a.MAC, b.MAC)
}

func (e *env) wantLease(what string, got *storage.LeaseRecord, err error, want *storage.LeaseRecord) {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("%s: %v", what, err)
	}
	if !leaseEqual(got, want) {
		e.t.Fatalf("%s: got %+v, want %+v", what, got, want)
	}
}

func (e *env) swapLease(what, partition string, rec storage.LeaseRecord, prev []byte, want bool) {
	e.t.Helper()
	ok, err := e.b.Leases.SwapLease(e.ctx, partition, rec, prev)
	if err != nil || ok != want {
		e.t.Fatalf("%s: SwapLease = %v, %v; want %v", what, ok, err, want)
	}
}

var leaseTests = []test{
	{name: "SwapGetFind", fn: func(e *env) {
		g, err := e.b.Leases.GetLease(e.ctx, "p", "c1")
		e.wantLease("absent", g, err, nil)
		a := leaseRec("c1", "L1", "actor😀", 1_700_000_900_000, "mac-a")
		e.swapLease("insert", "p", a, nil, true)
		e.swapLease("second insert", "p", leaseRec("c1", "L9", "x", 1, "mac-x"), nil, false)
		g, err = e.b.Leases.GetLease(e.ctx, "p", "c1")
		e.wantLease("stored", g, err, &a)
		g, err = e.b.Leases.FindLease(e.ctx, "p", "L1")
		e.wantLease("by id", g, err, &a)
		g, err = e.b.Leases.FindLease(e.ctx, "p", "L2")
		e.wantLease("unknown id", g, err, nil)
		g, err = e.b.Leases.GetLease(e.ctx, "q", "c1")
		e.wantLease("other partition", g, err, nil)
		g, err = e.b.Leases.FindLease(e.ctx, "q", "L1")
		e.wantLease("other partition by id", g, err, nil)

		b := a
		b.ExpiresAtMs, b.AllowedScopes, b.MAC = a.ExpiresAtMs+60_000, []byte(`{}`), []byte("mac-b")
		e.swapLease("stale prev", "p", b, []byte("mac-zz"), false)
		g, err = e.b.Leases.GetLease(e.ctx, "p", "c1")
		e.wantLease("after a refused swap", g, err, &a)
		e.swapLease("slide", "p", b, a.MAC, true)
		g, err = e.b.Leases.GetLease(e.ctx, "p", "c1")
		e.wantLease("slid", g, err, &b)

		c := leaseRec("c1", "L2", "actor2", 5, "mac-c")
		c.RevokedAtMs = 42
		e.swapLease("replace with a new id", "p", c, b.MAC, true)
		g, err = e.b.Leases.FindLease(e.ctx, "p", "L1")
		e.wantLease("old id gone", g, err, nil)
		g, err = e.b.Leases.FindLease(e.ctx, "p", "L2")
		e.wantLease("new id", g, err, &c)

		d := leaseRec("c2", "L3", "a", 7, "mac-d")
		e.swapLease("second client", "p", d, nil, true)
		g, err = e.b.Leases.GetLease(e.ctx, "p", "c1")
		e.wantLease("first client untouched", g, err, &c)
	}},
	{name: "Unstorable", fn: func(e *env) {
		big := leaseRec("c1", "L1", "a", 1, "m")
		big.AllowedScopes = []byte(`"` + strings.Repeat("x", storage.MaxLeaseScopesBytes) + `"`)
		noMAC := leaseRec("c1", "L1", "a", 1, "")
		longMAC := leaseRec("c1", "L1", "a", 1, strings.Repeat("m", storage.MaxLeaseMACBytes+1))
		noID := leaseRec("c1", "", "a", 1, "m")
		badClient := leaseRec("c\x00", "L1", "a", 1, "m")
		for _, tc := range []struct {
			name      string
			partition string
			rec       storage.LeaseRecord
		}{{"scopes too large", "p", big}, {"empty MAC", "p", noMAC}, {"MAC too long", "p", longMAC}, {"empty lease id", "p", noID},
			{"NUL in clientId", "p", badClient}, {"empty partition", "", leaseRec("c1", "L1", "a", 1, "m")}} {
			ok, err := e.b.Leases.SwapLease(e.ctx, tc.partition, tc.rec, nil)
			if ok {
				e.t.Fatalf("%s: stored", tc.name)
			}
			wantErrIs(e, tc.name, err, storage.ErrUnstorable)
			g, err := e.b.Leases.GetLease(e.ctx, tc.partition, tc.rec.ClientID)
			e.wantLease(tc.name+": nothing stored", g, err, nil)
		}
	}},
	{name: "SurvivesEpochRotation", fn: func(e *env) {
		e.touch("p")
		a := leaseRec("c1", "L1", "a", 9, "mac-a")
		e.swapLease("insert", "p", a, nil, true)
		if _, err := e.b.Log.RotateLogEpoch(e.ctx, "p", 10); err != nil {
			e.t.Fatal(err)
		}
		g, err := e.b.Leases.GetLease(e.ctx, "p", "c1")
		e.wantLease("after rotation", g, err, &a)
	}},
	{name: "ConcurrentSwapOneWins", fn: func(e *env) {
		a := leaseRec("c1", "L1", "a", 9, "mac-a")
		e.swapLease("insert", "p", a, nil, true)
		const n = 8
		var wins atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				next := a
				next.ExpiresAtMs, next.MAC = int64(100+i), []byte{'m', byte('0' + i)}
				ok, err := e.b.Leases.SwapLease(e.ctx, "p", next, a.MAC)
				if err != nil {
					errs <- err
				}
				if ok {
					wins.Add(1)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			e.t.Fatal(err)
		}
		if wins.Load() != 1 {
			e.t.Fatalf("%d swaps from one previous MAC won, want exactly 1", wins.Load())
		}
		g, err := e.b.Leases.GetLease(e.ctx, "p", "c1")
		if err != nil || g == nil || g.ExpiresAtMs < 100 || !bytes.Equal(g.MAC, []byte{'m', byte('0' + g.ExpiresAtMs - 100)}) {
			e.t.Fatalf("stored lease %+v (%v) is not one winner's whole record", g, err)
		}
	}},
}
