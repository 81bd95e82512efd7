package segstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/storage/segstore"
	"github.com/synclane/synclane/storage/segstore/pgseg"
	"github.com/synclane/synclane/storage/segstore/sqlitefile"
)

// sharedBackends open two handles on one store, as two processes sharing
// it do (one SQLite file opened twice; one PostgreSQL database; the
// memory store is one value).
func sharedBackends() map[string]func(t *testing.T) (segstore.Store, segstore.Store) {
	return map[string]func(t *testing.T) (segstore.Store, segstore.Store){
		"memory": func(*testing.T) (segstore.Store, segstore.Store) { m := segstore.NewMemory(); return m, m },
		"sqlite": func(t *testing.T) (segstore.Store, segstore.Store) {
			path := filepath.Join(t.TempDir(), "segments.db")
			var out [2]segstore.Store
			for i := range out {
				s, err := sqlitefile.Open(context.Background(), path)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				out[i] = s
			}
			return out[0], out[1]
		},
		"postgres": func(t *testing.T) (segstore.Store, segstore.Store) {
			pool := pgtest.Open(t).Pool()
			var out [2]segstore.Store
			for i := range out {
				s, err := pgseg.Open(context.Background(), pool)
				if err != nil {
					t.Fatal(err)
				}
				out[i] = s
			}
			return out[0], out[1]
		},
	}
}

// pub is the publication of data by partition part under build key key,
// in log epoch epoch, created at createdMs and living ttlMs.
func pub(part, epoch, key, digest string, data []byte, createdMs, ttlMs int64) segstore.Meta {
	return segstore.Meta{Partition: part, LogEpoch: epoch, Key: key, ID: segstore.ID(data), SchemaVersion: 4,
		MediaType: ssp2.MediaRows, Table: "todos", ScopeDigest: digest, AsOfCommitSeq: 9, ByteLength: int64(len(data)),
		RowCount: 2, CreatedAtMs: createdMs, ExpiresAtMs: createdMs + ttlMs}
}

// livePartitions lists the partitions of the live publications of pubs.
func livePartitions(pubs []segstore.Publication) []string {
	var out []string
	for _, p := range pubs {
		if p.Live {
			out = append(out, p.Partition)
		}
	}
	slices.Sort(out)
	return out
}

// publicationsAgree fails t unless a store that lists publications alone
// (segstore.PublicationReader) lists those Get reads, liveness included,
// for each of parts at nowMs (ErrNotFound alike).
func publicationsAgree(t *testing.T, st segstore.Store, id string, nowMs int64, parts ...string) {
	t.Helper()
	pr, ok := st.(segstore.PublicationReader)
	if !ok {
		return
	}
	for _, part := range parts {
		want, _, werr := st.Get(context.Background(), part, id, nowMs)
		got, gerr := pr.Publications(context.Background(), part, id, nowMs)
		slices.SortFunc(want, func(a, b segstore.Publication) int { return strings.Compare(a.Partition+a.Key, b.Partition+b.Key) })
		slices.SortFunc(got, func(a, b segstore.Publication) int { return strings.Compare(a.Partition+a.Key, b.Partition+b.Key) })
		if !errors.Is(gerr, werr) || !reflect.DeepEqual(got, want) {
			t.Fatalf("Publications(%q) at %d: %+v, %v; Get read %+v, %v", part, nowMs, got, gerr, want, werr)
		}
	}
}

