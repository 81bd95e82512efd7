package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/lease"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

const leaseTTL = 15 * time.Minute

// leaseBackends are the stores the lease behaviour is shown on.
var leaseBackends = []struct {
	name string
	open func(t *testing.T) backend
}{
	{"sqlite", func(t *testing.T) backend { return openShared(t, filepath.Join(t.TempDir(), "db.sqlite")) }},
	{"postgres", func(t *testing.T) backend {
		return pgtest.OpenSchema(t, pgtest.NewSchema(t), postgres.Options{MaxConns: 4})
	}},
}

// manualClock is a clock tests move by hand.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// leaseFixture is a fixture whose resolver can be put in an outage.
type leaseFixture struct {
	*fixture
	clk    *manualClock
	mu     sync.Mutex
	outage bool
	fail   bool
}

var leaseKey = []byte("0123456789abcdef0123456789abcdef")

func newLeaseFixture(t *testing.T, st backend, ttl time.Duration) *leaseFixture {
	lf := &leaseFixture{clk: &manualClock{now: time.UnixMilli(1_800_000_000_000)}}
	lf.fixture = newFixture(t, st, func(c *engine.Config) {
		c.Now, c.Leases.TTL, c.Leases.Key = lf.clk.Now, ttl, leaseKey
		base := c.Resolver
		c.Resolver = engine.ScopeResolverFunc(func(ctx context.Context, id engine.Identity) (map[string][]string, error) {
			lf.mu.Lock()
			outage, fail := lf.outage, lf.fail
			lf.mu.Unlock()
			switch {
			case outage:
				return nil, fmt.Errorf("identity provider unreachable: %w", engine.ErrResolverOutage)
			case fail:
				return nil, fmt.Errorf("identity provider says no")
			}
			return base.ResolveScopes(ctx, id)
		})
	})
	return lf
}

func (lf *leaseFixture) setOutage(on bool) {
	lf.mu.Lock()
	lf.outage = on
	lf.mu.Unlock()
}

func (lf *leaseFixture) setFailing(on bool) {
	lf.mu.Lock()
	lf.fail = on
	lf.mu.Unlock()
}

// leaseOf returns the reply's LEASE frame, failing the test when one is
// anywhere but directly after RESP_HEADER.
func leaseOf(t *testing.T, rep *engine.Reply) *ssp2.Lease {
	t.Helper()
	var out *ssp2.Lease
	for i, f := range rep.Frames {
		if l, ok := f.(*ssp2.Lease); ok {
			if i != 1 || out != nil {
				t.Fatalf("LEASE at frame %d of %d (want exactly one, directly after RESP_HEADER)", i, len(rep.Frames))
			}
			out = l
		}
	}
	return out
}

func (lf *leaseFixture) storedLease(cid string) *storage.LeaseRecord {
	lf.t.Helper()
	rec, err := lf.store.Leases.GetLease(context.Background(), "p1", cid)
	if err != nil {
		lf.t.Fatal(err)
	}
	return rec
}

