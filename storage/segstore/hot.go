package segstore

import (
	"container/list"
	"math"
	"sync"
)

// DefaultHotBytes is the default byte budget of a Cache's hot segments.
const DefaultHotBytes = 64 << 20

// hotSeenMax bounds the set of segments downloaded once (the admission
// filter); it is cleared when full.
const hotSeenMax = 4096

// hotSet keeps in memory the bytes of segments downloaded more than once,
// least recently used first out, within a byte budget. A segment enters on
// its second download within the seen window (so one client's bootstrap,
// which downloads each segment once, leaves nothing behind; a storm of
// clients on one scope is served from memory after the first two). A
// kept segment holds the publications read with its bytes and is served
// only before the earliest expiry of the live ones (so a publication live
// when kept is live whenever it is served); expired ones are dropped when
// met. A segment larger than the budget is never kept. Safe for
// concurrent use.
//
// A kept segment may also hold its stored encoded forms (offerForm),
// exactly the bytes the store holds, so a compressed download of a hot
// segment reads no form from the store. A form counts its bytes against
// the same budget and goes with its segment: it is kept only while its
// segment is, and leaves with it (LRU eviction, expiry, drop, dropID); it
// is never evicted on its own. Keeping one may evict other segments (least
// recently used first), never its own; a form that would not fit with its
// segment and its other forms in the budget is not kept.
type hotSet struct {
	mu    sync.Mutex
	max   int
	size  int
	seen  map[string]struct{}
	items map[string]*list.Element
	// keys indexes the kept segments by build key (hotKey(partition,
	// Meta.Key) of each of their live publications), so a lookup of a hot
	// page by its key needs no store read either.
	keys map[string]keyed
	lru  list.List // front: most recently used *hotItem
	// epoch counts drops (drop): an offer whose store read began before
	// the latest drop may carry a publication list older than the one the drop
	// was for, so it is not kept (see token).
	epoch uint64
}

// keyed is a kept segment's publication for one build key.
type keyed struct {
	el   *list.Element
	meta Meta
}

type hotItem struct {
	key       string
	pubs      []Publication
	data      []byte
	expiresMs int64
	// forms holds the segment's stored encoded forms by encoding; size
	// counts them with data.
	forms map[string][]byte
	size  int
}

func newHotSet(maxBytes int) *hotSet {
	return &hotSet{max: maxBytes, seen: map[string]struct{}{}, items: map[string]*list.Element{}, keys: map[string]keyed{}}
}

func hotKey(partition, id string) string { return partition + "\x00" + id }

