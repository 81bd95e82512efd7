package segstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// DefaultTTL is how long a segment lives after it is built (SPEC §5.1).
const DefaultTTL = 24 * time.Hour

// TombstoneRetention is how long after its expiry a segment id still
// answers sync.segment_expired rather than sync.not_found.
const TombstoneRetention = 7 * 24 * time.Hour

// KeyParts are the fields that identify one buildable segment. Two
// bootstraps with equal KeyParts get the same segment without a rebuild.
type KeyParts struct {
	Table         string
	ScopeDigest   string
	AsOfCommitSeq int64
	// RowCursor is where the page starts (nil: the first page) and
	// PageRows its row limit; together they are the page.
	RowCursor     *string
	PageRows      int
	SchemaVersion int32
	LogEpoch      string
	// Lane distinguishes rows segments from SQLite images.
	Lane string
}

// Key renders the parts as a stable build key (a SHA-256 of their fields).
func (k KeyParts) Key() string {
	h := sha256.New()
	cur := "\x00nil"
	if k.RowCursor != nil {
		cur = *k.RowCursor
	}
	for _, f := range []string{k.Table, k.ScopeDigest, strconv.FormatInt(k.AsOfCommitSeq, 10), cur,
		strconv.Itoa(k.PageRows), strconv.Itoa(int(k.SchemaVersion)), k.LogEpoch, k.Lane} {
		h.Write([]byte(strconv.Itoa(len(f))))
		h.Write([]byte{':'})
		h.Write([]byte(f))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Built is what a builder returns: the segment bytes and their description
// (ID, ByteLength, Partition, LogEpoch, Key, SchemaVersion, CreatedAtMs,
// ExpiresAtMs are filled in by the Cache).
type Built struct {
	Meta Meta
	Data []byte
}

// Stats are the Cache's counters since start.
type Stats struct {
	// Built counts segments built and stored; Reused counts requests
	// answered with a segment already stored (including waiters of a
	// concurrent build of the same key).
	Built  uint64 `json:"built"`
	Reused uint64 `json:"reused"`
	// Served and ServedBytes count downloads and their uncompressed bytes.
	Served      uint64 `json:"served"`
	ServedBytes uint64 `json:"servedBytes"`
	// Expired counts segments whose bytes the sweep dropped.
	Expired uint64 `json:"expired"`
	// Bypassed counts inline pages served without the store because it
	// failed (CountBypassed).
	Bypassed uint64 `json:"bypassed"`
	// Encoded counts bootstrap pages and SQLite images encoded from rows
	// (CountEncoded), whether then stored, kept in memory or sent once:
	// a bootstrap answered from a stored or kept segment adds none.
	Encoded uint64 `json:"encoded"`
	// InlineReused counts inline pages answered from memory (InlinePage)
	// instead of being encoded again.
	InlineReused uint64 `json:"inlineReused"`
	// Patched counts table first pages built by patching the first page
	// kept for an older pin with the changes since (CountPatched): not
	// encoded from rows, so not in Encoded.
	Patched uint64 `json:"patched"`
	// FormsBuilt counts encoded forms (zstd, gzip) built from a segment's
	// bytes (Form): once per segment and encoding while the store keeps
	// it. FormsServed counts downloads answered with a form already built
	// (stored, or built by a concurrent download). FormsUnstored counts
	// forms built but not kept (the quota refused them, or the store
	// failed): sent once, built again by the next such download.
	FormsBuilt    uint64 `json:"formsBuilt"`
	FormsServed   uint64 `json:"formsServed"`
	FormsUnstored uint64 `json:"formsUnstored"`
}

// Cache is the segment service every partition of a process shares: TTL,
// single-flight building per build key, downloads, the expiry sweep and
// metrics over a Store. Safe for concurrent use.
type Cache struct {
	store Store
	ttl   time.Duration
	now   func() time.Time
	log   *zap.Logger

	mu     sync.Mutex
	flight map[string]*flight
	hot    *hotSet     // nil: none (KeepHot)
	inline *inlineSet  // nil: none (KeepInline)
	quota  *quotaState // nil: unbounded (SetQuota)
	forms  map[string]*formFlight

	built, reused, served, servedBytes, expired, bypassed atomic.Uint64
	encoded, inlineReused, patched                        atomic.Uint64
	formsBuilt, formsServed, formsUnstored                atomic.Uint64
}

type flight struct {
	done chan struct{}
	meta Meta
	err  error
}

// NewCache returns a Cache over store. ttl <= 0 takes DefaultTTL; now nil
// takes time.Now; log nil takes a no-op logger.
func NewCache(store Store, ttl time.Duration, now func() time.Time, log *zap.Logger) *Cache {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Cache{store: store, ttl: ttl, now: now, log: log, flight: map[string]*flight{}}
}

// TTL returns the segment lifetime.
func (c *Cache) TTL() time.Duration { return c.ttl }

// Obtain returns the unexpired segment for (partition, key), building it
// with build when there is none. Concurrent callers for the same key build
// once: the others wait for that build and share its result. reused reports
// that this call did not build.
func (c *Cache) Obtain(ctx context.Context, partition string, key KeyParts, build func(ctx context.Context) (Built, error)) (m Meta, reused bool, err error) {
	k := key.Key()
	defer func() {
		if err == nil {
			c.touch(m.ID, true) // handed out: pinned against eviction
		}
	}()
	if m, err := c.lookup(ctx, partition, k); err == nil {
		c.reused.Add(1)
		return m, true, nil
	} else if !errors.Is(err, ErrNotFound) {
		return Meta{}, false, err
	}
	fk := partition + "\x00" + k
	c.mu.Lock()
	if f := c.flight[fk]; f != nil {
		c.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return Meta{}, false, ctx.Err()
		}
		if f.err != nil {
			return Meta{}, false, f.err
		}
		c.reused.Add(1)
		return f.meta, true, nil
	}
	f := &flight{done: make(chan struct{})}
	c.flight[fk] = f
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.flight, fk)
		c.mu.Unlock()
		f.meta, f.err = m, err
		close(f.done)
	}()
	// Look again now that this call owns the flight: a caller whose first
	// lookup missed just before an earlier flight stored the segment, and
	// who took the lock just after that flight ended, must reuse it, not
	// build it a second time.
	if stored, lerr := c.store.Lookup(ctx, partition, k, c.now().UnixMilli()); lerr == nil {
		c.reused.Add(1)
		return stored, true, nil
	} else if !errors.Is(lerr, ErrNotFound) {
		return Meta{}, false, lerr
	}
	b, err := build(ctx)
	if err != nil {
		return Meta{}, false, err
	}
	m = b.Meta
	m.Partition, m.Key, m.ID, m.ByteLength = partition, k, ID(b.Data), int64(len(b.Data))
	m.LogEpoch, m.SchemaVersion = key.LogEpoch, key.SchemaVersion
	m.CreatedAtMs = c.now().UnixMilli()
	m.ExpiresAtMs = m.CreatedAtMs + c.ttl.Milliseconds()
	if err := c.store.Put(ctx, m, b.Data); err != nil {
		return Meta{}, false, err
	}
	c.built.Add(1)
	if qerr := c.enforceQuota(ctx, m.ID, m.ByteLength); errors.Is(qerr, ErrFull) {
		return Meta{}, false, qerr
	} else if qerr != nil {
		c.log.Warn("segment store quota pass failed", zap.Error(qerr))
	}
	// Another process sharing the store may have stored this key first
	// (Put keeps its publication); answer with what is stored, so the id names
	// bytes that exist even for non-deterministic builds (SQLite images).
	if stored, err := c.store.Lookup(ctx, partition, k, m.CreatedAtMs); err == nil {
		m = stored
	}
	return m, false, nil
}