func TestLeaseSlidesWithTheSameID(t *testing.T) {
	for _, be := range leaseBackends {
		t.Run(be.name, func(t *testing.T) {
			lf := newLeaseFixture(t, be.open(t), leaseTTL)
			a := lf.client("alice", "ca")
			rep, err := a.sync(&ssp2.PushCommit{ClientCommitID: "c1", Operations: []ssp2.Operation{upsert("tasks", "t1", lf.row("t1", "P", "one"), nil)}})
			if err != nil {
				t.Fatal(err)
			}
			first := leaseOf(t, rep)
			start := lf.clk.Now().UnixMilli()
			if first == nil || first.LeaseID == "" || first.ExpiresAtMs != start+leaseTTL.Milliseconds() {
				t.Fatalf("first LEASE %+v, want expiry %d", first, start+leaseTTL.Milliseconds())
			}
			cases := []struct {
				name    string
				advance time.Duration
				// slid: the expiry moves to now+TTL (a write); otherwise the
				// stored expiry is sent again (lag below TTL/64, no write).
				slid bool
			}{
				{"within the granularity", leaseTTL / 128, false},
				{"a minute later", time.Minute, true},
				{"again within the granularity", time.Second, false},
				{"near expiry", leaseTTL - 2*time.Second, true},
			}
			prev := first
			for _, tc := range cases {
				lf.clk.advance(tc.advance)
				rep, err := a.sync(&ssp2.PullHeader{Accept: 1}, sub("s", -1, "P"))
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				l := leaseOf(t, rep)
				if l == nil || l.LeaseID != first.LeaseID {
					t.Fatalf("%s: LEASE %+v, want id %s", tc.name, l, first.LeaseID)
				}
				want := prev.ExpiresAtMs
				if tc.slid {
					want = lf.clk.Now().UnixMilli() + leaseTTL.Milliseconds()
				}
				if l.ExpiresAtMs != want {
					t.Fatalf("%s: expiry %d, want %d", tc.name, l.ExpiresAtMs, want)
				}
				if rec := lf.storedLease("ca"); rec == nil || rec.LeaseID != l.LeaseID || rec.ExpiresAtMs != l.ExpiresAtMs || rec.ActorID != "alice" {
					t.Fatalf("%s: stored %+v, sent %+v: the frame must carry the stored truth", tc.name, rec, l)
				}
				prev = l
			}
			// An expired lease is not slid: the next online round issues a
			// fresh one.
			lf.clk.advance(leaseTTL + time.Millisecond)
			rep, err = a.sync(&ssp2.PullHeader{Accept: 1}, sub("s", -1, "P"))
			if err != nil {
				t.Fatal(err)
			}
			if l := leaseOf(t, rep); l == nil || l.LeaseID == first.LeaseID || l.ExpiresAtMs != lf.clk.Now().UnixMilli()+leaseTTL.Milliseconds() {
				t.Fatalf("after expiry: LEASE %+v, want a fresh id", l)
			}
		})
	}
}

func TestLeaseNotSentOnFloorOrFailedResolver(t *testing.T) {
	for _, be := range leaseBackends {
		t.Run(be.name, func(t *testing.T) {
			lf := newLeaseFixture(t, be.open(t), leaseTTL)
			a := lf.client("alice", "ca")
			// Floor round: a schema version this server does not know.
			a.sv = 9
			rep, err := a.sync(&ssp2.PullHeader{Accept: 1}, sub("s", -1, "P"))
			if err != nil || rep.Header().RequiredSchemaVersion == nil {
				t.Fatalf("floor round: %v %+v", err, rep)
			}
			if l := leaseOf(t, rep); l != nil {
				t.Fatalf("floor round sent LEASE %+v", l)
			}
			a.sv = 1
			lf.setFailing(true)
			rep, err = a.sync(&ssp2.PullHeader{Accept: 1}, sub("s", -1, "P"))
			if err != nil {
				t.Fatal(err)
			}
			if l := leaseOf(t, rep); l != nil {
				t.Fatalf("failed-resolver round sent LEASE %+v", l)
			}
			if s := sections(t, rep)["s"]; s.start.Status != ssp2.SubRevoked {
				t.Fatalf("failed resolver: subscription %+v, want revoked", s.start)
			}
			if rec := lf.storedLease("ca"); rec != nil {
				t.Fatalf("no successful round yet, but a lease is stored: %+v", rec)
			}
		})
	}
}

