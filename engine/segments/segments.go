package segments

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine/access"
	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/segstore"
)

// Segment is a segment a caller may download. Its bytes are in Data or,
// when the segment store keeps them in a file (the embedded store), in
// File; the caller must Close the Segment either way.
type Segment struct {
	Meta segstore.Meta
	// Data is the uncompressed segment (SSG2 rows or a SQLite image), or
	// nil when File holds it. It must not be modified (it may be shared).
	Data []byte
	// File, when not nil, holds the uncompressed segment: Meta.ByteLength
	// bytes, already checked against Meta.ID, read from its start.
	File *os.File
}

// Close releases the segment's file, if it has one.
func (s *Segment) Close() error {
	if s == nil || s.File == nil {
		return nil
	}
	f := s.File
	s.File = nil
	return f.Close()
}

// Bytes returns the segment's bytes, reading (and closing) its file if it
// has one.
func (s *Segment) Bytes() ([]byte, error) {
	if s.File == nil {
		return s.Data, nil
	}
	data := make([]byte, s.Meta.ByteLength)
	_, err := io.ReadFull(s.File, data)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("engine: read segment %s: %w", s.Meta.ID, err)
	}
	s.Data = data
	return data, nil
}

// openSegment fetches segment segmentID of partition ("" for any) from
// the segment cache, with the protocol's errors; a returned file is the
// caller's to close.
func (s *Service) openSegment(ctx context.Context, part, segmentID string) ([]segstore.Meta, []byte, *os.File, error) {
	metas, data, f, err := s.segments.Open(ctx, part, segmentID)
	switch {
	case errors.Is(err, segstore.ErrNotFound):
		return nil, nil, nil, syncerr.New(syncerr.NotFound, "no segment %s", syncerr.Quote(segmentID))
	case errors.Is(err, segstore.ErrExpired):
		return nil, nil, nil, syncerr.New(syncerr.SegmentExpired, "segment %s has expired; pull again", syncerr.Quote(segmentID))
	case err != nil:
		return nil, nil, nil, syncerr.Wrap(syncerr.InternalError, err, "reading the segment failed")
	}
	return metas, data, f, nil
}

// Get authorizes and returns segment segmentID of the caller's
// partition (SPEC §5.5). requested is the caller's requested scope map (the
// X-Syncular-Scopes header). On every call the actor's scopes are resolved
// again and intersected with requested; the digest of the effective map must
// equal the segment's. Errors carry the protocol code:
// sync.forbidden (digest mismatch, revocation, resolver failure, a requested
// map the segment's table does not declare), sync.not_found (unknown
// segment), sync.segment_expired (its TTL passed; pull again).
func (s *Service) Get(ctx context.Context, id access.Identity, segmentID string, requested map[string][]string) (*Segment, error) {
	if id.Partition == "" || id.ActorID == "" {
		return nil, syncerr.New(syncerr.AuthRequired, "request has no authenticated actor or partition")
	}
	if verr := partition.ValidateIdentity(id.ActorID, id.Partition); verr != nil {
		return nil, verr
	}
	if verr := partition.ValidateScopeMap("X-Syncular-Scopes", requested, s.deps.Limits); verr != nil {
		return nil, syncerr.New(syncerr.InvalidRequest, "%s", verr.Message)
	}
	grants, rerr := s.deps.Resolver.ResolveScopes(ctx, id)
	if rerr != nil {
		s.deps.Logger.Warn("scope resolver failed", zap.String("actor", id.ActorID),
			zap.String("partition", id.Partition), zap.Error(rerr))
		return nil, syncerr.New(syncerr.Forbidden, "the caller's scopes could not be resolved")
	}
	// The digest of (requested ∩ allowed) depends only on the entry's
	// table: computed once per table, however many entries (pins, page
	// sizes, scopes) stored the same bytes.
	digests := map[string]string{} // table → digest; "" when refused
	digestOf := func(table string) string {
		d, ok := digests[table]
		if !ok {
			if t := s.deps.Schema.Table(table); t != nil && partition.ValidateRequested(t, requested) == nil {
				if eff, revoked := partition.Effective(requested, partition.Allowed(grants), true); !revoked {
					d = ssp2.ScopeDigest(eff)
				}
			}
			digests[table] = d
		}
		return d
	}
	return s.matchSegment(ctx, id.Partition, segmentID, func(m segstore.Meta) bool {
		d := digestOf(m.Table)
		return d != "" && d == m.ScopeDigest
	}, syncerr.New(syncerr.Forbidden, "the caller's effective scopes do not match segment %s", syncerr.Quote(segmentID)))
}

// matchSegment returns segment segmentID of part (every partition for
// "") under its first entry that match accepts, or refusal. When no entry
// matches and the entries came from the hot set, which may predate the
// entry being looked for (the same bytes stored since under another scope
// digest), the store is read once more before refusing.
func (s *Service) matchSegment(ctx context.Context, part, segmentID string, match func(segstore.Meta) bool, refusal error) (*Segment, error) {
	for attempt := 0; ; attempt++ {
		metas, data, f, err := s.openSegment(ctx, part, segmentID)
		if err != nil {
			return nil, err
		}
		for _, m := range metas {
			if match(m) {
				s.segments.CountServed(int(m.ByteLength))
				return &Segment{Meta: m, Data: data, File: f}, nil
			}
		}
		_ = (&Segment{Data: data, File: f}).Close()
		if attempt > 0 || !s.segments.Forget(part, segmentID) {
			return nil, refusal
		}
	}
}

// Stats returns the segment cache's counters.
func (s *Service) Stats() segstore.Stats { return s.segments.Stats() }

// QuotaStats returns the segment store's usage (as of the last build or
// sweep) and its eviction counters (zero when unbounded).
func (s *Service) QuotaStats() segstore.QuotaStats { return s.segments.QuotaStats() }

// Sweep expires segments whose TTL has passed now (the sweeper does this
// periodically); it returns how many it expired.
func (s *Service) Sweep(ctx context.Context) (int, error) { return s.segments.Sweep(ctx) }

// GetSigned returns segment segmentID to the bearer of a signed URL
// token (SPEC §5.4): no host auth; the token's MAC, expiry (60 s skew) and
// segment id are checked, and a stored entry must match its scope digest
// and audience. A bad token is sync.forbidden; an unknown or expired
// segment is sync.not_found or sync.segment_expired.
func (s *Service) GetSigned(ctx context.Context, segmentID, token string) (*Segment, error) {
	if s.deps.SignedURLs == nil {
		return nil, syncerr.New(syncerr.Forbidden, "signed segment URLs are not enabled")
	}
	cl, err := s.deps.SignedURLs.Verify(token, segmentID)
	if err != nil {
		return nil, syncerr.Wrap(syncerr.Forbidden, err, "the signed segment URL is invalid or expired")
	}
	return s.matchSegment(ctx, "", segmentID, func(m segstore.Meta) bool {
		return m.ScopeDigest == cl.ScopeDigest && s.deps.SignedURLs.Audience(m.Partition) == cl.Audience
	}, syncerr.New(syncerr.Forbidden, "the signed segment URL does not match segment %s", syncerr.Quote(segmentID)))
}