// TestPublicationsPerPartitionAndTTL (SPEC §5.1): one segment's bytes
// published by two partitions in their own log epochs are stored once
// with two publications, each recording its context (epoch, schema
// version, digest) and its own lifetime. A read of one partition lists
// only its publications; a read of every partition lists both. The first
// publication expires on its own (the other stays live and keeps the
// bytes: a sweep then drops nothing), and the bytes go with the last.
func TestPublicationsPerPartitionAndTTL(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st := open(t)
			data := []byte("one page of rows, identical in two partitions")
			id := segstore.ID(data)
			const ttl = 3_600_000
			a := pub("A", "epoch-a", "key", "digest-a", data, 1_000_000, ttl)
			b := pub("B", "epoch-b", "key", "digest-b", data, 1_000_000+1_800_000, ttl)
			for _, m := range []segstore.Meta{a, b} {
				if err := st.Put(ctx, m, data); err != nil {
					t.Fatal(err)
				}
			}
			publicationsAgree(t, st, id, 2_000_000, "A", "B", "", "C")
			pubs, got, err := st.Get(ctx, "A", id, 2_000_000)
			if err != nil || !bytes.Equal(got, data) || len(pubs) != 1 || !pubs[0].Live {
				t.Fatalf("A's read: %+v, %q, %v", pubs, got, err)
			}
			if p := pubs[0].Meta; p.LogEpoch != "epoch-a" || p.SchemaVersion != 4 || p.ScopeDigest != "digest-a" || p.Partition != "A" ||
				p.ExpiresAtMs != a.ExpiresAtMs || p.Key != "key" {
				t.Fatalf("A's publication read back as %+v, want %+v", p, a)
			}
			if pubs, _, err := st.Get(ctx, "", id, 2_000_000); err != nil || !slices.Equal(livePartitions(pubs), []string{"A", "B"}) {
				t.Fatalf("every partition's read: %+v, %v", pubs, err)
			}
			if _, _, err := st.Get(ctx, "C", id, 2_000_000); !errors.Is(err, segstore.ErrNotFound) {
				t.Fatalf("a partition that published nothing: %v, want ErrNotFound", err)
			}
			if held, err := st.(segstore.Evicter).Held(ctx); err != nil || len(held) != 1 || held[0].Bytes != int64(len(data)) {
				t.Fatalf("held %+v, %v; want the bytes once", held, err)
			}
			// A's publication expired, B's has not.
			now := a.ExpiresAtMs
			if _, err := st.Lookup(ctx, "A", "key", now); !errors.Is(err, segstore.ErrNotFound) {
				t.Fatalf("lookup of A's expired publication: %v", err)
			}
			if n, err := st.Sweep(ctx, now, 0); err != nil || n != 0 {
				t.Fatalf("sweep while B's publication lives: %d, %v; want no bytes dropped", n, err)
			}
			publicationsAgree(t, st, id, now, "A", "B", "")
			if pubs, got, err := st.Get(ctx, "A", id, now); err != nil || got != nil || len(pubs) != 1 || pubs[0].Live {
				t.Fatalf("A's read after its expiry: %+v, %q, %v; want its dead publication, no bytes", pubs, got, err)
			}
			if pubs, got, err := st.Get(ctx, "B", id, now); err != nil || !bytes.Equal(got, data) || !slices.Equal(livePartitions(pubs), []string{"B"}) {
				t.Fatalf("B's read after A's expiry: %+v, %q, %v", pubs, got, err)
			}
			if m, err := st.Lookup(ctx, "B", "key", now); err != nil || m.ExpiresAtMs != b.ExpiresAtMs {
				t.Fatalf("B's lookup: %+v, %v (A's expiry must not touch B's)", m, err)
			}
			// B's expired too: the bytes go.
			now = b.ExpiresAtMs
			if n, err := st.Sweep(ctx, now, 0); err != nil || n != 1 {
				t.Fatalf("sweep once every publication expired: %d, %v; want the bytes dropped", n, err)
			}
			if held, err := st.(segstore.Evicter).Held(ctx); err != nil || len(held) != 0 {
				t.Fatalf("held after the last publication expired: %+v, %v", held, err)
			}
			publicationsAgree(t, st, id, now, "A", "B", "")
			if pubs, got, err := st.Get(ctx, "", id, now); err != nil || got != nil || len(livePartitions(pubs)) != 0 || len(pubs) != 2 {
				t.Fatalf("read of the swept segment: %+v, %q, %v; want two tombstones", pubs, got, err)
			}
			// A new publication of the same bytes stores them again.
			c := pub("A", "epoch-a2", "key2", "digest-a", data, now, ttl)
			if err := st.Put(ctx, c, data); err != nil {
				t.Fatal(err)
			}
			if pubs, got, err := st.Get(ctx, "A", id, now+1); err != nil || !bytes.Equal(got, data) || !slices.ContainsFunc(pubs, func(p segstore.Publication) bool {
				return p.Live && p.LogEpoch == "epoch-a2"
			}) {
				t.Fatalf("read after publishing again: %+v, %q, %v", pubs, got, err)
			}
		})
	}
}

// TestConcurrentPublicationsAllSurvive: eight partitions (through two
// handles on the store, as two processes) publish the same bytes at the
// same moment, round after round, while a sweeper runs; every publication
// is stored and live, and the bytes are there once.
func TestConcurrentPublicationsAllSurvive(t *testing.T) {
	for name, open := range sharedBackends() {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s1, s2 := open(t)
			const parts, rounds = 8, 15
			stop := make(chan struct{})
			swept := make(chan error, 1)
			go func() { // nothing is expired: the sweeper must drop nothing
				var err error
				for {
					select {
					case <-stop:
						swept <- err
						return
					default:
					}
					if n, serr := s1.Sweep(ctx, 1_000_000, 0); serr != nil || n != 0 {
						err = errors.Join(err, fmt.Errorf("sweep dropped %d, %v", n, serr))
					}
				}
			}()
			for r := range rounds {
				data := fmt.Appendf(nil, "page of round %d, the same bytes in every partition", r)
				start := make(chan struct{})
				errs := make(chan error, parts)
				var wg sync.WaitGroup
				for p := range parts {
					st := s1
					if p%2 == 1 {
						st = s2
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						m := pub(fmt.Sprintf("p%d", p), "e", fmt.Sprintf("k%d", r), "d", data, 1_000_000, 3_600_000)
						errs <- st.Put(ctx, m, data)
					}()
				}
				close(start)
				wg.Wait()
				close(errs)
				for err := range errs {
					if err != nil {
						t.Fatal(err)
					}
				}
				pubs, got, err := s2.Get(ctx, "", segstore.ID(data), 1_000_001)
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("round %d: %v, %q", r, err, got)
				}
				if live := livePartitions(pubs); len(live) != parts || len(pubs) != parts {
					t.Fatalf("round %d: %d publications, live in %v; want all %d", r, len(pubs), live, parts)
				}
			}
			close(stop)
			if err := <-swept; err != nil {
				t.Fatal(err)
			}
			held, err := s1.(segstore.Evicter).Held(ctx)
			if err != nil || len(held) != rounds {
				t.Fatalf("held %d segments, %v; want %d, each once", len(held), err, rounds)
			}
		})
	}
}

