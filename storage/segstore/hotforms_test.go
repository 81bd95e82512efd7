package segstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"
)

// formCountingStore counts the OpenForm calls that reach the store.
type formCountingStore struct {
	*Memory
	opens int
}

func (s *formCountingStore) OpenForm(ctx context.Context, id, enc string) ([]byte, *os.File, error) {
	s.opens++
	return s.Memory.OpenForm(ctx, id, enc)
}

// TestHotForms: a hot segment's stored form is kept with it in the hot
// set, so its compressed downloads after the one that built the form read
// no form from the store and get exactly the stored bytes; the form counts
// against the hot set's byte budget, may evict other segments (least
// recently used) but is not kept when it does not fit with its own
// segment, and leaves the hot set with its segment (expiry, Forget, the
// store evicting the segment).
func TestHotForms(t *testing.T) {
	ctx := context.Background()
	segA := hotFormBytes(0, 40_000)
	segB := hotFormBytes(1, 40_000)
	formA, err := Encode(EncodingZstd, bytes.NewReader(segA), int64(len(segA)))
	if err != nil {
		t.Fatal(err)
	}
	if len(formA) >= len(segA) || len(formA) == 0 {
		t.Fatalf("form of %d bytes for %d", len(formA), len(segA))
	}
	drop := map[string]func(c *Cache, id string, clock *time.Time){
		"none":   func(*Cache, string, *time.Time) {},
		"expiry": func(_ *Cache, _ string, clock *time.Time) { *clock = clock.Add(2 * time.Hour) },
		"forget": func(c *Cache, id string, _ *time.Time) { c.Forget("p", id) },
		"evict":  func(c *Cache, id string, _ *time.Time) { c.hot.dropID(id) },
	}
	cases := []struct {
		name      string
		budget    int
		drop      string
		wantKept  bool // A's form is served from memory
		wantBKept bool // B is still kept once A's form was offered
		wantHot   int  // hot bytes at the end
	}{
		{"kept and counted", 1 << 20, "none", true, true, len(segA) + len(segB) + len(formA)},
		{"evicts the least recently used other segment", len(segA) + len(segB) + len(formA) - 1, "none", true, false, len(segA) + len(formA)},
		{"not kept when it does not fit with its segment", len(segA) + len(formA) - 1, "none", false, false, len(segA)},
		{"expiry drops it", 1 << 20, "expiry", true, true, len(segB)}, // B expired too, dropped when met
		{"forget drops it", 1 << 20, "forget", true, true, len(segB)},
		{"store eviction drops it", 1 << 20, "evict", true, true, len(segB)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clock := time.UnixMilli(1_000_000)
			st := &formCountingStore{Memory: NewMemory()}
			cache := NewCache(st, time.Hour, func() time.Time { return clock }, nil)
			cache.KeepHot(c.budget)
			var ids []string
			for i, data := range [][]byte{segB, segA} { // B first: A is the most recently used
				m, _, err := cache.Obtain(ctx, "p", KeyParts{Table: "t", AsOfCommitSeq: int64(i + 1), Lane: "ref"}, func(context.Context) (Built, error) {
					return Built{Meta: Meta{Table: "t", RowCount: 1}, Data: data}, nil
				})
				if err != nil {
					t.Fatal(err)
				}
				for range 2 { // the second download keeps it
					if _, err := cache.Open(ctx, "p", m.ID); err != nil {
						t.Fatal(err)
					}
				}
				ids = append(ids, m.ID)
			}
			idB, idA := ids[0], ids[1]
			if got := cache.HotBytes(); got != len(segA)+len(segB) && c.budget >= len(segA)+len(segB) {
				t.Fatalf("hot bytes %d before any form, want %d", got, len(segA)+len(segB))
			}
			// The first compressed download builds and stores the form.
			f, err := cache.Form(ctx, "p", idA, EncodingZstd, int64(len(segA)), func() io.Reader { return bytes.NewReader(segA) })
			if err != nil || !f.Stored || !bytes.Equal(f.Data, formA) || f.Size != int64(len(formA)) {
				t.Fatalf("first: %v, stored %v, %d bytes", err, f.Stored, f.Size)
			}
			stored, _, err := st.Memory.OpenForm(ctx, idA, EncodingZstd)
			if err != nil {
				t.Fatal(err)
			}
			// The later ones: from memory when kept, the stored bytes.
			for i := range 3 {
				before := st.opens
				f, err := cache.StoredForm(ctx, "p", idA, EncodingZstd)
				if err != nil || !bytes.Equal(f.Data, stored) || f.Size != int64(len(stored)) || !f.Stored {
					t.Fatalf("download %d: %v, %d bytes, stored %v", i, err, f.Size, f.Stored)
				}
				if read := st.opens > before; read == c.wantKept {
					t.Fatalf("download %d read the form from the store: %v, want %v", i, read, !c.wantKept)
				}
			}
			if got := cache.HotBytes(); got > c.budget {
				t.Fatalf("hot bytes %d over the budget %d", got, c.budget)
			}
			if got := cache.hot.holds(hotKey("p", idB), 0); got != c.wantBKept {
				t.Fatalf("B kept %v, want %v", got, c.wantBKept)
			}
			drop[c.drop](cache, idA, &clock)
			before := st.opens
			if _, err := cache.StoredForm(ctx, "p", idA, EncodingZstd); c.drop != "none" && (err != nil || st.opens == before) {
				t.Fatalf("after %s: %v, read the form from the store %v", c.drop, err, st.opens > before)
			}
			if got := cache.HotBytes(); got != c.wantHot {
				t.Fatalf("hot bytes %d, want %d", got, c.wantHot)
			}
		})
	}
}

// hotFormBytes returns n compressible bytes, distinct for each seed.
func hotFormBytes(seed, n int) []byte {
	var b []byte
	for i := 0; len(b) < n; i++ {
		b = fmt.Appendf(b, "row %d of %d: %d\n", i, seed, i*i%97)
	}
	return b[:n]
}
