package segments_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine/access"
	"github.com/synclane/synclane/engine/segments"
	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/segstore"
)

// flakyEpochs is the backend's Log whose ReadPartition fails while down
// and runs during, when set, once before reading.
type flakyEpochs struct {
	storage.Log
	down   atomic.Bool
	during atomic.Pointer[func()]
}

func (f *flakyEpochs) ReadPartition(ctx context.Context, part string) (storage.PartitionInfo, error) {
	if fn := f.during.Swap(nil); fn != nil {
		(*fn)()
	}
	if f.down.Load() {
		return storage.PartitionInfo{}, errors.New("database unreachable")
	}
	return f.Log.ReadPartition(ctx, part)
}

// pubFixture is a segment service over the memory stores with a settable
// clock, partitions A and B touched.
type pubFixture struct {
	t      *testing.T
	svc    *segments.Service
	cache  *segstore.Cache
	log    *flakyEpochs
	signer *segstore.Signer
	ms     atomic.Int64
	sch    *schema.Schema
}

func newPubFixture(t *testing.T) *pubFixture {
	t.Helper()
	ctx := context.Background()
	f := &pubFixture{t: t, sch: schema.MustDemo()}
	f.ms.Store(1_000_000_000)
	now := func() time.Time { return time.UnixMilli(f.ms.Load()) }
	be := memory.New().Backend()
	if err := be.Lifecycle.EnsureSchema(ctx, f.sch); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"A", "B"} {
		if _, err := be.Log.TouchPartition(ctx, p, f.ms.Load()); err != nil {
			t.Fatal(err)
		}
	}
	f.log = &flakyEpochs{Log: be.Log}
	f.signer = segstore.NewSigner([]byte(strings.Repeat("k", 32)), 10*time.Minute, now)
	f.svc = segments.New(segments.Options{Store: segstore.NewMemory(), TTL: time.Hour},
		segments.Deps{Schema: f.sch, Resolver: access.AllowAll(f.sch), Epochs: f.log, SignedURLs: f.signer,
			PublicURL: func() string { return "http://x" }, Now: now, Logger: zap.NewNop()})
	t.Cleanup(f.svc.Close)
	pc := &partition.Config{}
	f.svc.Configure(pc)
	f.cache = pc.Segments
	return f
}

func (f *pubFixture) epoch(part string) string {
	f.t.Helper()
	info, err := f.log.Log.ReadPartition(context.Background(), part)
	if err != nil {
		f.t.Fatal(err)
	}
	return info.LogEpoch
}

// publish publishes data in part's live epoch under scopes {list_id:
// lists} (default L).
func (f *pubFixture) publish(part string, data []byte, lists ...string) segstore.Meta {
	f.t.Helper()
	if lists == nil {
		lists = []string{"L"}
	}
	digest := ssp2.ScopeDigest(map[string][]string{"list_id": lists})
	m, _, err := f.cache.Obtain(context.Background(), part, segstore.KeyParts{Table: "todos", ScopeDigest: digest, AsOfCommitSeq: 1,
		PageRows: 1000, SchemaVersion: f.sch.Version, LogEpoch: f.epoch(part), Lane: "ref"},
		func(context.Context) (segstore.Built, error) {
			return segstore.Built{Meta: segstore.Meta{MediaType: ssp2.MediaRows, Table: "todos", ScopeDigest: digest, AsOfCommitSeq: 1, RowCount: 1}, Data: data}, nil
		})
	if err != nil {
		f.t.Fatal(err)
	}
	return m
}

// direct downloads id as a caller of part requesting lists.
func (f *pubFixture) direct(part, id string, lists ...string) syncerr.Code {
	f.t.Helper()
	if lists == nil {
		lists = []string{"L"}
	}
	seg, err := f.svc.Get(context.Background(), access.Identity{ActorID: "reader", Partition: part}, id, map[string][]string{"list_id": lists})
	return served(f.t, seg, err, id)
}

// signed downloads id with a token for part's audience.
func (f *pubFixture) signed(part, id string) syncerr.Code {
	f.t.Helper()
	tok, _ := f.signer.Sign(part, id, ssp2.ScopeDigest(map[string][]string{"list_id": {"L"}}))
	seg, err := f.svc.GetSigned(context.Background(), id, tok)
	return served(f.t, seg, err, id)
}

