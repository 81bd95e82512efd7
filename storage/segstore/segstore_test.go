package segstore_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/storage/segstore"
	"github.com/synclane/synclane/storage/segstore/pgseg"
	"github.com/synclane/synclane/storage/segstore/sqlitefile"
)

func backends(t *testing.T) map[string]func(t *testing.T) segstore.Store {
	return map[string]func(t *testing.T) segstore.Store{
		"memory": func(*testing.T) segstore.Store { return segstore.NewMemory() },
		"sqlite": func(t *testing.T) segstore.Store {
			s, err := sqlitefile.Open(context.Background(), filepath.Join(t.TempDir(), "segments.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		"postgres": func(t *testing.T) segstore.Store {
			st := pgtest.Open(t)
			s, err := pgseg.Open(context.Background(), st.Pool())
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
}

type clock struct{ ms atomic.Int64 }

func (c *clock) now() time.Time { return time.UnixMilli(c.ms.Load()) }

func TestCacheContract(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			clk := &clock{}
			clk.ms.Store(1_000_000)
			c := segstore.NewCache(open(t), time.Hour, clk.now, nil)
			cur := "r9"
			key := segstore.KeyParts{Table: "todos", ScopeDigest: "d1", AsOfCommitSeq: 7, RowCursor: &cur, PageRows: 100, SchemaVersion: 1, LogEpoch: "e", Lane: "rows"}
			data := []byte("segment bytes")
			builds := 0
			build := func(context.Context) (segstore.Built, error) {
				builds++
				next := "r19"
				return segstore.Built{Meta: segstore.Meta{MediaType: ssp2.MediaRows, Table: "todos", ScopeDigest: "d1", AsOfCommitSeq: 7, RowCount: 10, RowCursor: &cur, NextRowCursor: &next}, Data: data}, nil
			}
			m, reused, err := c.Obtain(ctx, "p1", key, build)
			if err != nil || reused || builds != 1 {
				t.Fatalf("first obtain: %v reused=%v builds=%d", err, reused, builds)
			}
			if m.ID != segstore.ID(data) || m.ByteLength != int64(len(data)) || m.ExpiresAtMs != 1_000_000+3_600_000 {
				t.Fatalf("meta %+v", m)
			}
			m2, reused, err := c.Obtain(ctx, "p1", key, build)
			if err != nil || !reused || builds != 1 || m2.ID != m.ID || *m2.NextRowCursor != "r19" || *m2.RowCursor != "r9" {
				t.Fatalf("second obtain: %v reused=%v builds=%d %+v", err, reused, builds, m2)
			}
			metas, got, err := c.Get(ctx, "p1", m.ID)
			if err != nil || string(got) != string(data) || len(metas) != 1 || metas[0].ScopeDigest != "d1" {
				t.Fatalf("get: %v %q %+v", err, got, metas)
			}
			if _, _, err := c.Get(ctx, "p2", m.ID); !errors.Is(err, segstore.ErrNotFound) {
				t.Fatalf("other partition: %v", err)
			}
			if _, _, err := c.Get(ctx, "p1", "sha256:00"); !errors.Is(err, segstore.ErrNotFound) {
				t.Fatalf("unknown: %v", err)
			}
			clk.ms.Add(3_600_000) // exactly at expiry
			if _, _, err := c.Get(ctx, "p1", m.ID); !errors.Is(err, segstore.ErrExpired) {
				t.Fatalf("expired get: %v", err)
			}
			if n, err := c.Sweep(ctx); err != nil || n != 1 {
				t.Fatalf("sweep: %d %v", n, err)
			}
			if _, _, err := c.Get(ctx, "p1", m.ID); !errors.Is(err, segstore.ErrExpired) {
				t.Fatalf("swept get: %v", err)
			}
			// An expired key is rebuilt.
			if _, reused, err := c.Obtain(ctx, "p1", key, build); err != nil || reused || builds != 2 {
				t.Fatalf("rebuild: %v reused=%v builds=%d", err, reused, builds)
			}
			if _, _, err := c.Get(ctx, "p1", m.ID); err != nil {
				t.Fatalf("rebuilt get: %v", err)
			}
			clk.ms.Add(segstore.TombstoneRetention.Milliseconds() + 2*3_600_000)
			if n, err := c.Sweep(ctx); err != nil || n != 1 {
				t.Fatalf("sweep 2: %d %v", n, err)
			}
			if _, err := c.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			if _, _, err := c.Get(ctx, "p1", m.ID); !errors.Is(err, segstore.ErrExpired) && !errors.Is(err, segstore.ErrNotFound) {
				t.Fatalf("forgotten: %v", err)
			}
			if s := c.Stats(); s.Built != 2 || s.Reused != 1 || s.Expired != 2 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// TestSingleFlight: concurrent builders of one key build once.
func TestSingleFlight(t *testing.T) {
	c := segstore.NewCache(segstore.NewMemory(), 0, nil, nil)
	var builds atomic.Int32
	release := make(chan struct{})
	ids := make([]string, 20)
	// Room for every caller's build, so a broken single flight fails the
	// build count below instead of blocking a second builder forever.
	entered := make(chan struct{}, len(ids))
	key := segstore.KeyParts{Table: "t", Lane: "rows"}
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, _, err := c.Obtain(context.Background(), "p", key, func(context.Context) (segstore.Built, error) {
				builds.Add(1)
				entered <- struct{}{}
				<-release
				return segstore.Built{Data: []byte("x")}, nil
			})
			if err != nil {
				t.Error(err)
			}
			ids[i] = m.ID
		}()
	}
	<-entered
	// Wait until every other caller is parked on the flight or will find
	// the stored segment; either way no second build can start while the
	// first holds the flight.
	close(release)
	wg.Wait()
	if builds.Load() != 1 {
		t.Fatalf("%d builds, want 1", builds.Load())
	}
	for _, id := range ids {
		if id != segstore.ID([]byte("x")) {
			t.Fatalf("id %q", id)
		}
	}
	if s := c.Stats(); s.Built != 1 || s.Reused != 19 {
		t.Fatalf("stats %+v", s)
	}
}

// TestObtainAnswersTheStoredEntry: when another process stored the same
// key first (different bytes, as SQLite images are not deterministic), a
// builder's Put is ignored and Obtain answers with the stored segment, on
// every backend.
func TestObtainAnswersTheStoredEntry(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			other := segstore.NewCache(st, 0, nil, nil)
			mine := segstore.NewCache(st, 0, nil, nil)
			key := segstore.KeyParts{Table: "t", Lane: "sqlite"}
			m, _, err := mine.Obtain(context.Background(), "p", key, func(ctx context.Context) (segstore.Built, error) {
				// The other process wins the race while this one builds.
				if _, _, err := other.Obtain(ctx, "p", key, func(context.Context) (segstore.Built, error) {
					return segstore.Built{Data: []byte("first image")}, nil
				}); err != nil {
					return segstore.Built{}, err
				}
				return segstore.Built{Data: []byte("second image")}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if m.ID != segstore.ID([]byte("first image")) {
				t.Fatalf("Obtain answered %s, not the stored segment", m.ID)
			}
			if _, data, err := mine.Get(context.Background(), "p", m.ID); err != nil || string(data) != "first image" {
				t.Fatalf("get: %q %v", data, err)
			}
		})
	}
}

// TestGetBytesAreTheCallers: the bytes Get returns stay intact while the
// store serves other segments (no store may hand out a buffer it reuses).
func TestGetBytesAreTheCallers(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := segstore.NewCache(open(t), time.Hour, nil, nil)
			var ids []string
			var want [][]byte
			for i := range 3 {
				data := make([]byte, 100_000+i)
				for j := range data {
					data[j] = byte(i*7 + j)
				}
				m, _, err := c.Obtain(ctx, "p", segstore.KeyParts{Table: "t", AsOfCommitSeq: int64(i + 1), Lane: "rows"}, func(context.Context) (segstore.Built, error) {
					return segstore.Built{Meta: segstore.Meta{MediaType: ssp2.MediaRows, Table: "t", RowCount: 1}, Data: data}, nil
				})
				if err != nil {
					t.Fatal(err)
				}
				ids, want = append(ids, m.ID), append(want, append([]byte(nil), data...))
			}
			got := make([][]byte, len(ids))
			for i, id := range ids {
				_, b, err := c.Get(ctx, "p", id)
				if err != nil {
					t.Fatal(err)
				}
				got[i] = b
			}
			for i := range ids {
				if string(got[i]) != string(want[i]) {
					t.Fatalf("segment %d: the bytes changed after later reads", i)
				}
			}
		})
	}
}

// TestPutKeepsNoReference: a builder may reuse its buffer once Obtain (and
// so Put) returned: what is served afterwards is what was built.
func TestPutKeepsNoReference(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := segstore.NewCache(open(t), time.Hour, nil, nil)
			buf := make([]byte, 50_000)
			for i := range buf {
				buf[i] = byte(i)
			}
			want := append([]byte(nil), buf...)
			m, _, err := c.Obtain(ctx, "p", segstore.KeyParts{Table: "t", AsOfCommitSeq: 1, Lane: "rows"}, func(context.Context) (segstore.Built, error) {
				return segstore.Built{Meta: segstore.Meta{MediaType: ssp2.MediaRows, Table: "t", RowCount: 1}, Data: buf}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for i := range buf {
				buf[i] = 0xAA // the next page written into the same buffer
			}
			for range 2 { // twice: the second read may come from the hot set
				_, got, err := c.Get(ctx, "p", m.ID)
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != string(want) {
					t.Fatal("the stored segment changed when the builder reused its buffer")
				}
			}
		})
	}
}
