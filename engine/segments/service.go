// Package segments serves the segments bootstraps hand out by reference
// (SPEC §5.4, §5.5): it owns the segment cache over the configured
// segment store (single-flight builds, the hot-segment and inline-page
// memory budgets), the expiry sweeper that runs until Close, the signing
// of segment URLs, and the authorization of every download. The engine
// builds one Service, hands its cache to the partition actors (Configure)
// and starts and stops it; transports reach it through Engine.Segments.
package segments

import (
	"context"
	"errors"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine/access"
	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/segstore"
)

// Options configure segments (engine.Config.Segments).
type Options struct {
	// Store stores the rows segments bootstraps hand out by reference
	// (default: an in-memory store). Use sqlitefile.Open for the embedded
	// mode and pgseg.Open when processes share a database, so any of them
	// serves a segment another built. The service closes it in Close.
	Store segstore.Store
	// Images builds the SQLite images (SPEC §5.3) served, by reference, to
	// clients accepting them for a table over one page. nil: no images
	// are served (such a client gets rows segments, as one not accepting
	// images does). The engine links no SQLite driver; set
	// sqliteimage.Builder{}, which does, to serve images.
	Images partition.ImageBuilder
	// TTL is how long a segment is served after it is built (default
	// 24h); an expiry sweep runs every min(TTL/4, 10m).
	TTL time.Duration
	// InlineMaxBytes is the largest first bootstrap page sent inline to a
	// client accepting both inline rows and refs (0: 256 KiB; negative:
	// none, every bootstrap of such a client goes by SEGMENT_REF).
	InlineMaxBytes int
	// HotBytes is the memory budget for segments downloaded more than
	// once (a storm of clients on one scope): they are served from
	// memory, least recently used out, until they expire (0: 64 MiB,
	// segstore.DefaultHotBytes; negative: none). A segment downloaded once
	// is never kept.
	HotBytes int
	// InlinePageBytes is the memory budget for inline bootstrap pages
	// (those under InlineMaxBytes, sent in the response and never stored):
	// a table's first page is kept when built, a later page on its second
	// build, and answers every later request of its key (partition, table,
	// scope digest, pin, row cursor, page size, schema version, log epoch,
	// stored schema version) instead of being encoded again, least
	// recently used out (0: 32 MiB, segstore.DefaultInlineBytes; negative:
	// none). A commit moves the pin, a rotation or restore the log epoch:
	// a kept page is never answered for rows that changed.
	InlinePageBytes int
	// StoreMaxBytes and StoreMaxFiles bound what the segment store holds
	// (segstore.Quota): bytes, each segment's counted once however many
	// publications share it, and segments (files, on the embedded store). Over
	// either, expired segments and then the least recently used ones not
	// handed out within PinFor are evicted after each build; when every
	// stored segment is pinned a new one is not kept (a ref page answers
	// sync.rate_limited, an inline page is sent unstored). An evicted
	// segment's download answers sync.segment_expired (pull again).
	// 0: segstore.DefaultMaxStoreBytes (4 GiB), DefaultMaxStoreFiles
	// (10,000); negative: unbounded. A store that cannot be bounded
	// (not a segstore.Evicter) is left unbounded, with a warning.
	StoreMaxBytes int64
	StoreMaxFiles int
	// PinFor is how long a segment handed out to a client is pinned
	// against eviction (0: segstore.DefaultPinFor, 5 minutes).
	PinFor time.Duration
}

// Deps are what the engine gives the service.
type Deps struct {
	// Schema is the served schema; Limits bound a download's requested
	// scope map as a request's.
	Schema *schema.Schema
	Limits partition.Limits
	// Resolver resolves the caller's scopes on every download (the
	// engine's panic-safe resolver).
	Resolver access.ScopeResolver
	// Epochs reads a partition's live log epoch on every download (the
	// engine gives its backend's Log role): only publications of that
	// epoch are served. Without it every download fails closed
	// (sync.internal_error).
	Epochs EpochReader
	// SignedURLs, when set with PublicURL, signs segment URLs for clients
	// accepting them (engine.Config.SignedURLs, engine.Config.PublicURL).
	SignedURLs *segstore.Signer
	PublicURL  func() string
	// Now is the clock and Logger the log (both required).
	Now    func() time.Time
	Logger *zap.Logger
}