// served is "" for a download of id's bytes, the error's code otherwise.
func served(t *testing.T, seg *segments.Segment, err error, id string) syncerr.Code {
	t.Helper()
	if err != nil {
		return syncerr.CodeOf(err)
	}
	b, err := seg.Bytes()
	if err != nil || segstore.ID(b) != id {
		t.Fatalf("served %d bytes that are not segment %s (%v)", len(b), id, err)
	}
	return ""
}

// TestPublicationAnswers (SPEC §5.5): the answer of each download route
// for each relation between the caller and the segment's publications.
// Only a caller of the publishing partition and live epoch learns that a
// segment expired or that its scopes do not match; everyone else gets
// sync.not_found, as for an id never stored.
func TestPublicationAnswers(t *testing.T) {
	f := newPubFixture(t)
	data := []byte("a page of rows published in A")
	m := f.publish("A", data)
	unknown := "sha256:" + strings.Repeat("1", 64)
	for _, c := range []struct {
		name string
		got  syncerr.Code
		want syncerr.Code
	}{
		{"publisher, direct", f.direct("A", m.ID), ""},
		{"publisher, signed", f.signed("A", m.ID), ""},
		{"publisher, again (hot), direct", f.direct("A", m.ID), ""},
		{"publisher, other scopes", f.direct("A", m.ID, "L", "M"), syncerr.Forbidden},
		{"other partition, direct", f.direct("B", m.ID), syncerr.NotFound},
		{"other partition, signed", f.signed("B", m.ID), syncerr.NotFound},
		{"other partition, other scopes", f.direct("B", m.ID, "M"), syncerr.NotFound},
		{"unknown id, direct", f.direct("A", unknown), syncerr.NotFound},
		{"unknown id, signed", f.signed("A", unknown), syncerr.NotFound},
		{"partition never touched, direct", f.direct("C", m.ID), syncerr.NotFound},
	} {
		if c.got != c.want {
			t.Errorf("%s: %q, want %q", c.name, c.got, c.want)
		}
	}
	// Expired: the publisher learns it, nobody else does.
	f.ms.Add(time.Hour.Milliseconds())
	if got := f.direct("A", m.ID); got != syncerr.SegmentExpired {
		t.Errorf("publisher after expiry, direct: %q", got)
	}
	if got := f.signed("A", m.ID); got != syncerr.SegmentExpired {
		t.Errorf("publisher after expiry, signed: %q", got)
	}
	if got := f.direct("B", m.ID); got != syncerr.NotFound {
		t.Errorf("other partition after expiry: %q", got)
	}
}

// TestPublicationEpochs: a rotation makes A's publication one of an older
// epoch (sync.not_found on both routes, also once it expired, and also
// when the hot set kept it), B's publication of the same bytes stays
// served, and A's publication in the new epoch is served (also when the
// hot set kept the list of the older epoch). A failing epoch read answers
// sync.internal_error, and the next download is served.
func TestPublicationEpochs(t *testing.T) {
	ctx := context.Background()
	f := newPubFixture(t)
	data := []byte("the same page in A and B")
	m := f.publish("A", data)
	f.publish("B", data)
	for range 3 { // kept hot
		if got := f.direct("A", m.ID); got != "" {
			t.Fatalf("before the rotation: %q", got)
		}
		if got := f.signed("A", m.ID); got != "" {
			t.Fatalf("before the rotation, signed: %q", got)
		}
	}
	if _, err := f.log.Log.RotateLogEpoch(ctx, "A", f.ms.Load()); err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]syncerr.Code{
		"A, direct": f.direct("A", m.ID), "A, signed": f.signed("A", m.ID),
	} {
		if got != syncerr.NotFound {
			t.Errorf("%s after A's rotation: %q, want not found", name, got)
		}
	}
	if got, got2 := f.direct("B", m.ID), f.signed("B", m.ID); got != "" || got2 != "" {
		t.Errorf("B after A's rotation: %q, %q; want served", got, got2)
	}
	f.ms.Add(time.Hour.Milliseconds()) // every publication expired
	if got := f.direct("A", m.ID); got != syncerr.NotFound {
		t.Errorf("A's expired publication of an older epoch: %q, want not found (not expired)", got)
	}
	if got := f.direct("B", m.ID); got != syncerr.SegmentExpired {
		t.Errorf("B's expired publication: %q, want expired", got)
	}
	m2 := f.publish("A", data) // A's next pull, in its new epoch
	if m2.ID != m.ID || m2.LogEpoch == m.LogEpoch {
		t.Fatalf("republished %s in epoch %q (was %s in %q)", m2.ID, m2.LogEpoch, m.ID, m.LogEpoch)
	}
	if got, got2 := f.direct("A", m.ID), f.signed("A", m.ID); got != "" || got2 != "" {
		t.Errorf("A in its new epoch: %q, %q; want served", got, got2)
	}
	f.log.down.Store(true)
	if got := f.direct("A", m.ID); got != syncerr.InternalError {
		t.Errorf("epoch read failing: %q, want internal error", got)
	}
	if got := f.signed("A", m.ID); got != syncerr.InternalError {
		t.Errorf("epoch read failing, signed: %q, want internal error", got)
	}
	f.log.down.Store(false)
	for range 3 { // kept hot again, with its publication list of this epoch
		if got := f.direct("A", m.ID); got != "" {
			t.Fatalf("after the epoch read recovered: %q", got)
		}
	}
	// Rotated and published again at once: the list kept hot predates the
	// new publication, which must still be found.
	if _, err := f.log.Log.RotateLogEpoch(ctx, "A", f.ms.Load()); err != nil {
		t.Fatal(err)
	}
	f.publish("A", data)
	if got := f.direct("A", m.ID); got != "" {
		t.Errorf("A's publication made while an older list was kept hot: %q, want served", got)
	}
}

