package segstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/storage/segstore"
	"github.com/synclane/synclane/storage/segstore/pgseg"
	"github.com/synclane/synclane/storage/segstore/sqlitefile"
)

// storeFiles counts the segment files in the embedded store's directory.
func storeFiles(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// pageKey is the build key of one page under scope digest digest.
func pageKey(table, digest string) segstore.KeyParts {
	return segstore.KeyParts{Table: table, ScopeDigest: digest, AsOfCommitSeq: 7, PageRows: 100, SchemaVersion: 1, LogEpoch: "e", Lane: "rows"}
}

func builder(table, digest string, data []byte) func(context.Context) (segstore.Built, error) {
	return func(context.Context) (segstore.Built, error) {
		return segstore.Built{Meta: segstore.Meta{MediaType: ssp2.MediaRows, Table: table, ScopeDigest: digest, AsOfCommitSeq: 7, RowCount: 1}, Data: data}, nil
	}
}

// TestFakeScopeStormSharesOneCopy: 100 bootstraps whose scope sets differ
// only in values that select no rows build pages with identical bytes
// under 100 scope digests; every store keeps one copy of those bytes (one
// file on the embedded store, one object row on PostgreSQL), within a
// quota of a few pages, and each digest's publication is still listed for
// its own download.
func TestFakeScopeStormSharesOneCopy(t *testing.T) {
	ctx := context.Background()
	page := bytes.Repeat([]byte("row bytes "), 10_000) // 100 KB
	cases := []struct {
		name string
		open func(t *testing.T) (segstore.Store, string) // store, its file directory ("": none)
	}{
		{"memory", func(*testing.T) (segstore.Store, string) { return segstore.NewMemory(), "" }},
		{"sqlite", func(t *testing.T) (segstore.Store, string) {
			path := filepath.Join(t.TempDir(), "segments.db")
			s, err := sqlitefile.Open(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s, path + "-data"
		}},
		{"postgres", func(t *testing.T) (segstore.Store, string) {
			s, err := pgseg.Open(ctx, pgtest.Open(t).Pool())
			if err != nil {
				t.Fatal(err)
			}
			return s, ""
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, dir := c.open(t)
			clk := &clock{}
			clk.ms.Store(1_000_000)
			cache := segstore.NewCache(st, time.Hour, clk.now, nil)
			q := segstore.Quota{MaxBytes: 3 * int64(len(page)), MaxFiles: 3}
			if err := cache.SetQuota(q); err != nil {
				t.Fatal(err)
			}
			var id string
			for i := range 100 {
				d := fmt.Sprintf("digest-%03d", i)
				m, _, err := cache.Obtain(ctx, "p", pageKey("big", d), builder("big", d, page))
				if err != nil {
					t.Fatalf("bootstrap %d: %v", i, err)
				}
				id = m.ID
			}
			if dir != "" {
				if n := storeFiles(t, dir); n != 1 {
					t.Fatalf("%d segment files after 100 fake-scope bootstraps of one page, want 1", n)
				}
			}
			held, err := st.(segstore.Evicter).Held(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(held) != 1 || held[0].Bytes != int64(len(page)) {
				t.Fatalf("held %+v, want one segment of %d bytes", held, len(page))
			}
			if qs := cache.QuotaStats(); qs.StoreBytes > q.MaxBytes || qs.StoreFiles > int64(q.MaxFiles) || qs.Evicted != 0 {
				t.Fatalf("quota stats %+v over %+v", qs, q)
			}
			metas, data, err := cache.Get(ctx, "p", id)
			if err != nil || !bytes.Equal(data, page) || len(metas) != 100 {
				t.Fatalf("download: %v, %d entries", err, len(metas))
			}
		})
	}
}

// TestQuotaEvictsLeastRecentlyUsedUnpinned: over the quota, the least
// recently used segment not handed out within PinFor is evicted (its
// download answers ErrExpired, its key is built again); when every stored
// segment is pinned, the new one is not kept and Obtain answers
// sync.rate_limited, the pinned ones staying downloadable.
func TestQuotaEvictsLeastRecentlyUsedUnpinned(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			clk := &clock{}
			clk.ms.Store(1_000_000)
			cache := segstore.NewCache(open(t), time.Hour, clk.now, nil)
			if err := cache.SetQuota(segstore.Quota{MaxFiles: 3, PinFor: time.Minute}); err != nil {
				t.Fatal(err)
			}
			seg := func(i int) []byte { return []byte(fmt.Sprintf("segment %d bytes", i)) }
			ids := make([]string, 5)
			builds := 0
			obtain := func(i int) error {
				m, reused, err := cache.Obtain(ctx, "p", pageKey(fmt.Sprint("t", i), "d"), func(c context.Context) (segstore.Built, error) {
					builds++
					return builder(fmt.Sprint("t", i), "d", seg(i))(c)
				})
				if err == nil {
					ids[i] = m.ID
					_ = reused
				}
				return err
			}
			for i := range 3 {
				if err := obtain(i); err != nil {
					t.Fatal(err)
				}
			}
			// All three pinned (just handed out): a fourth is refused.
			err := obtain(3)
			if !errors.Is(err, segstore.ErrFull) || syncerr.As(err).Code != syncerr.RateLimited {
				t.Fatalf("fourth segment while all are pinned: %v, want ErrFull as %s", err, syncerr.RateLimited)
			}
			for i := range 3 {
				if _, _, err := cache.Get(ctx, "p", ids[i]); err != nil {
					t.Fatalf("pinned segment %d: %v", i, err)
				}
			}
			if _, _, err := cache.Get(ctx, "p", segstore.ID(seg(3))); err == nil {
				t.Fatal("the refused segment was kept")
			}
			// Pins lapse; segment 0 is downloaded again (most recently used).
			clk.ms.Add(2 * time.Minute.Milliseconds())
			if _, _, err := cache.Get(ctx, "p", ids[0]); err != nil {
				t.Fatal(err)
			}
			clk.ms.Add(1)
			if _, _, err := cache.Get(ctx, "p", ids[2]); err != nil {
				t.Fatal(err)
			}
			clk.ms.Add(1)
			if err := obtain(4); err != nil {
				t.Fatal(err)
			}
			// Segment 1 was the least recently used: evicted.
			if _, _, err := cache.Get(ctx, "p", ids[1]); !errors.Is(err, segstore.ErrExpired) {
				t.Fatalf("evicted segment: %v, want ErrExpired", err)
			}
			for _, i := range []int{0, 2, 4} {
				if _, _, err := cache.Get(ctx, "p", ids[i]); err != nil {
					t.Fatalf("segment %d: %v", i, err)
				}
			}
			qs := cache.QuotaStats()
			if qs.StoreFiles != 3 || qs.Evicted != 1 || qs.Refused != 1 {
				t.Fatalf("quota stats %+v", qs)
			}
			// The evicted page is built again by the next bootstrap needing it.
			before := builds
			clk.ms.Add(2 * time.Minute.Milliseconds())
			if err := obtain(1); err != nil || builds != before+1 {
				t.Fatalf("rebuild of the evicted page: %v, builds %d→%d", err, before, builds)
			}
			if _, _, err := cache.Get(ctx, "p", ids[1]); err != nil {
				t.Fatalf("rebuilt segment: %v", err)
			}
		})
	}
}