func TestLeaseOutage(t *testing.T) {
	for _, be := range leaseBackends {
		t.Run(be.name, func(t *testing.T) {
			lf := newLeaseFixture(t, be.open(t), leaseTTL)
			lf.allow("alice", map[string][]string{"project_id": {"P"}})
			a := lf.client("alice", "ca")
			a.push("c1", upsert("tasks", "t1", lf.row("t1", "P", "one"), nil))
			issued := lf.storedLease("ca")
			if issued == nil {
				t.Fatal("no lease stored after an authorized round")
			}
			lf.setOutage(true)
			lf.clk.advance(leaseTTL / 2)

			// Within the TTL: authorized by the lease's scopes, no LEASE, no slide.
			rep, err := a.sync(&ssp2.PushCommit{ClientCommitID: "c2", Operations: []ssp2.Operation{upsert("tasks", "t2", lf.row("t2", "P", "offline"), nil)}},
				&ssp2.PushCommit{ClientCommitID: "c3", Operations: []ssp2.Operation{upsert("tasks", "t3", lf.row("t3", "Q", "not granted"), nil)}})
			if err != nil {
				t.Fatalf("outage round within the TTL: %v", err)
			}
			if l := leaseOf(t, rep); l != nil {
				t.Fatalf("outage round sent LEASE %+v", l)
			}
			rs := results(rep)
			if len(rs) != 2 || rs[0].Status != ssp2.CommitApplied || rs[1].Status != ssp2.CommitRejected || rs[1].Results[0].Code != string(syncerr.Forbidden) {
				t.Fatalf("outage push results %+v %+v: want c2 applied (granted P), c3 forbidden (Q not in the lease)", rs[0], rs[1])
			}
			s := a.pull(ssp2.PullHeader{Accept: 1}, sub("s", -1, "P"))["s"]
			if s.start.Status != ssp2.SubActive || len(s.rows) != 2 {
				t.Fatalf("outage pull: %+v with %d rows, want active with t1, t2", s.start, len(s.rows))
			}
			if rec := lf.storedLease("ca"); rec.ExpiresAtMs != issued.ExpiresAtMs || rec.LeaseID != issued.LeaseID {
				t.Fatalf("outage rounds refreshed the lease: %+v, was %+v", rec, issued)
			}

			// A client that never held a lease.
			b := lf.client("bob", "cb")
			_, err = b.sync(&ssp2.PullHeader{Accept: 1}, sub("s", -1, "P"))
			wantCode(t, err, syncerr.AuthLeaseRequired)

			// Past the TTL (counted from the last slide, not refreshed by
			// the outage rounds).
			lf.clk.advance(leaseTTL/2 + time.Millisecond)
			_, err = a.sync(&ssp2.PushCommit{ClientCommitID: "c4", Operations: []ssp2.Operation{upsert("tasks", "t4", lf.row("t4", "P", "too late"), nil)}})
			wantCode(t, err, syncerr.AuthLeaseRequired)
			if rows := lf.rowIDs(); fmt.Sprint(rows) != "[t1 t2]" {
				t.Fatalf("rows after the refused round: %v", rows)
			}

			// Recovery: the resolver is back, a fresh lease is issued.
			lf.setOutage(false)
			rep, err = a.sync(&ssp2.PushCommit{ClientCommitID: "c4", Operations: []ssp2.Operation{upsert("tasks", "t4", lf.row("t4", "P", "later"), nil)}})
			if err != nil || results(rep)[0].Status != ssp2.CommitApplied {
				t.Fatalf("after recovery: %v", err)
			}
			if l := leaseOf(t, rep); l == nil || l.LeaseID == issued.LeaseID {
				t.Fatalf("after recovery: LEASE %+v, want a fresh id (the old one expired)", l)
			}
		})
	}
}

func (f *fixture) rowIDs() []string {
	f.t.Helper()
	rows, err := f.store.Rows.ScanRows(context.Background(), "p1", storage.RowQuery{Table: f.schema.Table("tasks"), Scopes: map[string][]string{}, Limit: 100})
	if err != nil {
		f.t.Fatal(err)
	}
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.RowID)
	}
	return ids
}