// Forget drops segment id of partition from the hot set and reports
// whether it was kept there: its publications are read from the store
// again on the next Get or Open (one published since the segment was
// kept, by this process or another sharing the store, is not in the kept
// list). A list offered by a read that began before the drop is not kept.
func (c *Cache) Forget(partition, id string) bool { return c.hot.drop(hotKey(partition, id)) }

// Get returns the live publications and the bytes of segment id in
// partition (ErrExpired when it has publications there but none is live,
// ErrNotFound when it has none) and counts the download. A segment
// downloaded again is served from the hot set (see KeepHot) while its
// live publications are; the returned bytes must not be modified.
func (c *Cache) Get(ctx context.Context, partition, id string) ([]Meta, []byte, error) {
	pubs, data, err := c.get(ctx, partition, id)
	if err != nil {
		return nil, nil, err
	}
	metas := make([]Meta, 0, len(pubs))
	for _, p := range pubs {
		if p.Live {
			metas = append(metas, p.Meta)
		}
	}
	if len(metas) == 0 {
		return nil, nil, ErrExpired
	}
	return metas, data, nil
}

// get is Open without files: every publication of id in partition and
// the bytes when one is live.
func (c *Cache) get(ctx context.Context, partition, id string) (pubs []Publication, data []byte, err error) {
	defer func() {
		if err == nil && data != nil {
			c.touch(id, false) // only a served id: probes of unknown ids leave nothing
		}
	}()
	nowMs := c.now().UnixMilli()
	key := hotKey(partition, id)
	if pubs, data, ok := c.hot.get(key, nowMs); ok {
		return pubs, data, nil
	}
	tok := c.hot.token()
	pubs, data, err = c.store.Get(ctx, partition, id, nowMs)
	if err != nil {
		return nil, nil, err
	}
	c.hot.offer(key, tok, pubs, data)
	return pubs, data, nil
}