// EpochReader reads a partition's registry entry: its live log epoch
// (storage.Log implements it).
type EpochReader interface {
	ReadPartition(ctx context.Context, partition string) (storage.PartitionInfo, error)
}

// noEpochs is the EpochReader of a service given none: it reads nothing.
type noEpochs struct{}

func (noEpochs) ReadPartition(context.Context, string) (storage.PartitionInfo, error) {
	return storage.PartitionInfo{}, errors.New("segments: no epoch reader configured (Deps.Epochs)")
}

// Service serves segments. It is safe for concurrent use.
type Service struct {
	opts     Options
	deps     Deps
	segments *segstore.Cache

	stopSweep context.CancelFunc
	sweepDone chan struct{}
}

// New builds the service over opts.Store (an in-memory store when nil);
// Start runs its sweeper.
func New(opts Options, deps Deps) *Service {
	if opts.Store == nil {
		opts.Store = segstore.NewMemory()
	}
	if deps.Epochs == nil {
		deps.Epochs = noEpochs{}
	}
	c := segstore.NewCache(opts.Store, opts.TTL, deps.Now, deps.Logger)
	if opts.HotBytes == 0 {
		opts.HotBytes = segstore.DefaultHotBytes
	}
	c.KeepHot(opts.HotBytes)
	if opts.InlinePageBytes == 0 {
		opts.InlinePageBytes = segstore.DefaultInlineBytes
	}
	c.KeepInline(opts.InlinePageBytes)
	if opts.StoreMaxBytes == 0 {
		opts.StoreMaxBytes = segstore.DefaultMaxStoreBytes
	}
	if opts.StoreMaxFiles == 0 {
		opts.StoreMaxFiles = segstore.DefaultMaxStoreFiles
	}
	if opts.StoreMaxBytes > 0 || opts.StoreMaxFiles > 0 {
		q := segstore.Quota{MaxBytes: max(opts.StoreMaxBytes, 0), MaxFiles: max(opts.StoreMaxFiles, 0), PinFor: opts.PinFor}
		if err := c.SetQuota(q); err != nil && deps.Logger != nil {
			deps.Logger.Warn("the segment store is not bounded", zap.Error(err))
		}
	}
	return &Service{opts: opts, deps: deps, segments: c}
}

// Configure hands the segment cache, the image builder, the inline limit
// and the URL signer to the partition actors of pc.
func (s *Service) Configure(pc *partition.Config) {
	pc.Segments = s.segments
	pc.Images = s.opts.Images
	if s.opts.InlineMaxBytes != 0 {
		pc.InlineSegmentMaxBytes = s.opts.InlineMaxBytes
	}
	if sg, pub := s.deps.SignedURLs, s.deps.PublicURL; sg != nil && pub != nil {
		pc.SignURL = func(part string, m segstore.Meta) (string, int64) {
			tok, exp := sg.Sign(part, m.ID, m.ScopeDigest)
			return strings.TrimRight(pub(), "/") + "/segments/" + m.ID + "?st=" + tok, exp
		}
	}
}

// Start runs the expiry sweeper until Close.
func (s *Service) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopSweep, s.sweepDone = cancel, make(chan struct{})
	go func() {
		defer close(s.sweepDone)
		s.segments.RunSweeper(ctx, 0)
	}()
}

// Close stops the sweeper (waiting for it) and closes the segment store;
// a failure to close it is logged. Call it once, after the partition
// actors stopped.
func (s *Service) Close() {
	if s.stopSweep != nil {
		s.stopSweep()
		<-s.sweepDone
	}
	if err := s.segments.Close(); err != nil {
		s.deps.Logger.Warn("closing the segment store failed", zap.Error(err))
	}
}
