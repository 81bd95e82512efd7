package segstore

import (
	"bytes"
	"container/list"
	"strconv"
	"sync"
)

// DefaultInlineBytes is the default byte budget of the inline pages a
// Cache keeps in memory (KeepInline): 32 MiB holds 128 first pages at the
// default inline limit (256 KiB), and thousands of the small pages a
// reconnecting client is sent, while staying well under the hot set's
// 64 MiB and a few replies' worth of bytes (8 MiB each).
const DefaultInlineBytes = 32 << 20

// inlineEntryOverhead is what an entry costs beyond its bytes (key, meta,
// list element), counted against the budget so that many tiny pages do
// not outgrow it.
const inlineEntryOverhead = 256

// InlineKey names one inline page: the build key of the same page by
// reference in its partition, and the stored schema version of the
// serve-gate token it was built under (a page is never shared across a
// schema marker change, even when the running version is the same).
// Everything the page's bytes depend on is in it: table (and so its
// columns, under SchemaVersion), scope digest, pin, row cursor, page size,
// log epoch.
type InlineKey struct {
	Partition     string
	Build         KeyParts
	StoredVersion int32
}

func (k InlineKey) String() string {
	return k.Partition + "\x00" + k.Build.Key() + "\x00" + strconv.Itoa(int(k.StoredVersion))
}

// base names the pages of k at every pin: k without its pin.
func (k InlineKey) base() string {
	k.Build.AsOfCommitSeq = 0
	return k.String()
}

// inlineSet keeps in memory the bytes of inline pages (rows segments sent
// in a response and never stored), least recently used first out, within
// a byte budget. A table's first page is kept when it is first built (so N
// clients bootstrapping or reconnecting on one scope at one pin cost one
// encode); a later page is kept on its second build within the seen
// window (so one client's long bootstrap leaves at most its first page
// behind, and keeps reusing its one page buffer). A page over the budget
// is never kept. Safe for concurrent use.
//
// The set also remembers, per key without its pin (InlineKey.base), the
// table first page (no row cursor) kept last, so that a first page at a
// newer pin can be patched from it (LatestFirstPage); a first page kept
// under the same base replaces it (a fresh bootstrap asks for the newest
// pin only, so pages of superseded pins do not pile up), and an opaque aux
// value (the page's decoded form) attached to a kept page, whose bytes
// count against the budget with the page's.
type inlineSet struct {
	mu     sync.Mutex
	max    int
	size   int
	seen   map[string]struct{}
	items  map[string]*list.Element
	latest map[string]string // base -> key of the first page kept last
	lru    list.List         // front: most recently used *inlineItem
}

type inlineItem struct {
	key     string
	base    string // "" unless a first page tracked in latest
	page    Built
	aux     any
	auxCost int
}

func (it *inlineItem) cost() int { return len(it.page.Data) + inlineEntryOverhead + it.auxCost }

func newInlineSet(maxBytes int) *inlineSet {
	return &inlineSet{max: maxBytes, seen: map[string]struct{}{}, items: map[string]*list.Element{}, latest: map[string]string{}}
}

// evictFor evicts least recently used items, never keep, until cost more
// bytes fit the budget or nothing else is left (mu held).
func (s *inlineSet) evictFor(cost int, keep *list.Element) {
	for s.size+cost > s.max {
		el := s.lru.Back()
		if el == keep {
			el = el.Prev()
		}
		if el == nil {
			return
		}
		it := s.lru.Remove(el).(*inlineItem)
		delete(s.items, it.key)
		if it.base != "" && s.latest[it.base] == it.key {
			delete(s.latest, it.base)
		}
		s.size -= it.cost()
	}
}

// latestFirst returns the first page kept last under base, with its aux.
func (s *inlineSet) latestFirst(base string) (Built, any, bool) {
	if s == nil {
		return Built{}, nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	el := s.items[s.latest[base]]
	if el == nil {
		return Built{}, nil, false
	}
	it := el.Value.(*inlineItem)
	return it.page, it.aux, true
}

// setAux attaches aux, costing cost bytes, to the page kept under key (a
// page no longer kept is left alone); an aux over the budget is dropped.
func (s *inlineSet) setAux(key string, aux any, cost int) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	el := s.items[key]
	if el == nil {
		return
	}
	it := el.Value.(*inlineItem)
	if it.aux != nil || it.cost()+cost > s.max {
		return
	}
	s.evictFor(cost, el)
	it.aux, it.auxCost = aux, cost
	s.size += cost
}

