// Package blobs serves blobs (SPEC §5.9): uploads streamed to the
// configured byte store and recorded in the storage Blobs role, upload
// grants, downloads authorized against the rows that reference a blob,
// presigned URLs and their run-time switch, the orphan sweep the
// maintenance pass runs, and the blob counters. The engine builds one
// Service (blobs off without Options.Store: every call but the counters
// answers blob.not_found); transports reach it through Engine.Blobs.
package blobs

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine/access"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/storage/segstore"
)

// DefaultMaxBytes is the default cap of one blob (256 MiB): large
// enough for photos, documents and short videos, small enough that one
// abandoned upload cannot fill a disk before the orphan sweep.
const DefaultMaxBytes int64 = 256 << 20

// DefaultOrphanAge is how long a blob stays unreferenced before the
// orphan sweep removes it (SPEC §5.9: 24 h).
const DefaultOrphanAge = 24 * time.Hour

// DefaultCheckPerPass is how many present blobs a sweep checks by
// default (Options.CheckPerPass): one Stat each, so a store of a million
// blobs is walked in 2,000 passes.
const DefaultCheckPerPass = 500

// sweepBatch is how many orphans one sweep step marks; a pass runs at
// most sweepBatches steps.
const (
	sweepBatch   = 500
	sweepBatches = 20
)

// maxRefsChecked bounds the referencing rows a download authorizes
// against; past it a download is refused (blob.forbidden) unless one of
// the first rows passes.
const maxRefsChecked = 1000

// Options configure blobs (engine.Config.Blobs).
type Options struct {
	// Store holds the bytes (blobstore.FS, pgblob.Store, s3blob.Store).
	// Nil disables the blob routes (pushes still check blob_ref
	// references: none can be present).
	Store blobstore.Store
	// MaxBytes caps one blob (default DefaultMaxBytes): larger
	// uploads and grants are refused with blob.too_large (413) before
	// anything is stored.
	MaxBytes int64
	// OrphanAge is how long a blob stays unreferenced before the
	// maintenance pass removes it (default DefaultOrphanAge).
	OrphanAge time.Duration
	// CheckPerPass is how many present blobs each sweep checks the byte
	// store still holds (Stat), walking all of them over successive
	// passes; one found missing is marked missing (see Service.Sweep).
	// 0: DefaultCheckPerPass; negative: no check by the sweep (downloads
	// and uploads still detect missing bytes).
	CheckPerPass int
	// Presign is where the presigned-URL switch of blob transfers starts
	// (see Presign; the zero value keeps upload grants always presigned
	// and downloads presigned iff engine.Config.SignedURLs is set).
	// Service.SetPresign moves it at run time.
	Presign Presign
}

// Deps are what the engine gives the service.
type Deps struct {
	// Schema is the served schema (the tables of referencing rows).
	Schema *schema.Schema
	// Resolver resolves the caller's scopes on every download (the
	// engine's panic-safe resolver).
	Resolver access.ScopeResolver
	// SignedURLs signs grants and download URLs (engine.Config.SignedURLs;
	// nil: a per-process key signs grants, downloads stream unless
	// presigning is switched on). PublicURL is engine.Config.PublicURL.
	SignedURLs *segstore.Signer
	PublicURL  func() string
	// Now is the clock and Logger the log (both required).
	Now    func() time.Time
	Logger *zap.Logger
	// Events receives a BlobMissing event per blob found missing (nil:
	// none).
	Events *events.Ring
}

// Stats are the blob counters of this process.
type Stats struct {
	Uploads        uint64 `json:"uploads"`
	UploadsRefused uint64 `json:"uploadsRefused"`
	BytesIn        uint64 `json:"bytesIn"`
	BytesOut       uint64 `json:"bytesOut"`
	Downloads      uint64 `json:"downloads"`
	Swept          uint64 `json:"swept"`
	SweepPasses    uint64 `json:"sweepPasses"`
	// PushesRefused counts pushed commits rejected with blob.not_found (a
	// row referenced a blob that is not uploaded). Like
	// engine.MetricsSnapshot.CommitsRejected it counts PUSH_RESULTs, so a
	// replayed rejection counts again.
	PushesRefused uint64 `json:"pushesRefused"`
	// Missing counts blobs found present in the metadata with their bytes
	// missing from the byte store (on a download, an upload or by the
	// sweep) and marked missing; PresenceChecks counts the sweep's checks.
	Missing        uint64 `json:"missing"`
	PresenceChecks uint64 `json:"presenceChecks"`
}