// get returns the kept publications and bytes of key if unexpired at
// nowMs.
func (h *hotSet) get(key string, nowMs int64) ([]Publication, []byte, bool) {
	if h == nil || h.max <= 0 {
		return nil, nil, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	el := h.items[key]
	if el == nil {
		return nil, nil, false
	}
	it := el.Value.(*hotItem)
	if nowMs >= it.expiresMs {
		h.remove(el)
		return nil, nil, false
	}
	h.lru.MoveToFront(el)
	return it.pubs, it.data, true
}

// lookup returns the publication kept for build key key (hotKey(partition,
// buildKey)) if its segment is kept and unexpired at nowMs.
func (h *hotSet) lookup(key string, nowMs int64) (Meta, bool) {
	if h == nil || h.max <= 0 {
		return Meta{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	k, ok := h.keys[key]
	if !ok {
		return Meta{}, false
	}
	if it := k.el.Value.(*hotItem); nowMs >= it.expiresMs {
		h.remove(k.el)
		return Meta{}, false
	}
	h.lru.MoveToFront(k.el)
	return k.meta, true
}

// offer records a download of key read from the store; on the second
// download it keeps the bytes (evicting the least recently used).
// wants counts a download of key (size bytes) that is not kept, as offer
// would, and reports whether offer would keep it now (it was downloaded
// before): the caller then reads the bytes and offers them.
func (h *hotSet) wants(key string, size int64) bool {
	if h == nil || h.max <= 0 || size > int64(h.max) {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.items[key] != nil {
		return false
	}
	if _, ok := h.seen[key]; ok {
		return true
	}
	if len(h.seen) >= hotSeenMax {
		clear(h.seen)
	}
	h.seen[key] = struct{}{}
	return false
}

// token returns the drop epoch to pass to offer: take it before reading
// the store.
func (h *hotSet) token() uint64 {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.epoch
}

// offer: see wants. tok is token() taken before the store read that gave
// pubs; when a segment was dropped since, the offer is ignored (neither
// kept nor counted), so a list read before a publication was added and a
// drop for that reason never comes back into the set. A read with no
// bytes (no live publication) is neither kept nor counted.
func (h *hotSet) offer(key string, tok uint64, pubs []Publication, data []byte) {
	if h == nil || h.max <= 0 || len(data) > h.max || data == nil || !AnyLive(pubs) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.items[key] != nil || tok != h.epoch {
		return
	}
	if _, ok := h.seen[key]; !ok {
		if len(h.seen) >= hotSeenMax {
			clear(h.seen)
		}
		h.seen[key] = struct{}{}
		return
	}
	delete(h.seen, key)
	exp := int64(math.MaxInt64)
	for _, p := range pubs {
		if p.Live {
			exp = min(exp, p.ExpiresAtMs)
		}
	}
	for h.size+len(data) > h.max && h.lru.Len() > 0 {
		h.remove(h.lru.Back())
	}
	el := h.lru.PushFront(&hotItem{key: key, pubs: pubs, data: data, expiresMs: exp, size: len(data)})
	h.items[key] = el
	for _, p := range pubs {
		if p.Live && p.Key != "" {
			h.keys[hotKey(p.Partition, p.Key)] = keyed{el, p.Meta}
		}
	}
	h.size += len(data)
}

func (h *hotSet) remove(el *list.Element) {
	it := h.lru.Remove(el).(*hotItem)
	delete(h.items, it.key)
	for _, p := range it.pubs {
		if k, ok := h.keys[hotKey(p.Partition, p.Key)]; ok && k.el == el {
			delete(h.keys, hotKey(p.Partition, p.Key))
		}
	}
	h.size -= it.size
}

// getForm returns the enc form kept with the segment of key if the
// segment is kept and unexpired at nowMs (it becomes the most recently
// used).
func (h *hotSet) getForm(key, enc string, nowMs int64) ([]byte, bool) {
	if h == nil || h.max <= 0 {
		return nil, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	el := h.items[key]
	if el == nil {
		return nil, false
	}
	it := el.Value.(*hotItem)
	if nowMs >= it.expiresMs {
		h.remove(el)
		return nil, false
	}
	f, ok := it.forms[enc]
	if !ok {
		return nil, false
	}
	h.lru.MoveToFront(el)
	return f, true
}

// holds reports whether the segment of key is kept and n more bytes fit
// with it and its forms in the budget (so a form of n bytes read for it
// is worth offering).
func (h *hotSet) holds(key string, n int64) bool {
	if h == nil || h.max <= 0 {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	el := h.items[key]
	return el != nil && int64(el.Value.(*hotItem).size)+n <= int64(h.max)
}

// offerForm keeps data, the stored enc form of the segment of key, with
// that segment if it is kept, no segment was dropped since tok (token(),
// taken before the store read that gave data) and the segment with its
// forms fits the budget; other segments are evicted, least recently used
// first, to make room. It reports whether data is kept.
func (h *hotSet) offerForm(key string, tok uint64, enc string, data []byte) bool {
	if h == nil || h.max <= 0 || data == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	el := h.items[key]
	if el == nil || tok != h.epoch {
		return false
	}
	it := el.Value.(*hotItem)
	if _, ok := it.forms[enc]; ok {
		return true
	}
	if it.size+len(data) > h.max {
		return false
	}
	h.lru.MoveToFront(el)
	for h.size+len(data) > h.max && h.lru.Back() != el {
		h.remove(h.lru.Back())
	}
	if it.forms == nil {
		it.forms = map[string][]byte{}
	}
	it.forms[enc] = data
	it.size += len(data)
	h.size += len(data)
	return true
}

// drop forgets the kept segment of key, if any (its publication list may
// be stale: another publication of the same id was stored since it was
// kept).
func (h *hotSet) drop(key string) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.epoch++
	el, ok := h.items[key]
	if ok {
		h.remove(el)
	}
	return ok
}

// bytes reports the bytes kept (segments and their forms).
func (h *hotSet) bytes() int {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.size
}

// dropID forgets the kept segment id in every partition (it was evicted
// from the store).
func (h *hotSet) dropID(id string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.epoch++
	for _, el := range h.items {
		if it := el.Value.(*hotItem); len(it.pubs) > 0 && it.pubs[0].ID == id {
			h.remove(el)
		}
	}
}