func (s *inlineSet) get(key string) (Built, bool) {
	if s == nil {
		return Built{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	el := s.items[key]
	if el == nil {
		return Built{}, false
	}
	s.lru.MoveToFront(el)
	return el.Value.(*inlineItem).page, true
}

// offer keeps a copy of page under key when first is set or key was
// offered before, evicting the least recently used to fit. base, when not
// empty, makes it the first page kept last under base.
func (s *inlineSet) offer(key, base string, page Built, first bool) bool {
	return s.keep(key, base, page, first, true, nil, 0)
}

// keep is offer; clone copies the page's bytes, aux (costing auxCost) is
// attached to it.
func (s *inlineSet) keep(key, base string, page Built, first, clone bool, aux any, auxCost int) bool {
	if s == nil {
		return false
	}
	cost := len(page.Data) + inlineEntryOverhead + auxCost
	if cost > s.max {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.items[key] != nil {
		return false
	}
	if !first {
		if _, ok := s.seen[key]; !ok {
			if len(s.seen) >= hotSeenMax {
				clear(s.seen)
			}
			s.seen[key] = struct{}{}
			return false
		}
		delete(s.seen, key)
	}
	if prev := s.items[s.latest[base]]; base != "" && prev != nil {
		it := prev.Value.(*inlineItem)
		if it.page.Meta.AsOfCommitSeq > page.Meta.AsOfCommitSeq {
			base = "" // an older pin than the latest: kept, not the latest
		} else {
			// A first page at a newer pin supersedes the one kept last
			// under base: fresh bootstraps ask for the newest pin only.
			s.lru.Remove(prev)
			delete(s.items, it.key)
			delete(s.latest, base)
			s.size -= it.cost()
		}
	}
	s.evictFor(cost, nil)
	if clone {
		page.Data = bytes.Clone(page.Data) // the caller keeps its buffer
	}
	s.items[key] = s.lru.PushFront(&inlineItem{key: key, base: base, page: page, aux: aux, auxCost: auxCost})
	if base != "" {
		s.latest[base] = key
	}
	s.size += cost
	return true
}

func (s *inlineSet) bytes() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size
}

// KeepInline sets the byte budget of the inline pages kept in memory (0 or
// less: none; see InlinePage). Call it before the Cache is used.
func (c *Cache) KeepInline(maxBytes int) {
	c.inline = nil
	if maxBytes > 0 {
		c.inline = newInlineSet(maxBytes)
	}
}

// InlinePage returns the inline page kept for key, counted as an inline
// reuse. Its bytes are shared and must not be modified.
func (c *Cache) InlinePage(key InlineKey) (Built, bool) {
	b, ok := c.inline.get(key.String())
	if ok {
		c.inlineReused.Add(1)
	}
	return b, ok
}

// OfferInlinePage offers an inline page just built for key: a copy is
// kept when first is set (a table's first page) or when the same key was
// offered before (its second build), within the budget, least recently
// used out. The caller keeps page.Data. It reports whether the page was
// kept.
func (c *Cache) OfferInlinePage(key InlineKey, page Built, first bool) bool {
	base := ""
	if first && key.Build.RowCursor == nil {
		base = key.base()
	}
	return c.inline.offer(key.String(), base, page, first)
}

// KeepFirstPage keeps page, a table first page (key has no row cursor)
// just built for key, whose bytes the caller hands over (they are not
// copied and must not be modified from now on), with aux (as
// SetInlineAux, costing auxCost) attached: kept at once, within the
// budget, as OfferInlinePage keeps a first page. It reports whether the
// page was kept.
func (c *Cache) KeepFirstPage(key InlineKey, page Built, aux any, auxCost int) bool {
	base := ""
	if key.Build.RowCursor == nil {
		base = key.base()
	}
	return c.inline.keep(key.String(), base, page, true, false, aux, auxCost)
}

// LatestFirstPage returns the table first page (no row cursor) kept last
// for key at any pin (key's own pin is ignored; the page's is
// Meta.AsOfCommitSeq), with the aux attached to it (SetInlineAux; nil:
// none yet). It is not counted as a reuse. Its bytes are shared and must
// not be modified.
func (c *Cache) LatestFirstPage(key InlineKey) (Built, any, bool) {
	return c.inline.latestFirst(key.base())
}

// SetInlineAux attaches aux (immutable from now on, shared by every
// caller of LatestFirstPage) to the page kept for key, counting cost
// bytes against the inline budget with the page's; nothing happens when
// the page is no longer kept or already has one.
func (c *Cache) SetInlineAux(key InlineKey, aux any, cost int) {
	c.inline.setAux(key.String(), aux, cost)
}

// CountPatched records a table first page built by patching a kept first
// page of an older pin with the changes since (instead of being encoded
// from rows).
func (c *Cache) CountPatched() { c.patched.Add(1) }

// InlineBytes reports the bytes (with a fixed per-page overhead) of the
// inline pages kept.
func (c *Cache) InlineBytes() int { return c.inline.bytes() }