// Presign is the presigned-URL switch of blob transfers (SPEC §5.9.3,
// §5.9.5): whether an upload grant mints a presigned PUT URL, and whether
// an authorized download answers a presigned GET URL instead of the
// bytes. URLs already issued stay valid until they expire whatever the
// switch says.
type Presign int32

const (
	// PresignConfigured (the zero value) follows the configuration:
	// upload grants always mint a URL (signed with
	// engine.Config.SignedURLs, or with a per-process key), downloads
	// answer a URL iff engine.Config.SignedURLs is set.
	PresignConfigured Presign = iota
	// PresignOn: grants mint a URL and downloads answer one (signed
	// with engine.Config.SignedURLs, or with the per-process key: 15
	// minutes).
	PresignOn
	// PresignOff: no presigned URL. A grant answers neither a URL nor
	// the present marker (SPEC §5.9.3 "no grant": the client uploads
	// through PUT /blobs/{id}); downloads stream the bytes.
	PresignOff
)

// Service serves blobs. It is safe for concurrent use.
type Service struct {
	index storage.BlobIndex
	opts  Options
	deps  Deps

	uploads, uploadsRefused, bytesIn, bytesOut, downloads, swept, sweeps atomic.Uint64
	pushesRefused, missing, checks                                       atomic.Uint64

	// checkMu guards checkAfter, the id the sweep's presence check
	// resumes after ("" from the first).
	checkMu    sync.Mutex
	checkAfter string

	// grantSigner signs upload grants when Deps.SignedURLs is unset
	// (random per-process key, made on first use).
	grantOnce   sync.Once
	grantSigner *segstore.Signer

	// presign is the current Presign (Options.Presign at start, then
	// SetPresign), read by every grant and download.
	presign atomic.Int32
}

// New builds the service over the storage Blobs role index (needed only
// with opts.Store; engine.New checks it). An opts.Presign that is not a
// Presign value is an error.
func New(index storage.BlobIndex, opts Options, deps Deps) (*Service, error) {
	if opts.Presign < PresignConfigured || opts.Presign > PresignOff {
		return nil, fmt.Errorf("engine: Blobs.Presign %d is not a Presign value", opts.Presign)
	}
	s := &Service{index: index, opts: opts, deps: deps}
	s.presign.Store(int32(opts.Presign))
	return s, nil
}

// SetPresign turns presigned blob URLs on (PresignOn) or off
// (PresignOff) for every grant and download from now on. It is safe
// for concurrent use.
func (s *Service) SetPresign(enabled bool) {
	m := PresignOff
	if enabled {
		m = PresignOn
	}
	s.presign.Store(int32(m))
}

// PresignMode returns the current presigned-URL switch.
func (s *Service) PresignMode() Presign { return Presign(s.presign.Load()) }

// downloadSigner returns the signer of download URLs under the current
// switch, or nil when downloads stream the bytes.
func (s *Service) downloadSigner() *segstore.Signer {
	switch s.PresignMode() {
	case PresignOn:
		return s.blobSigner()
	case PresignOff:
		return nil
	default:
		return s.deps.SignedURLs
	}
}

// Stats returns this process's blob counters.
func (s *Service) Stats() Stats {
	return Stats{Uploads: s.uploads.Load(), UploadsRefused: s.uploadsRefused.Load(), BytesIn: s.bytesIn.Load(),
		BytesOut: s.bytesOut.Load(), Downloads: s.downloads.Load(), Swept: s.swept.Load(), SweepPasses: s.sweeps.Load(),
		PushesRefused: s.pushesRefused.Load(), Missing: s.missing.Load(), PresenceChecks: s.checks.Load()}
}

// ObserveReply counts r's commits rejected with blob.not_found
// (Stats.PushesRefused); the engine calls it for every served request.
func (s *Service) ObserveReply(r *partition.Reply) {
	if r == nil || r.Rejected == 0 {
		return
	}
	s.pushesRefused.Add(uint64(countRejectedWith(r, syncerr.BlobNotFound)))
}

// countRejectedWith counts r's rejected PUSH_RESULTs whose rejection code
// is code.
func countRejectedWith(r *partition.Reply, code syncerr.Code) int {
	n := 0
	for _, f := range r.Frames {
		pr, ok := f.(*ssp2.PushResult)
		if !ok || pr.Status != ssp2.CommitRejected {
			continue
		}
		for _, res := range pr.Results {
			if res.Code == string(code) {
				n++
				break
			}
		}
	}
	return n
}

// Enabled reports whether a blob store is configured.
func (s *Service) Enabled() bool { return s.opts.Store != nil }

// MaxBytes returns the blob size cap.
func (s *Service) MaxBytes() int64 {
	if n := s.opts.MaxBytes; n > 0 {
		return n
	}
	return DefaultMaxBytes
}
