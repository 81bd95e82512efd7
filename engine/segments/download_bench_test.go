package segments_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine/access"
	"github.com/synclane/synclane/engine/segments"
	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/storage/segstore"
	"github.com/synclane/synclane/storage/segstore/pgseg"
	"github.com/synclane/synclane/storage/segstore/sqlitefile"
	"github.com/synclane/synclane/storage/sqlite"
)

// benchPair is a segment store with the storage backend whose log holds
// the partition's epoch (the pairs a server runs: memory and memory, the
// embedded SQLite file and SQLite, PostgreSQL and PostgreSQL).
type benchPair struct {
	name string
	open func(b *testing.B) (segstore.Store, storage.Backend)
}

func benchPairs(b *testing.B) []benchPair {
	pairs := []benchPair{
		{"memory", func(*testing.B) (segstore.Store, storage.Backend) {
			return segstore.NewMemory(), memory.New().Backend()
		}},
		{"sqlite", func(b *testing.B) (segstore.Store, storage.Backend) {
			dir := b.TempDir()
			st, err := sqlite.Open(context.Background(), filepath.Join(dir, "synclane.db"), sqlite.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = st.Close() })
			segs, err := sqlitefile.Open(context.Background(), filepath.Join(dir, "segments.db"))
			if err != nil {
				b.Fatal(err)
			}
			return segs, st.Backend()
		}},
	}
	if os.Getenv("SYNCLANE_TEST_POSTGRES") != "" {
		pairs = append(pairs, benchPair{"postgres", func(b *testing.B) (segstore.Store, storage.Backend) {
			st := pgtest.Open(b)
			segs, err := pgseg.Open(context.Background(), st.Pool())
			if err != nil {
				b.Fatal(err)
			}
			return segs, st.Backend()
		}})
	}
	return pairs
}

// BenchmarkSegmentDownload measures the authorization and read of one
// 64 KiB segment download (SPEC §5.5, Service.Get; §5.4, GetSigned) on
// each store, served from the hot set (a storm's later downloads) and
// from the store (hot set off): what a download costs the server before
// its bytes are written to the socket.
func BenchmarkSegmentDownload(b *testing.B) {
	for _, pair := range benchPairs(b) {
		for _, hot := range []struct {
			name  string
			bytes int
		}{{"hot", 0}, {"cold", -1}} {
			b.Run(pair.name+"/"+hot.name, func(b *testing.B) {
				ctx := context.Background()
				store, be := pair.open(b)
				sch := schema.MustDemo()
				signer := segstore.NewSigner([]byte(strings.Repeat("k", 32)), 10*time.Minute, nil)
				svc := segments.New(segments.Options{Store: store, HotBytes: hot.bytes},
					segments.Deps{Schema: sch, Resolver: access.AllowAll(sch), Epochs: be.Log, SignedURLs: signer,
						PublicURL: func() string { return "http://x" }, Now: time.Now, Logger: zap.NewNop()})
				b.Cleanup(svc.Close)
				if err := be.Lifecycle.EnsureSchema(ctx, sch); err != nil {
					b.Fatal(err)
				}
				info, err := be.Log.TouchPartition(ctx, "team", time.Now().UnixMilli())
				if err != nil {
					b.Fatal(err)
				}
				requested := map[string][]string{"list_id": {"L"}}
				digest := ssp2.ScopeDigest(requested)
				data := make([]byte, 64<<10)
				rng := rand.New(rand.NewPCG(1, 2))
				for i := range data {
					data[i] = byte(rng.Uint32())
				}
				pc := &partition.Config{}
				svc.Configure(pc)
				m, _, err := pc.Segments.Obtain(ctx, "team", segstore.KeyParts{Table: "todos", ScopeDigest: digest, AsOfCommitSeq: 1,
					PageRows: 1000, SchemaVersion: sch.Version, LogEpoch: info.LogEpoch, Lane: "ref"},
					func(context.Context) (segstore.Built, error) {
						return segstore.Built{Meta: segstore.Meta{MediaType: ssp2.MediaRows, Table: "todos", ScopeDigest: digest,
							AsOfCommitSeq: 1, RowCount: 1000}, Data: data}, nil
					})
				if err != nil {
					b.Fatal(err)
				}
				id := access.Identity{ActorID: "reader", Partition: "team"}
				tok, _ := signer.Sign("team", m.ID, digest)
				for _, route := range []struct {
					name string
					get  func() (*segments.Segment, error)
				}{
					{"direct", func() (*segments.Segment, error) { return svc.Get(ctx, id, m.ID, requested) }},
					{"signed", func() (*segments.Segment, error) { return svc.GetSigned(ctx, m.ID, tok) }},
				} {
					b.Run(route.name, func(b *testing.B) {
						b.ReportAllocs()
						for b.Loop() {
							seg, err := route.get()
							if err != nil {
								b.Fatal(err)
							}
							if seg.File == nil && len(seg.Data) != len(data) {
								b.Fatalf("%d bytes", len(seg.Data))
							}
							_ = seg.Close()
						}
					})
				}
			})
		}
	}
}
