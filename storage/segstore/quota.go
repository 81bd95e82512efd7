package segstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/syncerr"
)

// Default quota of a segment store (see Quota). 4 GiB is room for the
// segments of hundreds of full bootstraps of large tables (at the default
// 24 h lifetime) while fitting the data volume of a small server; 10,000
// files keeps the segment directory cheap to list (the orphan sweep reads
// it) and is far more pages than honest clients build in a lifetime on
// one scope set per table, pin and page.
const (
	DefaultMaxStoreBytes = 4 << 30
	DefaultMaxStoreFiles = 10_000
	// DefaultPinFor is how long a segment handed out by reference (or
	// just stored) is pinned: a client holding the ref downloads it well
	// within that.
	DefaultPinFor = 5 * time.Minute
)

// quotaRefreshMs is how often, at most, builds within the estimated quota
// run a full pass (listing what the store holds).
const quotaRefreshMs = 1000

// ErrFull: the store is at its quota and every segment in it is pinned,
// so a new one is not kept. Obtain wraps it as sync.rate_limited (retry
// later); an inline page is still sent, only not stored.
var ErrFull = errors.New("segstore: segment store full")

// Quota bounds what a Store (an Evicter) holds: bytes (each segment's
// bytes counted once, however many publications share them) and segments
// (files, on the embedded store). After a build stored, the least
// recently used segments (handed out or downloaded) that are not pinned
// are evicted until both bounds hold; expired ones go first, pinned or
// not. A segment is pinned for PinFor after it was last handed out to a
// client (Obtain, Lookup, Find), so a client mid-bootstrap holding a ref
// is never evicted under; a download already streaming reads an open
// file, which eviction does not interrupt. An evicted segment answers
// ErrExpired (sync.segment_expired: the client pulls again, which
// rebuilds it) and is rebuilt by the next bootstrap needing it.
type Quota struct {
	// MaxBytes and MaxFiles are the bounds (0 or less: unbounded).
	MaxBytes int64
	MaxFiles int
	// PinFor is how long a handed-out segment is pinned (0:
	// DefaultPinFor).
	PinFor time.Duration
}

// quotaState is the Cache's quota bookkeeping.
type quotaState struct {
	q       Quota
	enforce sync.Mutex // one pass at a time; guards the estimate
	// estBytes and estFiles bound the store's contents from above since
	// the last full pass (synced): each build adds its size and one file
	// (an upper bound: its bytes may be shared). A build whose addition
	// keeps the estimate within the quota needs no pass.
	estBytes, estFiles int64
	synced             bool
	lastPassMs         int64 // when the last full pass ran

	mu   sync.Mutex
	used map[string]int64 // segment id → last hand-out or download (ms)
	pins map[string]int64 // segment id → last hand-out (ms)

	bytes, files        atomic.Int64
	evicted, refusedFul atomic.Uint64
}

// SetQuota bounds the store (see Quota); the store must implement
// Evicter, otherwise SetQuota reports an error and nothing is bounded.
// Call it before the Cache is used.
func (c *Cache) SetQuota(q Quota) error {
	if _, ok := c.store.(Evicter); !ok {
		return fmt.Errorf("segstore: the segment store %T cannot be bounded", c.store)
	}
	if q.PinFor <= 0 {
		q.PinFor = DefaultPinFor
	}
	c.quota = &quotaState{q: q, used: map[string]int64{}, pins: map[string]int64{}}
	return nil
}

// touch records a hand-out (pin set) or a download of segment id.
func (c *Cache) touch(id string, pin bool) {
	qs := c.quota
	if qs == nil || id == "" {
		return
	}
	now := c.now().UnixMilli()
	qs.mu.Lock()
	qs.used[id] = now
	if pin {
		qs.pins[id] = now
	}
	qs.mu.Unlock()
}

// enforceQuota evicts until the store is within its quota, after segment
// fresh was stored. When the pinned segments alone exceed it, fresh is
// evicted again (unless pinned) and ErrFull returned.
func (c *Cache) enforceQuota(ctx context.Context, fresh string, freshBytes int64) error {
	return c.enforce(ctx, fresh, freshBytes, nil, "")
}

// enforceQuotaForm is enforceQuota after the enc form (formBytes) of
// segment id was stored. A form is never worth a segment: when evicting
// every segment that may go would not bring the store within its quota,
// the form is dropped again (ErrFull) and nothing is evicted for it; the
// segment itself is never evicted for its own form.
func (c *Cache) enforceQuotaForm(ctx context.Context, fs FormStore, id, enc string, formBytes int64) error {
	return c.enforce(ctx, id, formBytes, fs, enc)
}

