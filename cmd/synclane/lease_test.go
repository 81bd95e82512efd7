package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/httperr"
	"github.com/synclane/synclane/transport/httpsync"
)

// leaseRound pushes one things row and returns the response message (nil
// and the coded error on a request-level failure).
func leaseRound(t *testing.T, c *httpsync.Client, id, ccid string) (*ssp2.Message, error) {
	t.Helper()
	payload, err := thingsCodec.AppendSparse(nil, ssp2.Row{id, "p1", nil, nil, nil, nil, nil, nil, nil}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return c.Do(context.Background(), &ssp2.PushCommit{ClientCommitID: ccid,
		Operations: []ssp2.Operation{{Table: "things", RowID: id, Op: ssp2.OpUpsert, Payload: payload}}})
}

func leaseFrame(t *testing.T, m *ssp2.Message) *ssp2.Lease {
	t.Helper()
	for i, f := range m.Frames {
		if l, ok := f.(*ssp2.Lease); ok {
			if i != 1 {
				t.Fatalf("LEASE at frame %d", i)
			}
			return l
		}
	}
	return nil
}

func thingIDs(t *testing.T, base string) []string {
	t.Helper()
	var rows []struct {
		RowID string `json:"rowId"`
	}
	if code := control(t, "GET", base+"/_test/rows/things", "", &rows); code != http.StatusOK {
		t.Fatalf("rows: %d", code)
	}
	ids := []string{}
	for _, r := range rows {
		ids = append(ids, r.RowID)
	}
	return ids
}

// TestLeaseOutageAndRevokeThroughProcess drives the lease flow through a
// real `synclane serve --test-control --lease-ttl` process: the outage
// and revoke endpoints, LEASE frames and the 401 lease codes on the wire.
func TestLeaseOutageAndRevokeThroughProcess(t *testing.T) {
	dir := t.TempDir()
	sf := filepath.Join(dir, "schema.json")
	if err := os.WriteFile(sf, []byte(allTypesSchema), 0o600); err != nil {
		t.Fatal(err)
	}
	const ttl = 15 * time.Minute
	p := startProc(t, "--data", dir, "--schema", sf, "--test-control", "--clock-ms", "1800000000000", "--lease-ttl", ttl.String())
	base := p.base
	if code := control(t, "PUT", base+"/_test/allowed-scopes/ada", `{"project_id":["p1"]}`, nil); code != http.StatusOK {
		t.Fatalf("allowed-scopes: %d", code)
	}
	c := newThingsClient(base, "ada", "c-ada")
	if err := c.Handshake(context.Background()); err != nil {
		t.Fatal(err)
	}
	m, err := leaseRound(t, c, "t1", "c1")
	if err != nil {
		t.Fatal(err)
	}
	l1 := leaseFrame(t, m)
	if l1 == nil || l1.ExpiresAtMs != 1_800_000_000_000+ttl.Milliseconds() {
		t.Fatalf("first LEASE %+v", l1)
	}
	if fi, err := os.Stat(filepath.Join(dir, "lease.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("lease key file: %v %v", fi, err)
	}

	// Slide: a minute later, same id, later expiry.
	control(t, "POST", base+"/_test/clock/advance", `{"ms":60000}`, nil)
	m, err = leaseRound(t, c, "t2", "c2")
	if err != nil {
		t.Fatal(err)
	}
	if l := leaseFrame(t, m); l == nil || l.LeaseID != l1.LeaseID || l.ExpiresAtMs != l1.ExpiresAtMs+60_000 {
		t.Fatalf("slid LEASE %+v, first %+v", l, l1)
	}

	// Outage within the TTL: authorized by the lease, no LEASE frame.
	if code := control(t, "POST", base+"/_test/resolver", `{"outage":true}`, nil); code != http.StatusOK {
		t.Fatalf("outage on: %d", code)
	}
	m, err = leaseRound(t, c, "t3", "c3")
	if err != nil {
		t.Fatalf("outage round within the TTL: %v", err)
	}
	if l := leaseFrame(t, m); l != nil {
		t.Fatalf("outage round sent LEASE %+v", l)
	}

	// Revoke through the control surface: the next outage round is 401
	// sync.auth_lease_revoked and nothing is purged.
	var e httperr.Body
	if code := control(t, "POST", base+"/_test/leases/no-such-lease/revoke", "", &e); code != http.StatusNotFound || e.Code != string(syncerr.NotFound) {
		t.Fatalf("unknown lease: %d %+v", code, e)
	}
	if code := control(t, "POST", base+"/_test/leases/"+l1.LeaseID+"/revoke", "", nil); code != http.StatusOK {
		t.Fatalf("revoke: %d", code)
	}
	_, err = leaseRound(t, c, "t4", "c4")
	var se *syncerr.Error
	if err == nil || syncerr.CodeOf(err) != syncerr.AuthLeaseRevoked {
		t.Fatalf("outage round on a revoked lease: %v", err)
	}
	if se = syncerr.As(err); se.Spec().HTTPStatus != http.StatusUnauthorized {
		t.Fatalf("revoked: %+v", se)
	}
	if got := thingIDs(t, base); len(got) != 3 {
		t.Fatalf("rows after revocation: %v, want t1 t2 t3 (nothing purged, t4 refused)", got)
	}

	// Online again: a fresh lease; then past its TTL in an outage → 401
	// sync.auth_lease_required.
	control(t, "POST", base+"/_test/resolver", `{"outage":false}`, nil)
	m, err = leaseRound(t, c, "t4", "c4")
	if err != nil {
		t.Fatal(err)
	}
	l2 := leaseFrame(t, m)
	if l2 == nil || l2.LeaseID == l1.LeaseID {
		t.Fatalf("after revocation: LEASE %+v, want a fresh id", l2)
	}
	control(t, "POST", base+"/_test/resolver", `{"outage":true}`, nil)
	control(t, "POST", base+"/_test/clock/advance", `{"ms":900001}`, nil)
	if _, err := leaseRound(t, c, "t5", "c5"); syncerr.CodeOf(err) != syncerr.AuthLeaseRequired {
		t.Fatalf("outage past the TTL: %v", err)
	}
	if got := thingIDs(t, base); len(got) != 4 {
		t.Fatalf("rows: %v", got)
	}
}