// Opened is a segment as Open reads it.
type Opened struct {
	// Pubs are every publication of the segment in the partition read,
	// live or not.
	Pubs []Publication
	// Data or File holds the bytes when a publication is live: File open
	// and checked (the caller closes it), Data shared (not to be
	// modified).
	Data []byte
	File *os.File
	// Kept: Pubs is the list kept in memory with the bytes (KeepHot),
	// which may predate a publication made since. A caller that finds no
	// publication serving its download drops it (Forget) and opens
	// again.
	Kept bool
}

// Open returns every publication of segment id in partition ("" for
// every partition), live or not, and, when one of them is live, the
// segment's bytes: when the store keeps them in a file (FileOpener) and
// the hot set will not keep them, as the open, checked file, otherwise in
// memory. ErrNotFound when id has no publication in partition. A
// download is counted toward hot-set admission either way. The caller
// decides which publication, if any, serves its request (SPEC §5.5).
func (c *Cache) Open(ctx context.Context, partition, id string) (Opened, error) {
	nowMs := c.now().UnixMilli()
	key := hotKey(partition, id)
	if pubs, data, ok := c.hot.get(key, nowMs); ok {
		c.touch(id, false)
		return Opened{Pubs: pubs, Data: data, Kept: true}, nil
	}
	tok := c.hot.token()
	fo, ok := c.store.(FileOpener)
	if !ok {
		pubs, data, err := c.store.Get(ctx, partition, id, nowMs)
		if err != nil {
			return Opened{}, err
		}
		c.hot.offer(key, tok, pubs, data)
		if data != nil {
			c.touch(id, false)
		}
		return Opened{Pubs: pubs, Data: data}, nil
	}
	pubs, f, err := fo.OpenFile(ctx, partition, id, nowMs)
	if err != nil {
		return Opened{}, err
	}
	if f == nil {
		if !AnyLive(pubs) {
			return Opened{Pubs: pubs}, nil
		}
		// The bytes are in the store itself.
		pubs, data, err := c.store.Get(ctx, partition, id, nowMs)
		if err != nil {
			return Opened{}, err
		}
		c.hot.offer(key, tok, pubs, data)
		if data != nil {
			c.touch(id, false)
		}
		return Opened{Pubs: pubs, Data: data}, nil
	}
	c.touch(id, false)
	var size int64
	for _, p := range pubs {
		size = max(size, p.ByteLength)
	}
	if !c.hot.wants(key, size) {
		return Opened{Pubs: pubs, File: f}, nil
	}
	// A second download: the hot set keeps the bytes.
	data := make([]byte, size)
	_, err = io.ReadFull(f, data)
	_ = f.Close()
	if err != nil {
		return Opened{}, fmt.Errorf("segstore: read segment file: %w", err)
	}
	c.hot.offer(key, tok, pubs, data)
	return Opened{Pubs: pubs, Data: data}, nil
}