// enforce is enforceQuota (form "") or enforceQuotaForm.
func (c *Cache) enforce(ctx context.Context, fresh string, freshBytes int64, fs FormStore, form string) error {
	qs := c.quota
	if qs == nil {
		return nil
	}
	ev := c.store.(Evicter)
	qs.enforce.Lock()
	defer qs.enforce.Unlock()
	now := c.now().UnixMilli()
	// A build needs no full pass when the estimate stays within the quota
	// and one ran in the last second (the gauges lag by at most that).
	if fresh != "" && qs.synced && now-qs.lastPassMs < quotaRefreshMs {
		b, f := qs.estBytes+freshBytes, qs.estFiles
		if form == "" {
			f++ // a form is no segment of its own
		}
		if (qs.q.MaxBytes <= 0 || b <= qs.q.MaxBytes) && (qs.q.MaxFiles <= 0 || f <= int64(qs.q.MaxFiles)) {
			qs.estBytes, qs.estFiles = b, f
			return nil
		}
	}
	qs.synced, qs.lastPassMs = false, now
	held, err := ev.Held(ctx)
	if err != nil {
		return fmt.Errorf("segstore: quota: %w", err)
	}
	var bytes int64
	for _, h := range held {
		bytes += h.Bytes
	}
	files := len(held)
	pinFor := qs.q.PinFor.Milliseconds()
	over := func() bool {
		return (qs.q.MaxBytes > 0 && bytes > qs.q.MaxBytes) || (qs.q.MaxFiles > 0 && files > qs.q.MaxFiles)
	}
	type cand struct {
		h       Held
		used    int64
		expired bool
		pinned  bool
	}
	qs.mu.Lock()
	cands := make([]cand, 0, len(held))
	live := make(map[string]bool, len(held))
	for _, h := range held {
		live[h.ID] = true
		u, ok := qs.used[h.ID]
		if !ok {
			u = h.CreatedAtMs
		}
		p, ok := qs.pins[h.ID]
		cands = append(cands, cand{h: h, used: u, expired: h.ExpiresAtMs <= now, pinned: ok && now-p < pinFor})
	}
	// Forget ids the store no longer holds (bounded by what it holds).
	for id := range qs.used {
		if !live[id] {
			delete(qs.used, id)
			delete(qs.pins, id)
		}
	}
	qs.mu.Unlock()
	formRefused := false
	if form != "" && over() {
		// Would evicting every segment that may go make room? If not,
		// the form goes instead, before anything is evicted for it.
		rb, rf := bytes, files
		for _, k := range cands {
			if k.h.ID != fresh && (k.expired || !k.pinned) {
				rb -= k.h.Bytes
				rf--
			}
		}
		if (qs.q.MaxBytes > 0 && rb > qs.q.MaxBytes) || (qs.q.MaxFiles > 0 && rf > qs.q.MaxFiles) {
			if err := fs.DropForm(ctx, fresh, form); err != nil {
				return fmt.Errorf("segstore: quota: drop form: %w", err)
			}
			bytes -= freshBytes
			formRefused = true
		}
	}
	if over() {
		slices.SortFunc(cands, func(a, b cand) int {
			if a.expired != b.expired {
				if a.expired {
					return -1
				}
				return 1
			}
			return cmp.Compare(a.used, b.used)
		})
		var victims []string
		var freshHeld *Held
		for _, k := range cands {
			if !over() {
				break
			}
			if k.h.ID == fresh && (!k.expired || form != "") {
				h := k.h
				freshHeld = &h
				continue
			}
			if k.pinned && !k.expired {
				continue
			}
			victims = append(victims, k.h.ID)
			bytes -= k.h.Bytes
			files--
		}
		full := false
		if over() && form == "" && freshHeld != nil && !slices.ContainsFunc(cands, func(k cand) bool { return k.h.ID == fresh && k.pinned }) {
			victims = append(victims, fresh)
			bytes -= freshHeld.Bytes
			files--
			full = true
		}
		if len(victims) > 0 {
			n, err := ev.Evict(ctx, victims)
			if full && n > 0 {
				n-- // the refused segment is counted as refused, not evicted
			}
			qs.evicted.Add(uint64(n))
			for _, id := range victims {
				c.hot.dropID(id)
			}
			if err != nil {
				return fmt.Errorf("segstore: quota: evict: %w", err)
			}
			c.log.Debug("segments evicted over the store quota", zap.Int("segments", n),
				zap.Int64("store_bytes", bytes), zap.Int("store_files", files))
		}
		if full {
			qs.refusedFul.Add(1)
			qs.bytes.Store(bytes)
			qs.files.Store(int64(files))
			qs.estBytes, qs.estFiles, qs.synced = bytes, int64(files), true
			return syncerr.Wrap(syncerr.RateLimited, ErrFull,
				"the segment store is at its quota (%d bytes, %d segments) with every segment in use; retry later", qs.q.MaxBytes, qs.q.MaxFiles)
		}
	}
	qs.bytes.Store(bytes)
	qs.files.Store(int64(files))
	qs.estBytes, qs.estFiles, qs.synced = bytes, int64(files), true
	if formRefused {
		return ErrFull
	}
	return nil
}

// QuotaStats are the store usage and quota counters (zero without a
// quota).
type QuotaStats struct {
	// StoreBytes and StoreFiles are the store's contents as of the last
	// full quota pass: at most a second before the last build (sooner
	// when a build could cross the quota), and after each sweep.
	StoreBytes, StoreFiles int64
	// Evicted counts segments evicted to stay within the quota; Refused
	// counts builds not kept because every stored segment was pinned.
	Evicted, Refused uint64
}

// QuotaStats returns the quota counters.
func (c *Cache) QuotaStats() QuotaStats {
	qs := c.quota
	if qs == nil {
		return QuotaStats{}
	}
	return QuotaStats{StoreBytes: qs.bytes.Load(), StoreFiles: qs.files.Load(), Evicted: qs.evicted.Load(), Refused: qs.refusedFul.Load()}
}

// EnforceQuota runs one quota pass now (the sweeper runs one after each
// sweep), refreshing QuotaStats.
func (c *Cache) EnforceQuota(ctx context.Context) error {
	err := c.enforceQuota(ctx, "", 0)
	if errors.Is(err, ErrFull) {
		return nil
	}
	return err
}
