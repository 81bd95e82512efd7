package httpsync_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
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
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
)

// discardResponse is a ResponseWriter that drops the body, so a benchmark
// measures the server's work for a download and none of a client's. It
// implements io.ReaderFrom as net/http's response does (sendfile).
type discardResponse struct {
	hdr    http.Header
	status int
	n      int64
}

func (d *discardResponse) Header() http.Header { return d.hdr }
func (d *discardResponse) WriteHeader(s int)   { d.status = s }
func (d *discardResponse) Write(p []byte) (int, error) {
	if d.status == 0 {
		d.status = http.StatusOK
	}
	d.n += int64(len(p))
	return len(p), nil
}
func (d *discardResponse) ReadFrom(r io.Reader) (int64, error) {
	n, err := io.Copy(io.Discard, struct{ io.Reader }{r})
	d.n += n
	return n, err
}

// benchSegmentBytes returns n bytes shaped like an SSG2 rows page (ids,
// list ids, titles from a small vocabulary, numbers): about as
// compressible as real rows.
func benchSegmentBytes(n int) []byte {
	words := []string{"buy", "milk", "call", "mom", "write", "report", "fix", "bug", "plan", "trip", "read", "book", "pay", "rent", "walk", "dog"}
	rng := rand.New(rand.NewPCG(7, 9))
	out := make([]byte, 0, n+64)
	for i := 0; len(out) < n; i++ {
		out = fmt.Appendf(out, "\x06t%07d\x01L\x1c%s %s %s %d\x00\x02%d\x08%d", i, words[rng.IntN(16)], words[rng.IntN(16)], words[rng.IntN(16)],
			rng.IntN(1000), rng.IntN(50), 1_700_000_000_000+int64(rng.IntN(1<<30)))
	}
	return out[:n]
}

// BenchmarkSegmentDownloadEncoded measures the server's CPU for one
// download of a 10 MB rows segment through SegmentHandler (auth, the
// publication check, the bytes written to a response that drops them) by
// a client accepting zstd, gzip or neither (identity), on the in-memory,
// the embedded (SQLite file) and, with SYNCLANE_TEST_POSTGRES, the
// PostgreSQL segment stores, served from the store
// (hot set off) and from memory (hot set on, a storm's later downloads).
func BenchmarkSegmentDownloadEncoded(b *testing.B) {
	const size = 10 << 20
	data := benchSegmentBytes(size)
	stores := []struct {
		name string
		open func(b *testing.B) segstore.Store
	}{
		{"memory", func(*testing.B) segstore.Store { return segstore.NewMemory() }},
		{"sqlitefile", func(b *testing.B) segstore.Store {
			s, err := sqlitefile.Open(context.Background(), filepath.Join(b.TempDir(), "segments.db"))
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
	}
	if os.Getenv("SYNCLANE_TEST_POSTGRES") != "" {
		stores = append(stores, struct {
			name string
			open func(b *testing.B) segstore.Store
		}{"postgres", func(b *testing.B) segstore.Store {
			s, err := pgseg.Open(context.Background(), pgtest.Open(b).Pool())
			if err != nil {
				b.Fatal(err)
			}
			return s
		}})
	}
	for _, st := range stores {
		for _, hot := range []struct {
			name  string
			bytes int
		}{{"cold", -1}, {"hot", 0}} {
			b.Run(st.name+"/"+hot.name, func(b *testing.B) {
				ctx := context.Background()
				be := memory.New().Backend()
				sch := schema.MustDemo()
				eng, err := engine.New(ctx, engine.Config{Schema: sch, Backend: be,
					Segments: segments.Options{Store: st.open(b), HotBytes: hot.bytes},
					Resolver: engine.ScopeResolverFunc(func(context.Context, engine.Identity) (map[string][]string, error) {
						return map[string][]string{"list_id": {"*"}}, nil
					})})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = eng.Close() })
				id := benchPublish(b, eng, be, sch, data)
				h := httpsync.NewSegmentHandler(eng, httpsync.Options{Auth: auth.DevAuth{}})
				scopes := string(ssp2.CanonicalScopesJSON(map[string][]string{"list_id": {"L"}}))
				for _, enc := range []string{"identity", "zstd", "gzip"} {
					b.Run(enc, func(b *testing.B) {
						req, _ := http.NewRequest(http.MethodGet, "/segments/"+id, nil)
						req.SetPathValue("id", id)
						req.Header.Set("X-Actor", "reader")
						req.Header.Set("X-Partition", "team")
						req.Header.Set(httpsync.ScopesHeader, scopes)
						if enc != "identity" {
							req.Header.Set("Accept-Encoding", enc)
						}
						var wire int64
						b.ReportAllocs()
						b.SetBytes(size)
						for b.Loop() {
							w := &discardResponse{hdr: http.Header{}}
							h.ServeHTTP(w, req)
							if w.status != http.StatusOK || w.n == 0 || (enc != "identity") != (w.hdr.Get("Content-Encoding") == enc) {
								b.Fatalf("status %d, %d bytes, encoding %q", w.status, w.n, w.hdr.Get("Content-Encoding"))
							}
							wire = w.n
						}
						b.ReportMetric(float64(wire), "wire-bytes")
					})
				}
			})
		}
	}
}

// benchPublish publishes data as a rows segment of partition "team" under
// the scope map {list_id: [L]} and returns its id.
func benchPublish(b *testing.B, eng *engine.Engine, be storage.Backend, sch *schema.Schema, data []byte) string {
	ctx := context.Background()
	info, err := be.Log.TouchPartition(ctx, "team", time.Now().UnixMilli())
	if err != nil {
		b.Fatal(err)
	}
	digest := ssp2.ScopeDigest(map[string][]string{"list_id": {"L"}})
	pc := &partition.Config{}
	eng.Segments().Configure(pc)
	m, _, err := pc.Segments.Obtain(ctx, "team", segstore.KeyParts{Table: "todos", ScopeDigest: digest, AsOfCommitSeq: 1,
		PageRows: 1000, SchemaVersion: sch.Version, LogEpoch: info.LogEpoch, Lane: "ref"},
		func(context.Context) (segstore.Built, error) {
			return segstore.Built{Meta: segstore.Meta{MediaType: ssp2.MediaRows, Table: "todos", ScopeDigest: digest,
				AsOfCommitSeq: 1, RowCount: 1000}, Data: data}, nil
		})
	if err != nil {
		b.Fatal(err)
	}
	return m.ID
}