// KeepHot sets the byte budget of the segments kept in memory after their
// second download (0 or less: none). Call it before the Cache is used.
// Revocation is unaffected (the caller checks scopes and epochs on every
// download); a kept segment is dropped at the earliest expiry of its live
// publications, but the sweep does not see it.
func (c *Cache) KeepHot(maxBytes int) {
	c.hot = nil
	if maxBytes > 0 {
		c.hot = newHotSet(maxBytes)
	}
}

// HotBytes reports the bytes of the segments kept hot.
func (c *Cache) HotBytes() int { return c.hot.bytes() }

// CountServed records a download of n uncompressed bytes.
func (c *Cache) CountServed(n int) {
	c.served.Add(1)
	c.servedBytes.Add(uint64(n))
}

// Sweep expires the segments whose TTL has passed and forgets tombstones
// older than TombstoneRetention.
func (c *Cache) Sweep(ctx context.Context) (int, error) {
	now := c.now().UnixMilli()
	n, err := c.store.Sweep(ctx, now, now-TombstoneRetention.Milliseconds())
	c.expired.Add(uint64(n))
	if err != nil {
		return n, fmt.Errorf("segstore: sweep: %w", err)
	}
	return n, nil
}

// RunSweeper sweeps every interval until ctx ends; the caller owns the
// goroutine that runs it. interval <= 0 takes min(TTL/4, 10 min).
func (c *Cache) RunSweeper(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = min(c.ttl/4, 10*time.Minute)
	}
	t := time.NewTicker(max(interval, time.Second))
	defer t.Stop()
	c.quotaPass(ctx) // a lowered quota holds from the start
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n, err := c.Sweep(ctx); err != nil {
				c.log.Warn("segment sweep failed", zap.Error(err))
			} else if n > 0 {
				c.log.Debug("segments expired", zap.Int("segments", n))
			}
			c.quotaPass(ctx)
		}
	}
}

// quotaPass runs EnforceQuota for the sweeper, logging a failure.
func (c *Cache) quotaPass(ctx context.Context) {
	if err := c.EnforceQuota(ctx); err != nil && ctx.Err() == nil {
		c.log.Warn("segment store quota pass failed", zap.Error(err))
	}
}

// Stats returns the counters.
func (c *Cache) Stats() Stats {
	return Stats{Built: c.built.Load(), Reused: c.reused.Load(), Served: c.served.Load(),
		ServedBytes: c.servedBytes.Load(), Expired: c.expired.Load(), Bypassed: c.bypassed.Load(),
		Encoded: c.encoded.Load(), InlineReused: c.inlineReused.Load(), Patched: c.patched.Load(),
		FormsBuilt: c.formsBuilt.Load(), FormsServed: c.formsServed.Load(), FormsUnstored: c.formsUnstored.Load()}
}

// CountEncoded records one bootstrap page or SQLite image encoded from
// rows.
func (c *Cache) CountEncoded() { c.encoded.Add(1) }

// CountReused records a request answered with a segment Find returned.
func (c *Cache) CountReused() { c.reused.Add(1) }

// CountBypassed records an inline page served without the store, which
// failed to read or keep it.
func (c *Cache) CountBypassed() { c.bypassed.Add(1) }

// Close closes the Store.
func (c *Cache) Close() error { return c.store.Close() }

// Lookup returns the unexpired segment stored for (partition, key), counted
// as a reuse; ErrNotFound when there is none.
func (c *Cache) Lookup(ctx context.Context, partition string, key KeyParts) (Meta, error) {
	m, err := c.lookup(ctx, partition, key.Key())
	if err != nil {
		return Meta{}, err
	}
	c.reused.Add(1)
	c.touch(m.ID, true)
	return m, nil
}

// Find is Lookup without counting a reuse: the caller counts one
// (CountReused) when it answers with the segment.
func (c *Cache) Find(ctx context.Context, partition string, key KeyParts) (Meta, error) {
	m, err := c.lookup(ctx, partition, key.Key())
	if err == nil {
		c.touch(m.ID, true)
	}
	return m, err
}

// lookup answers from the hot set when the key's segment is kept there,
// from the store otherwise.
func (c *Cache) lookup(ctx context.Context, partition, key string) (Meta, error) {
	nowMs := c.now().UnixMilli()
	if m, ok := c.hot.lookup(hotKey(partition, key), nowMs); ok {
		return m, nil
	}
	return c.store.Lookup(ctx, partition, key, nowMs)
}
