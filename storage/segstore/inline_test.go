package segstore

import (
	"bytes"
	"fmt"
	"testing"
)

// TestInlinePagesKept: a table's first page is kept when first offered, a
// later page on its second offer; the byte budget (bytes plus a fixed
// per-page overhead) evicts the least recently used and is never
// exceeded; a page over the budget is never kept; a kept page is a copy
// (the caller's buffer stays the caller's); KeepInline(0) keeps nothing.
// Keys differing in any part (partition, build key field, stored schema
// version) never share a page.
func TestInlinePagesKept(t *testing.T) {
	page := func(n int) Built {
		return Built{Meta: Meta{RowCount: int64(n)}, Data: bytes.Repeat([]byte{byte(n)}, n)}
	}
	cursor := "t9"
	base := InlineKey{Partition: "p", Build: KeyParts{Table: "t", ScopeDigest: "d", AsOfCommitSeq: 7, PageRows: 10, SchemaVersion: 1, LogEpoch: "e", Lane: "ref"}, StoredVersion: 1}
	key := func(i int) InlineKey { k := base; k.Build.ScopeDigest = fmt.Sprint("d", i); return k }
	later := func(i int) InlineKey { k := key(i); k.Build.RowCursor = &cursor; return k }
	type step struct {
		offer    bool // offer (else look up)
		key      InlineKey
		size     int
		first    bool
		wantKept bool // offer kept it / lookup found it
	}
	cases := []struct {
		name   string
		budget int
		steps  []step
	}{
		{"first page kept at once", 1 << 20, []step{{false, key(0), 0, false, false}, {true, key(0), 1000, true, true}, {false, key(0), 0, false, true}}},
		{"later page kept on its second build", 1 << 20, []step{
			{true, later(0), 1000, false, false}, {false, later(0), 0, false, false},
			{true, later(0), 1000, false, true}, {false, later(0), 0, false, true}}},
		{"budget evicts least recently used", 3*(1000+inlineEntryOverhead) - 1, []step{
			{true, key(0), 1000, true, true}, {true, key(1), 1000, true, true}, {false, key(0), 0, false, true},
			{true, key(2), 1000, true, true}, // evicts 1 (0 was used since)
			{false, key(1), 0, false, false}, {false, key(0), 0, false, true}, {false, key(2), 0, false, true}}},
		{"over the budget never kept", 1000, []step{{true, key(0), 1000, true, false}, {false, key(0), 0, false, false}}},
		{"disabled", 0, []step{{true, key(0), 10, true, false}, {false, key(0), 0, false, false}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cache := NewCache(NewMemory(), 0, nil, nil)
			cache.KeepInline(c.budget)
			for i, s := range c.steps {
				if s.offer {
					b := page(s.size)
					if kept := cache.OfferInlinePage(s.key, b, s.first); kept != s.wantKept {
						t.Fatalf("step %d: offer kept %v, want %v", i, kept, s.wantKept)
					}
					b.Data[0] ^= 0xff // the caller reuses its buffer
				} else {
					got, ok := cache.InlinePage(s.key)
					if ok != s.wantKept {
						t.Fatalf("step %d: found %v, want %v", i, ok, s.wantKept)
					}
					if ok && !bytes.Equal(got.Data, page(len(got.Data)).Data) {
						t.Fatalf("step %d: the kept page changed with the caller's buffer", i)
					}
				}
				if n := cache.InlineBytes(); n > max(c.budget, 0) {
					t.Fatalf("step %d: %d bytes kept, budget %d", i, n, c.budget)
				}
			}
		})
	}
	t.Run("every part of the key names its own page", func(t *testing.T) {
		cache := NewCache(NewMemory(), 0, nil, nil)
		cache.KeepInline(1 << 20)
		cache.OfferInlinePage(base, page(10), true)
		other := "t0"
		for name, mut := range map[string]func(*InlineKey){
			"partition":      func(k *InlineKey) { k.Partition = "q" },
			"table":          func(k *InlineKey) { k.Build.Table = "u" },
			"scope digest":   func(k *InlineKey) { k.Build.ScopeDigest = "other" },
			"pin":            func(k *InlineKey) { k.Build.AsOfCommitSeq++ },
			"row cursor":     func(k *InlineKey) { k.Build.RowCursor = &other },
			"page rows":      func(k *InlineKey) { k.Build.PageRows++ },
			"schema version": func(k *InlineKey) { k.Build.SchemaVersion++ },
			"log epoch":      func(k *InlineKey) { k.Build.LogEpoch = "e2" },
			"stored version": func(k *InlineKey) { k.StoredVersion++ },
		} {
			k := base
			mut(&k)
			if _, ok := cache.InlinePage(k); ok {
				t.Fatalf("a key with another %s found the page", name)
			}
		}
		if _, ok := cache.InlinePage(base); !ok {
			t.Fatal("the page's own key does not find it")
		}
		if st := cache.Stats(); st.InlineReused != 1 {
			t.Fatalf("InlineReused = %d, want 1", st.InlineReused)
		}
	})
}