func TestLeaseRevocation(t *testing.T) {
	for _, be := range leaseBackends {
		t.Run(be.name, func(t *testing.T) {
			lf := newLeaseFixture(t, be.open(t), leaseTTL)
			a := lf.client("alice", "ca")
			a.push("c1", upsert("tasks", "t1", lf.row("t1", "P", "one"), nil))
			s := a.pull(ssp2.PullHeader{Accept: 1}, sub("s", -1, "P"))["s"]
			cursor := s.end.NextCursor
			held := lf.storedLease("ca")

			ctx := context.Background()
			id, err := lf.eng.Leases().Revoke(ctx, "p1", "ca")
			if err != nil || id != held.LeaseID {
				t.Fatalf("RevokeLease = %q, %v; want %q", id, err, held.LeaseID)
			}
			if _, err := lf.eng.Leases().Revoke(ctx, "p1", "ca"); err != nil {
				t.Fatalf("revoking again: %v", err)
			}
			if _, err := lf.eng.Leases().Revoke(ctx, "p1", "nobody"); err != lease.ErrNoLease {
				t.Fatalf("revoking a client without a lease: %v, want ErrNoLease", err)
			}
			if err := lf.eng.Leases().RevokeID(ctx, "p1", "no-such-id"); err != lease.ErrNoLease {
				t.Fatalf("revoking an unknown id: %v, want ErrNoLease", err)
			}

			lf.setOutage(true)
			_, err = a.sync(&ssp2.PushCommit{ClientCommitID: "c2", Operations: []ssp2.Operation{upsert("tasks", "t2", lf.row("t2", "P", "blocked"), nil)}})
			wantCode(t, err, syncerr.AuthLeaseRevoked)
			if rows := lf.rowIDs(); fmt.Sprint(rows) != "[t1]" {
				t.Fatalf("rows after the revoked round: %v (the write must not land, nothing purged)", rows)
			}

			// Nothing of the client was purged: its binding, cursor and
			// rows stay; back online it continues incrementally from its
			// cursor with a fresh lease.
			lf.setOutage(false)
			rep, err := a.sync(&ssp2.PullHeader{Accept: 1}, sub("s", cursor, "P"))
			if err != nil {
				t.Fatal(err)
			}
			s = sections(t, rep)["s"]
			if s.start.Status != ssp2.SubActive || s.start.Bootstrap || s.end.NextCursor != cursor {
				t.Fatalf("after revocation the client's pull is %+v / %+v, want an incremental continuation at %d", s.start, s.end, cursor)
			}
			l := leaseOf(t, rep)
			if l == nil || l.LeaseID == held.LeaseID {
				t.Fatalf("after revocation: LEASE %+v, want a fresh id", l)
			}
			// Revocation by id (the admin surface's form) of the fresh one.
			if err := lf.eng.Leases().RevokeID(ctx, "p1", l.LeaseID); err != nil {
				t.Fatal(err)
			}
			lf.setOutage(true)
			_, err = a.sync(&ssp2.PullHeader{Accept: 1}, sub("s", cursor, "P"))
			wantCode(t, err, syncerr.AuthLeaseRevoked)
		})
	}
}

func TestLeaseTamperedRecordIsNoLease(t *testing.T) {
	for _, be := range leaseBackends {
		t.Run(be.name, func(t *testing.T) {
			lf := newLeaseFixture(t, be.open(t), leaseTTL)
			lf.allow("alice", map[string][]string{"project_id": {"P"}})
			a := lf.client("alice", "ca")
			a.push("c1", upsert("tasks", "t1", lf.row("t1", "P", "one"), nil))
			rec := lf.storedLease("ca")
			// Widen the stored grant without the key.
			forged := *rec
			forged.AllowedScopes = []byte(`{"project_id":["*"]}`)
			if ok, err := lf.store.Leases.SwapLease(context.Background(), "p1", forged, rec.MAC); !ok || err != nil {
				t.Fatalf("tamper: %v %v", ok, err)
			}
			lf.setOutage(true)
			_, err := a.sync(&ssp2.PushCommit{ClientCommitID: "c2", Operations: []ssp2.Operation{upsert("tasks", "t2", lf.row("t2", "Q", "escalated"), nil)}})
			wantCode(t, err, syncerr.AuthLeaseRequired)
			if _, err := lf.eng.Leases().Revoke(context.Background(), "p1", "ca"); err != lease.ErrNoLease {
				t.Fatalf("revoking a tampered record: %v, want ErrNoLease", err)
			}
			lf.setOutage(false)
			rep, err := a.sync(&ssp2.PullHeader{Accept: 1}, sub("s", -1, "P"))
			if err != nil {
				t.Fatal(err)
			}
			if l := leaseOf(t, rep); l == nil || l.LeaseID == rec.LeaseID {
				t.Fatalf("online round after tampering: LEASE %+v, want a fresh lease replacing the refused record", l)
			}
			if got := lf.storedLease("ca"); string(got.AllowedScopes) != `{"project_id":["P"]}` {
				t.Fatalf("stored grant %s after re-issue", got.AllowedScopes)
			}
		})
	}
}