// TestPublishWhileTheSweepDropsTheBytes: a publication of bytes whose
// only other publication just expired races the sweep that drops them;
// whichever wins, the new publication ends live with its bytes (the merge
// is conditional on the record the sweep deletes).
func TestPublishWhileTheSweepDropsTheBytes(t *testing.T) {
	for name, open := range sharedBackends() {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s1, s2 := open(t)
			for r := range 30 {
				data := fmt.Appendf(nil, "bytes of round %d", r)
				if err := s1.Put(ctx, pub("A", "e", fmt.Sprintf("old-%d", r), "d", data, 1000, 1000), data); err != nil {
					t.Fatal(err)
				}
				start := make(chan struct{})
				var wg sync.WaitGroup
				var putErr, sweepErr error
				wg.Add(2)
				go func() {
					defer wg.Done()
					<-start
					putErr = s2.Put(ctx, pub("B", "e", fmt.Sprintf("new-%d", r), "d", data, 2000, 3_600_000), data)
				}()
				go func() {
					defer wg.Done()
					<-start
					_, sweepErr = s1.Sweep(ctx, 2000, 0)
				}()
				close(start)
				wg.Wait()
				if putErr != nil || sweepErr != nil {
					t.Fatalf("round %d: put %v, sweep %v", r, putErr, sweepErr)
				}
				if _, err := s1.Sweep(ctx, 2001, 0); err != nil { // and any sweep after it
					t.Fatal(err)
				}
				pubs, got, err := s1.Get(ctx, "B", segstore.ID(data), 2001)
				if err != nil || !bytes.Equal(got, data) || !slices.Equal(livePartitions(pubs), []string{"B"}) {
					t.Fatalf("round %d: the new publication %+v, %q, %v; want it live with its bytes", r, pubs, got, err)
				}
				if m, err := s1.Lookup(ctx, "B", fmt.Sprintf("new-%d", r), 2001); err != nil || m.ID != segstore.ID(data) {
					t.Fatalf("round %d: lookup %v", r, err)
				}
			}
		})
	}
}

// TestCollisionFailsLoudly (SPEC §5.1): bytes of another length published
// under an id already holding bytes are refused with ErrCollision, and
// the stored bytes and publication are untouched.
func TestCollisionFailsLoudly(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st := open(t)
			data := []byte("the stored bytes")
			if err := st.Put(ctx, pub("A", "e", "k", "d", data, 1000, 3_600_000), data); err != nil {
				t.Fatal(err)
			}
			forged := pub("B", "e", "k", "d", data, 1000, 3_600_000) // data's id
			forged.ByteLength = 5
			if err := st.Put(ctx, forged, []byte("other")); !errors.Is(err, segstore.ErrCollision) {
				t.Fatalf("publishing other bytes under a stored id: %v, want ErrCollision", err)
			}
			pubs, got, err := st.Get(ctx, "", segstore.ID(data), 2000)
			if err != nil || !bytes.Equal(got, data) || !slices.Equal(livePartitions(pubs), []string{"A"}) {
				t.Fatalf("after the refused publication: %+v, %q, %v", pubs, got, err)
			}
		})
	}
}

// TestObtainRecordsThePublicationContext: the Cache fills a publication's
// log epoch and schema version from its build key.
func TestObtainRecordsThePublicationContext(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := segstore.NewCache(open(t), time.Hour, nil, nil)
			key := segstore.KeyParts{Table: "todos", ScopeDigest: "d", AsOfCommitSeq: 3, PageRows: 10, SchemaVersion: 7, LogEpoch: "epoch-7", Lane: "rows"}
			m, _, err := c.Obtain(ctx, "p", key, builder("todos", "d", []byte("rows")))
			if err != nil || m.LogEpoch != "epoch-7" || m.SchemaVersion != 7 {
				t.Fatalf("Obtain: %+v, %v", m, err)
			}
			o, err := c.Open(ctx, "p", m.ID)
			pubs := o.Pubs
			if err != nil || len(pubs) != 1 || pubs[0].LogEpoch != "epoch-7" || pubs[0].SchemaVersion != 7 || !pubs[0].Live {
				t.Fatalf("Open: %+v, %v", pubs, err)
			}
		})
	}
}
