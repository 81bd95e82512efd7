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
// (ID, ByteLength, Partition, Key, CreatedAtMs, ExpiresAtMs are filled in by
// the Cache).
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

	built, reused, served, servedBytes, expired, bypassed atomic.Uint64
	encoded, inlineReused                                 atomic.Uint64
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
	// (Put keeps its entry); answer with what is stored, so the id names
	// bytes that exist even for non-deterministic builds (SQLite images).
	if stored, err := c.store.Lookup(ctx, partition, k, m.CreatedAtMs); err == nil {
		m = stored
	}
	return m, false, nil
}

// Forget drops segment id of partition from the hot set and reports
// whether it was kept there: its entry list is read from the store again
// on the next Get or Open (an entry stored under another build key since
// the segment was kept, by this process or another sharing the store, is
// not in the kept list).
func (c *Cache) Forget(partition, id string) bool { return c.hot.drop(hotKey(partition, id)) }

// Get returns the unexpired entries and bytes of segment id in partition
// (ErrNotFound, ErrExpired otherwise) and counts the download.
// A segment downloaded again is served from the hot set (see KeepHot)
// while unexpired; the returned bytes must not be modified.
func (c *Cache) Get(ctx context.Context, partition, id string) (metas []Meta, data []byte, err error) {
	defer func() {
		if err == nil {
			c.touch(id, false) // only a served id: probes of unknown ids leave nothing
		}
	}()
	nowMs := c.now().UnixMilli()
	key := hotKey(partition, id)
	if metas, data, ok := c.hot.get(key, nowMs); ok {
		return metas, data, nil
	}
	tok := c.hot.token()
	metas, data, err = c.store.Get(ctx, partition, id, nowMs)
	if err != nil {
		return nil, nil, err
	}
	c.hot.offer(key, tok, metas, data)
	return metas, data, nil
}

// Open is Get for a download that can stream: when the store keeps the
// segment's bytes in a file (FileOpener) and the hot set will not keep
// them, it returns the open, checked file instead of bytes (the caller
// closes it); otherwise the bytes, as Get. The download is counted
// toward hot-set admission either way.
func (c *Cache) Open(ctx context.Context, partition, id string) ([]Meta, []byte, *os.File, error) {
	fo, ok := c.store.(FileOpener)
	if !ok {
		metas, data, err := c.Get(ctx, partition, id)
		return metas, data, nil, err
	}
	nowMs := c.now().UnixMilli()
	key := hotKey(partition, id)
	if metas, data, ok := c.hot.get(key, nowMs); ok {
		c.touch(id, false)
		return metas, data, nil, nil
	}
	tok := c.hot.token()
	metas, f, err := fo.OpenFile(ctx, partition, id, nowMs)
	if err != nil {
		return nil, nil, nil, err
	}
	if f == nil { // bytes in the store itself
		metas, data, err := c.store.Get(ctx, partition, id, nowMs)
		if err != nil {
			return nil, nil, nil, err
		}
		c.hot.offer(key, tok, metas, data)
		c.touch(id, false)
		return metas, data, nil, nil
	}
	c.touch(id, false)
	if !c.hot.wants(key, metas[0].ByteLength) {
		return metas, nil, f, nil
	}
	// A second download: the hot set keeps the bytes.
	data := make([]byte, metas[0].ByteLength)
	_, err = io.ReadFull(f, data)
	_ = f.Close()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("segstore: read segment file: %w", err)
	}
	c.hot.offer(key, tok, metas, data)
	return metas, data, nil, nil
}

// KeepHot sets the byte budget of the segments kept in memory after their
// second download (0 or less: none). Call it before the Cache is used.
// Revocation is unaffected (the caller checks scopes on every download);
// an entry is dropped at the earliest expiry of its entries, but the sweep
// does not see it.
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
		Encoded: c.encoded.Load(), InlineReused: c.inlineReused.Load()}
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
