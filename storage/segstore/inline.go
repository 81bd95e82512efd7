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

// inlineSet keeps in memory the bytes of inline pages (rows segments sent
// in a response and never stored), least recently used first out, within
// a byte budget. A table's first page is kept when it is first built (so N
// clients bootstrapping or reconnecting on one scope at one pin cost one
// encode); a later page is kept on its second build within the seen
// window (so one client's long bootstrap leaves at most its first page
// behind, and keeps reusing its one page buffer). A page over the budget
// is never kept. Safe for concurrent use.
type inlineSet struct {
	mu    sync.Mutex
	max   int
	size  int
	seen  map[string]struct{}
	items map[string]*list.Element
	lru   list.List // front: most recently used *inlineItem
}

type inlineItem struct {
	key  string
	page Built
}

func newInlineSet(maxBytes int) *inlineSet {
	return &inlineSet{max: maxBytes, seen: map[string]struct{}{}, items: map[string]*list.Element{}}
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
// offered before, evicting the least recently used to fit.
func (s *inlineSet) offer(key string, page Built, first bool) bool {
	if s == nil {
		return false
	}
	cost := len(page.Data) + inlineEntryOverhead
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
	for s.size+cost > s.max && s.lru.Len() > 0 {
		it := s.lru.Remove(s.lru.Back()).(*inlineItem)
		delete(s.items, it.key)
		s.size -= len(it.page.Data) + inlineEntryOverhead
	}
	page.Data = bytes.Clone(page.Data) // the caller keeps its buffer
	s.items[key] = s.lru.PushFront(&inlineItem{key: key, page: page})
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
	return c.inline.offer(key.String(), page, first)
}

// InlineBytes reports the bytes (with a fixed per-page overhead) of the
// inline pages kept.
func (c *Cache) InlineBytes() int { return c.inline.bytes() }