// TestStaleKeptListDroppedByAnother: a download refused by the list kept
// in memory opens the segment again even when a concurrent download
// dropped that list first (its own Forget then finds nothing to drop):
// the publication made since the list was kept serves it. (The epoch read
// between the two is where a concurrent download drops the list here.)
func TestStaleKeptListDroppedByAnother(t *testing.T) {
	f := newPubFixture(t)
	data := []byte("one page under two scope digests")
	m := f.publish("A", data)
	for range 3 { // kept hot with one publication
		if got := f.direct("A", m.ID); got != "" {
			t.Fatalf("download: %q", got)
		}
	}
	f.publish("A", data, "L", "M") // the same bytes, another digest
	drop := func() { f.cache.Forget("A", m.ID) }
	f.log.during.Store(&drop)
	if got := f.direct("A", m.ID, "L", "M"); got != "" {
		t.Fatalf("the second digest's download: %q, want served", got)
	}
	if f.log.during.Load() != nil {
		t.Fatal("the concurrent drop did not run")
	}
}

// TestNoEpochReaderFailsClosed: a service built without Deps.Epochs
// serves no download (sync.internal_error), on either route.
func TestNoEpochReaderFailsClosed(t *testing.T) {
	sch := schema.MustDemo()
	signer := segstore.NewSigner([]byte(strings.Repeat("k", 32)), time.Minute, nil)
	svc := segments.New(segments.Options{Store: segstore.NewMemory()},
		segments.Deps{Schema: sch, Resolver: access.AllowAll(sch), SignedURLs: signer, Now: time.Now, Logger: zap.NewNop()})
	t.Cleanup(svc.Close)
	pc := &partition.Config{}
	svc.Configure(pc)
	digest := ssp2.ScopeDigest(map[string][]string{"list_id": {"L"}})
	m, _, err := pc.Segments.Obtain(context.Background(), "A", segstore.KeyParts{Table: "todos", ScopeDigest: digest, LogEpoch: "e", Lane: "ref"},
		func(context.Context) (segstore.Built, error) {
			return segstore.Built{Meta: segstore.Meta{MediaType: ssp2.MediaRows, Table: "todos", ScopeDigest: digest}, Data: []byte("x")}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.Get(context.Background(), access.Identity{ActorID: "a", Partition: "A"}, m.ID, map[string][]string{"list_id": {"L"}})
	if syncerr.CodeOf(err) != syncerr.InternalError {
		t.Fatalf("direct: %v, want internal error", err)
	}
	tok, _ := signer.Sign("A", m.ID, digest)
	if _, err := svc.GetSigned(context.Background(), m.ID, tok); syncerr.CodeOf(err) != syncerr.InternalError {
		t.Fatalf("signed: %v, want internal error", err)
	}
}
