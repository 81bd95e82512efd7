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

// TestLatestFirstPage: the table first page kept last under a key at any
// pin is found from a key at another pin (a page with a row cursor never
// is); an aux attached to it is returned with it and counts against the
// budget; evicting the page forgets it, and a key differing in anything
// but the pin finds nothing.
func TestLatestFirstPage(t *testing.T) {
	pageAt := func(pin int64, n int) Built {
		return Built{Meta: Meta{AsOfCommitSeq: pin}, Data: bytes.Repeat([]byte{1}, n)}
	}
	at := func(pin int64) InlineKey {
		return InlineKey{Partition: "p", Build: KeyParts{Table: "t", ScopeDigest: "d", AsOfCommitSeq: pin, PageRows: 10, SchemaVersion: 1, LogEpoch: "e", Lane: "ref"}, StoredVersion: 1}
	}
	cache := NewCache(NewMemory(), 0, nil, nil)
	budget := 3 * (1000 + inlineEntryOverhead)
	cache.KeepInline(budget)
	if _, _, ok := cache.LatestFirstPage(at(9)); ok {
		t.Fatal("found a page in an empty set")
	}
	cache.OfferInlinePage(at(5), pageAt(5, 1000), true)
	cache.OfferInlinePage(at(7), pageAt(7, 1000), true)
	cursor := "x"
	later := at(8)
	later.Build.RowCursor = &cursor
	cache.OfferInlinePage(later, pageAt(8, 10), true)
	got, aux, ok := cache.LatestFirstPage(at(9))
	if !ok || got.Meta.AsOfCommitSeq != 7 || aux != nil {
		t.Fatalf("latest: ok %v pin %d aux %v, want the page at 7", ok, got.Meta.AsOfCommitSeq, aux)
	}
	if _, ok := cache.InlinePage(at(5)); ok {
		t.Fatal("the first page at 5 is still kept after the one at 7")
	}
	cache.OfferInlinePage(at(6), pageAt(6, 1000), true) // older than the latest: kept, not the latest
	if got, _, _ := cache.LatestFirstPage(at(9)); got.Meta.AsOfCommitSeq != 7 {
		t.Fatalf("latest is the page at %d after an older one was offered", got.Meta.AsOfCommitSeq)
	}
	if _, ok := cache.InlinePage(at(6)); !ok {
		t.Fatal("the older page was not kept")
	}
	other := at(9)
	other.StoredVersion = 2
	if _, _, ok := cache.LatestFirstPage(other); ok {
		t.Fatal("a key with another stored version found the page")
	}
	before := cache.InlineBytes()
	cache.SetInlineAux(at(7), "index", 100)
	if _, aux, _ := cache.LatestFirstPage(at(1)); aux != "index" || cache.InlineBytes() != before+100 {
		t.Fatalf("aux %v, bytes %d (before %d)", aux, cache.InlineBytes(), before)
	}
	cache.SetInlineAux(at(7), "again", 100) // already has one: unchanged
	if _, aux, _ := cache.LatestFirstPage(at(1)); aux != "index" {
		t.Fatalf("aux replaced: %v", aux)
	}
	// Pages of another scope evict both, least recently used first.
	for pin := int64(20); pin < 24; pin++ {
		k := at(pin)
		k.Build.ScopeDigest = fmt.Sprint("other", pin)
		cache.OfferInlinePage(k, pageAt(pin, 1000), true)
	}
	if _, _, ok := cache.LatestFirstPage(at(9)); ok {
		t.Fatal("an evicted page is still the latest")
	}
	if n := cache.InlineBytes(); n > budget {
		t.Fatalf("%d bytes kept, budget %d", n, budget)
	}
}