func TestLeasesOff(t *testing.T) {
	for _, be := range leaseBackends {
		t.Run(be.name, func(t *testing.T) {
			lf := newLeaseFixture(t, be.open(t), 0)
			a := lf.client("alice", "ca")
			for i, frames := range [][]ssp2.Frame{
				{&ssp2.PushCommit{ClientCommitID: "c1", Operations: []ssp2.Operation{upsert("tasks", "t1", lf.row("t1", "P", "one"), nil)}}},
				{&ssp2.PullHeader{Accept: 1}, sub("s", -1, "P")},
				{&ssp2.PullHeader{Accept: 1}},
			} {
				rep, err := a.sync(frames...)
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range rep.Frames {
					if _, ok := f.(*ssp2.Lease); ok {
						t.Fatalf("round %d: leases off, but LEASE sent", i)
					}
				}
			}
			if rec := lf.storedLease("ca"); rec != nil {
				t.Fatalf("leases off, but a lease is stored: %+v", rec)
			}
			if _, err := lf.eng.Leases().Revoke(context.Background(), "p1", "ca"); err != lease.ErrLeasesOff {
				t.Fatalf("RevokeLease with leases off: %v", err)
			}
			lf.setOutage(true)
			_, err := a.sync(&ssp2.PullHeader{Accept: 1}, sub("s", -1, "P"))
			wantCode(t, err, syncerr.AuthLeaseRequired)
		})
	}
}

// Two engines on one PostgreSQL database with the same key share leases:
// one issues, the other authorizes an outage round with it and revokes it,
// and the first then refuses it; an engine with another key refuses them.
func TestLeaseSharedAcrossProcesses(t *testing.T) {
	schemaName := pgtest.NewSchema(t)
	fa := newLeaseFixture(t, pgtest.OpenSchema(t, schemaName, postgres.Options{MaxConns: 4}), leaseTTL)
	fb := newLeaseFixture(t, pgtest.OpenSchema(t, schemaName, postgres.Options{MaxConns: 4}), leaseTTL)
	a := fa.client("alice", "ca")
	a.push("c1", upsert("tasks", "t1", fa.row("t1", "P", "one"), nil))
	held := fa.storedLease("ca")

	onB := *a
	onB.f = fb.fixture
	fb.setOutage(true)
	if pr := onB.push("c2", upsert("tasks", "t2", fa.row("t2", "P", "via b"), nil)); pr.Status != ssp2.CommitApplied {
		t.Fatalf("outage round on the other process: %+v", pr)
	}
	if _, err := fb.eng.Leases().Revoke(context.Background(), "p1", "ca"); err != nil {
		t.Fatal(err)
	}
	fa.setOutage(true)
	_, err := a.sync(&ssp2.PullHeader{Accept: 1}, sub("s", -1, "P"))
	wantCode(t, err, syncerr.AuthLeaseRevoked)

	// Online on A again: a fresh lease, which B (same key) honours.
	fa.setOutage(false)
	rep, err := a.sync(&ssp2.PullHeader{Accept: 1}, sub("s", -1, "P"))
	if err != nil {
		t.Fatal(err)
	}
	if l := leaseOf(t, rep); l == nil || l.LeaseID == held.LeaseID {
		t.Fatalf("after revocation on the other process: LEASE %+v, want a fresh id", l)
	}
	if _, err := onB.sync(&ssp2.PullHeader{Accept: 1}, sub("s", -1, "P")); err != nil {
		t.Fatalf("B with the shared key: %v", err)
	}

	// A process with another key refuses the records.
	fc := newFixture(t, pgtest.OpenSchema(t, schemaName, postgres.Options{MaxConns: 4}), func(c *engine.Config) {
		c.Leases.TTL, c.Leases.Key = leaseTTL, []byte("another key of at least thirty-two bytes")
		c.Resolver = engine.ScopeResolverFunc(func(context.Context, engine.Identity) (map[string][]string, error) {
			return nil, engine.ErrResolverOutage
		})
	})
	onC := *a
	onC.f = fc
	_, err = onC.sync(&ssp2.PullHeader{Accept: 1}, sub("s", -1, "P"))
	wantCode(t, err, syncerr.AuthLeaseRequired)
}