// TestSharedFileOutlivesAnExpiredEntry: on the embedded store two
// publications of the same bytes share one file; when the older expires
// and is swept the file stays for the newer one (the sweep drops no
// bytes), and goes when that one is swept too.
func TestSharedFileOutlivesAnExpiredEntry(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "segments.db")
	st, err := sqlitefile.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	clk := &clock{}
	clk.ms.Store(1_000_000)
	cache := segstore.NewCache(st, time.Hour, clk.now, nil)
	page := []byte("one page of rows")
	m1, _, err := cache.Obtain(ctx, "p", pageKey("t", "d1"), builder("t", "d1", page))
	if err != nil {
		t.Fatal(err)
	}
	clk.ms.Add(30 * time.Minute.Milliseconds())
	if _, _, err := cache.Obtain(ctx, "p", pageKey("t", "d2"), builder("t", "d2", page)); err != nil {
		t.Fatal(err)
	}
	if n := storeFiles(t, path+"-data"); n != 1 {
		t.Fatalf("%d files for one page under two digests", n)
	}
	clk.ms.Add(45 * time.Minute.Milliseconds()) // d1 expired, d2 not
	if n, err := cache.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	metas, data, err := cache.Get(ctx, "p", m1.ID)
	if err != nil || !bytes.Equal(data, page) || len(metas) != 1 || metas[0].ScopeDigest != "d2" {
		t.Fatalf("after the d1 entry expired: %v %q %+v", err, data, metas)
	}
	clk.ms.Add(time.Hour.Milliseconds())
	if n, err := cache.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("second sweep: %d %v", n, err)
	}
	if n := storeFiles(t, path+"-data"); n != 0 {
		t.Fatalf("%d files once every entry expired", n)
	}
}
