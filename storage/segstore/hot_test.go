package segstore

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

// countingStore counts the Get and Lookup calls that reach the backend.
type countingStore struct {
	Store
	gets, lookups int
}

func (s *countingStore) Lookup(ctx context.Context, partition, key string, nowMs int64) (Meta, error) {
	s.lookups++
	return s.Store.Lookup(ctx, partition, key, nowMs)
}

func (s *countingStore) Get(ctx context.Context, partition, id string, nowMs int64) ([]Publication, []byte, error) {
	s.gets++
	return s.Store.Get(ctx, partition, id, nowMs)
}

// TestHotSegments: a segment is kept in memory on its second download and
// served from there; one downloaded once is not kept; the byte budget
// evicts the least recently used; a segment over the budget is never kept;
// an expired one is not served from memory; KeepHot(0) keeps nothing.
func TestHotSegments(t *testing.T) {
	ctx := context.Background()
	now := time.UnixMilli(1_000_000)
	type step struct {
		seg       int           // index into the built segments
		advance   time.Duration // clock moves first
		wantStore bool          // the download reaches the backend
		wantErr   error
	}
	cases := []struct {
		name   string
		budget int
		sizes  []int
		steps  []step
		hot    int // bytes kept at the end
	}{
		{"second download keeps it", 1 << 20, []int{1000}, []step{{0, 0, true, nil}, {0, 0, true, nil}, {0, 0, false, nil}, {0, 0, false, nil}}, 1000},
		{"one download keeps nothing", 1 << 20, []int{1000, 1000}, []step{{0, 0, true, nil}, {1, 0, true, nil}}, 0},
		{"budget evicts least recently used", 2500, []int{1000, 1000, 1000}, []step{
			{0, 0, true, nil}, {0, 0, true, nil}, {1, 0, true, nil}, {1, 0, true, nil}, {0, 0, false, nil},
			{2, 0, true, nil}, {2, 0, true, nil}, // keeps 2, evicts 1 (0 was used more recently)
			{0, 0, false, nil}, {1, 0, true, nil}}, 2000},
		{"over the budget never kept", 500, []int{1000}, []step{{0, 0, true, nil}, {0, 0, true, nil}, {0, 0, true, nil}}, 0},
		{"expired is not served from memory", 1 << 20, []int{1000}, []step{{0, 0, true, nil}, {0, 0, true, nil}, {0, 0, false, nil},
			{0, 2 * time.Hour, true, ErrExpired}}, 0},
		{"disabled", 0, []int{1000}, []step{{0, 0, true, nil}, {0, 0, true, nil}, {0, 0, true, nil}}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clock := now
			cs := &countingStore{Store: NewMemory()}
			cache := NewCache(cs, time.Hour, func() time.Time { return clock }, nil)
			cache.KeepHot(c.budget)
			var ids []string
			var datas [][]byte
			keyOf := func(i int) KeyParts { return KeyParts{Table: "t", AsOfCommitSeq: int64(i + 1), Lane: "ref"} }
			for i, n := range c.sizes {
				data := bytes.Repeat([]byte{byte('a' + i)}, n)
				m, _, err := cache.Obtain(ctx, "p", keyOf(i), func(context.Context) (Built, error) {
					return Built{Meta: Meta{Table: "t", RowCount: 1}, Data: data}, nil
				})
				if err != nil {
					t.Fatal(err)
				}
				ids, datas = append(ids, m.ID), append(datas, data)
			}
			for i, s := range c.steps {
				clock = clock.Add(s.advance)
				before := cs.gets
				metas, data, err := cache.Get(ctx, "p", ids[s.seg])
				if s.wantErr != nil {
					if !errors.Is(err, s.wantErr) {
						t.Fatalf("step %d: err %v, want %v", i, err, s.wantErr)
					}
				} else if err != nil || len(metas) != 1 || !bytes.Equal(data, datas[s.seg]) {
					t.Fatalf("step %d: %v, %d metas, %d bytes", i, err, len(metas), len(data))
				}
				if got := cs.gets > before; got != s.wantStore {
					t.Fatalf("step %d: reached the store = %v, want %v", i, got, s.wantStore)
				}
			}
			if got := cache.HotBytes(); got != c.hot {
				t.Fatalf("hot bytes %d, want %d", got, c.hot)
			}
			// A lookup by build key is answered from memory exactly when
			// the key's segment is kept, with the same entry the store has.
			kept := 0
			for i := range c.sizes {
				before := cs.lookups
				m, err := cache.Lookup(ctx, "p", keyOf(i))
				if cs.lookups == before {
					if err != nil || m.ID != ids[i] || m.Key != keyOf(i).Key() {
						t.Fatalf("segment %d from memory: %v, id %q key %q", i, err, m.ID, m.Key)
					}
					kept += len(datas[i])
				}
			}
			if kept != c.hot {
				t.Fatalf("lookups answered from memory cover %d bytes, hot set holds %d", kept, c.hot)
			}
		})
	}
}
