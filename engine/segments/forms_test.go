package segments_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"go.uber.org/zap"

	"github.com/synclane/synclane/engine/access"
	"github.com/synclane/synclane/engine/segments"
	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/segstore"
	"github.com/synclane/synclane/storage/segstore/sqlitefile"
)

// countingStore is the embedded segment store counting the reads of
// segments' own bytes (Get, OpenFile) and of their forms (OpenForm).
type countingStore struct {
	*sqlitefile.Store
	byteReads, formReads atomic.Int64
}

func (c *countingStore) OpenForm(ctx context.Context, id, enc string) ([]byte, *os.File, error) {
	c.formReads.Add(1)
	return c.Store.OpenForm(ctx, id, enc)
}

func (c *countingStore) Get(ctx context.Context, part, id string, nowMs int64) ([]segstore.Publication, []byte, error) {
	c.byteReads.Add(1)
	return c.Store.Get(ctx, part, id, nowMs)
}

func (c *countingStore) OpenFile(ctx context.Context, part, id string, nowMs int64) ([]segstore.Publication, *os.File, error) {
	c.byteReads.Add(1)
	return c.Store.OpenFile(ctx, part, id, nowMs)
}

// TestStoredFormServedFromPublications: once a segment's zstd form is
// stored, a download accepting zstd is authorized from the publications
// and sent the form without the segment's bytes being read, on both
// routes; every refusal the bytes path gives (another partition, other
// scopes, a signed URL of another partition's audience, an older log
// epoch) is still given, also without reading them.
func TestStoredFormServedFromPublications(t *testing.T) {
	ctx := context.Background()
	sch := schema.MustDemo()
	ms := atomic.Int64{}
	ms.Store(1_000_000_000)
	now := func() time.Time { return time.UnixMilli(ms.Load()) }
	be := memory.New().Backend()
	if err := be.Lifecycle.EnsureSchema(ctx, sch); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"A", "B"} {
		if _, err := be.Log.TouchPartition(ctx, p, ms.Load()); err != nil {
			t.Fatal(err)
		}
	}
	sf, err := sqlitefile.Open(ctx, filepath.Join(t.TempDir(), "segments.db"))
	if err != nil {
		t.Fatal(err)
	}
	store := &countingStore{Store: sf}
	signer := segstore.NewSigner([]byte(strings.Repeat("k", 32)), 10*time.Minute, now)
	svc := segments.New(segments.Options{Store: store, TTL: time.Hour, HotBytes: -1},
		segments.Deps{Schema: sch, Resolver: access.AllowAll(sch), Epochs: be.Log, SignedURLs: signer,
			PublicURL: func() string { return "http://x" }, Now: now, Logger: zap.NewNop()})
	t.Cleanup(svc.Close)
	pc := &partition.Config{}
	svc.Configure(pc)
	info, err := be.Log.ReadPartition(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("a page of rows published in A; "), 4000)
	digest := ssp2.ScopeDigest(map[string][]string{"list_id": {"L"}})
	m, _, err := pc.Segments.Obtain(ctx, "A", segstore.KeyParts{Table: "todos", ScopeDigest: digest, AsOfCommitSeq: 1,
		PageRows: 1000, SchemaVersion: sch.Version, LogEpoch: info.LogEpoch, Lane: "ref"},
		func(context.Context) (segstore.Built, error) {
			return segstore.Built{Meta: segstore.Meta{MediaType: ssp2.MediaRows, Table: "todos", ScopeDigest: digest, AsOfCommitSeq: 1, RowCount: 1}, Data: data}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	want := segments.FormWanted{Encoding: segstore.EncodingZstd, MinBytes: 1400}
	direct := func(part string, lists ...string) (*segments.Segment, error) {
		return svc.GetForm(ctx, access.Identity{ActorID: "reader", Partition: part}, m.ID, map[string][]string{"list_id": lists}, want)
	}
	signed := func(part string) (*segments.Segment, error) {
		tok, _ := signer.Sign(part, m.ID, digest)
		return svc.GetSignedForm(ctx, m.ID, tok, want)
	}

	// No form stored yet: the bytes are read, and the form built from them.
	seg, err := direct("A", "L")
	if err != nil || seg.Form != nil || (seg.File == nil && seg.Data == nil) {
		t.Fatalf("first download: %v, %+v", err, seg)
	}
	f, err := svc.Form(ctx, seg, segstore.EncodingZstd)
	if err != nil || !f.Stored {
		t.Fatalf("building the form: %v (stored %v)", err, f.Stored)
	}
	_ = f.Close()
	_ = seg.Close()
	if store.byteReads.Load() == 0 {
		t.Fatal("the first download read no bytes")
	}

	store.byteReads.Store(0)
	for _, c := range []struct {
		name string
		get  func() (*segments.Segment, error)
		want syncerr.Code
	}{
		{"publisher, direct", func() (*segments.Segment, error) { return direct("A", "L") }, ""},
		{"publisher, signed", func() (*segments.Segment, error) { return signed("A") }, ""},
		{"publisher, other scopes", func() (*segments.Segment, error) { return direct("A", "L", "M") }, syncerr.Forbidden},
		{"other partition, direct", func() (*segments.Segment, error) { return direct("B", "L") }, syncerr.NotFound},
		{"other partition, signed", func() (*segments.Segment, error) { return signed("B") }, syncerr.NotFound},
	} {
		seg, err := c.get()
		if got := syncerr.CodeOf(err); err != nil && got != c.want || err == nil && c.want != "" {
			t.Fatalf("%s: %v, want %q", c.name, err, c.want)
		}
		if err == nil {
			if seg.Form == nil || seg.File != nil || seg.Data != nil {
				t.Fatalf("%s: not served as the stored form: %+v", c.name, seg)
			}
			if got := decodeZstd(t, seg.Form); !bytes.Equal(got, data) {
				t.Fatalf("%s: the form decodes to %d other bytes", c.name, len(got))
			}
			_ = seg.Close()
		}
	}
	if n := store.byteReads.Load(); n != 0 {
		t.Fatalf("downloads of a stored form read the segment's bytes %d times", n)
	}

	// A rotation: the publication is of an older epoch, for every route.
	if _, err := be.Log.RotateLogEpoch(ctx, "A", ms.Load()); err != nil {
		t.Fatal(err)
	}
	for name, get := range map[string]func() (*segments.Segment, error){
		"direct": func() (*segments.Segment, error) { return direct("A", "L") },
		"signed": func() (*segments.Segment, error) { return signed("A") },
	} {
		if _, err := get(); syncerr.CodeOf(err) != syncerr.NotFound {
			t.Fatalf("%s after a rotation: %v, want not found", name, err)
		}
	}
	if n := store.byteReads.Load(); n != 0 {
		t.Fatalf("refusals read the segment's bytes %d times", n)
	}
	if st := svc.Stats(); st.FormsBuilt != 1 {
		t.Fatalf("forms built: %d, want 1", st.FormsBuilt)
	}
}

// decodeZstd returns the bytes form f decodes to.
func decodeZstd(t *testing.T, f *segstore.Form) []byte {
	t.Helper()
	var r io.Reader = bytes.NewReader(f.Data)
	if f.File != nil {
		r = f.File
	}
	zr, err := zstd.NewReader(r)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestHotFormServedFromMemory: with the hot set on, once a hot segment's
// zstd form is built and stored, its compressed downloads read neither the
// segment's bytes nor its form from the store (the embedded store keeps
// forms in files): the form comes from the hot set, the same bytes as the
// stored file.
func TestHotFormServedFromMemory(t *testing.T) {
	ctx := context.Background()
	sch := schema.MustDemo()
	be := memory.New().Backend()
	if err := be.Lifecycle.EnsureSchema(ctx, sch); err != nil {
		t.Fatal(err)
	}
	info, err := be.Log.TouchPartition(ctx, "A", time.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	sf, err := sqlitefile.Open(ctx, filepath.Join(t.TempDir(), "segments.db"))
	if err != nil {
		t.Fatal(err)
	}
	store := &countingStore{Store: sf}
	svc := segments.New(segments.Options{Store: store, TTL: time.Hour, HotBytes: 1 << 20},
		segments.Deps{Schema: sch, Resolver: access.AllowAll(sch), Epochs: be.Log, Logger: zap.NewNop()})
	t.Cleanup(svc.Close)
	pc := &partition.Config{}
	svc.Configure(pc)
	data := bytes.Repeat([]byte("a hot page of rows; "), 4000)
	digest := ssp2.ScopeDigest(map[string][]string{"list_id": {"L"}})
	m, _, err := pc.Segments.Obtain(ctx, "A", segstore.KeyParts{Table: "todos", ScopeDigest: digest, AsOfCommitSeq: 1,
		PageRows: 1000, SchemaVersion: sch.Version, LogEpoch: info.LogEpoch, Lane: "ref"},
		func(context.Context) (segstore.Built, error) {
			return segstore.Built{Meta: segstore.Meta{MediaType: ssp2.MediaRows, Table: "todos", ScopeDigest: digest, AsOfCommitSeq: 1, RowCount: 1}, Data: data}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	get := func(want segments.FormWanted) *segments.Segment {
		t.Helper()
		seg, err := svc.GetForm(ctx, access.Identity{ActorID: "reader", Partition: "A"}, m.ID, map[string][]string{"list_id": {"L"}}, want)
		if err != nil {
			t.Fatal(err)
		}
		return seg
	}
	for range 2 { // the second download keeps the segment hot
		_ = get(segments.FormWanted{}).Close()
	}
	seg := get(segments.FormWanted{})
	f, err := svc.Form(ctx, seg, segstore.EncodingZstd)
	if err != nil || !f.Stored {
		t.Fatalf("building the form: %v (stored %v)", err, f.Stored)
	}
	_ = f.Close()
	_ = seg.Close()
	_, file, err := sf.OpenForm(ctx, m.ID, segstore.EncodingZstd)
	if err != nil || file == nil {
		t.Fatalf("the stored form: %v, file %v", err, file)
	}
	stored, err := io.ReadAll(file)
	_ = file.Close()
	if err != nil {
		t.Fatal(err)
	}
	store.byteReads.Store(0)
	store.formReads.Store(0)
	for i := range 3 {
		seg := get(segments.FormWanted{Encoding: segstore.EncodingZstd})
		if seg.Form == nil || seg.Form.File != nil || !bytes.Equal(seg.Form.Data, stored) || seg.Form.Size != int64(len(stored)) {
			t.Fatalf("download %d: not the stored form from memory: %+v", i, seg.Form)
		}
		_ = seg.Close()
	}
	if n, b := store.formReads.Load(), store.byteReads.Load(); n != 0 || b != 0 {
		t.Fatalf("hot compressed downloads read %d forms and %d segments from the store", n, b)
	}
}
