package segments

import (
	"bytes"
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
	// Form, when not nil, is the segment's stored form in the encoding
	// the caller asked for (FormWanted): the download sends it, and Data
	// and File are both nil (the segment's own bytes were not read).
	Form *segstore.Form
}

// FormWanted asks GetForm or GetSignedForm for a segment's stored form in
// Encoding ("zstd" or "gzip"; "" for none) when the segment has at least
// MinBytes: a download whose client accepts that encoding.
type FormWanted struct {
	Encoding string
	MinBytes int64
}

// Close releases the segment's file and its form's, if it has them.
func (s *Segment) Close() error {
	if s == nil {
		return nil
	}
	var err error
	if s.Form != nil {
		err = s.Form.Close()
		s.Form = nil
	}
	if s.File == nil {
		return err
	}
	f := s.File
	s.File = nil
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
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

// notFound is the answer for a segment id the caller may not know of:
// one never stored, and one published only in another partition or an
// older log epoch, alike (SPEC §5.5: no existence leak).
func notFound(segmentID string) error {
	return syncerr.New(syncerr.NotFound, "no segment %s", syncerr.Quote(segmentID))
}

// Get authorizes and returns segment segmentID of the caller's
// partition (SPEC §3.5, §5.5). requested is the caller's requested scope
// map (the X-Syncular-Scopes header). On every call the actor's scopes
// are resolved again and intersected with requested, and the partition's
// live log epoch is read: the segment is served under a live publication
// of the caller's partition in that epoch whose scope digest is the
// digest of the effective map. Errors carry the protocol code:
// sync.forbidden (revocation, resolver failure, a requested map the
// segment's table does not declare, no publication of the caller's
// partition and epoch with that digest), sync.not_found (unknown
// segment, or one published only in another partition or an older log
// epoch: the same answer), sync.segment_expired (the caller's partition
// and epoch published it but no such publication is live; pull again).
func (s *Service) Get(ctx context.Context, id access.Identity, segmentID string, requested map[string][]string) (*Segment, error) {
	return s.GetForm(ctx, id, segmentID, requested, FormWanted{})
}

// GetForm is Get for a download that accepts want.Encoding: every check
// Get makes is made, from the segment's publications, and when the store
// holds the segment's form in that encoding (and the segment has at least
// want.MinBytes) the Segment carries it in Form, the segment's own bytes
// neither read nor hashed. Otherwise it answers as Get.
func (s *Service) GetForm(ctx context.Context, id access.Identity, segmentID string, requested map[string][]string, want FormWanted) (*Segment, error) {
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
	// The digest of (requested ∩ allowed) depends only on the
	// publication's table: computed once per table, however many
	// publications (pins, page sizes, scopes) share the bytes.
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
	epochs := s.epochs()
	return s.serve(ctx, id.Partition, segmentID, want, func(ctx context.Context, m segstore.Meta) (bool, error) {
		ep, err := epochs(ctx, m.Partition)
		return m.Partition == id.Partition && ep != "" && m.LogEpoch == ep, err
	}, func(m segstore.Meta) bool {
		d := digestOf(m.Table)
		return d != "" && d == m.ScopeDigest
	}, syncerr.New(syncerr.Forbidden, "the caller's effective scopes do not match segment %s", syncerr.Quote(segmentID)))
}

// epochs returns a reader of partitions' live log epochs that reads each
// partition once ("" for a partition that does not exist).
func (s *Service) epochs() func(ctx context.Context, part string) (string, error) {
	seen := map[string]string{}
	return func(ctx context.Context, part string) (string, error) {
		if ep, ok := seen[part]; ok {
			return ep, nil
		}
		info, err := s.deps.Epochs.ReadPartition(ctx, part)
		if err != nil {
			return "", syncerr.Wrap(syncerr.InternalError, err, "reading the partition failed")
		}
		if !info.Exists {
			info.LogEpoch = ""
		}
		seen[part] = info.LogEpoch
		return info.LogEpoch, nil
	}
}

// serve returns segment segmentID of part (every partition for "") under
// a live publication that owns accepts (the caller's partition and live
// log epoch) and match accepts (its scope digest), or: sync.not_found
// when none is owned (unknown, another partition's, an older epoch's),
// sync.segment_expired when none owned is live, refusal when none owned
// and live matches. When the publications came from the hot set, which
// may predate the one being looked for (the same bytes published since
// under another scope digest, or in the epoch that followed a rotation),
// the kept list is dropped and the segment opened once more before
// refusing (whether this download or a concurrent one drops it: a list
// kept again since was read after the drop).
//
// With want.Encoding set, the publications are read first without the
// bytes (serveForm): a download they authorize whose form is stored is
// answered with it; any other outcome but a refusal from publications
// read from the store goes on as without it.
func (s *Service) serve(ctx context.Context, part, segmentID string, want FormWanted, owns func(context.Context, segstore.Meta) (bool, error),
	match func(segstore.Meta) bool, refusal error) (*Segment, error) {
	if want.Encoding != "" {
		if seg, done, err := s.serveForm(ctx, part, segmentID, want, owns, match, refusal); done {
			return seg, err
		}
	}
	for attempt := 0; ; attempt++ {
		o, err := s.segments.Open(ctx, part, segmentID)
		switch {
		case errors.Is(err, segstore.ErrNotFound):
			return nil, notFound(segmentID)
		case err != nil:
			return nil, syncerr.Wrap(syncerr.InternalError, err, "reading the segment failed")
		}
		seg, answer := s.pick(ctx, o.Pubs, owns, match, segmentID, refusal)
		if seg != nil {
			seg.Data, seg.File = o.Data, o.File
			s.segments.CountServed(int(seg.Meta.ByteLength))
			return seg, nil
		}
		_ = (&Segment{Data: o.Data, File: o.File}).Close()
		if syncerr.CodeOf(answer) == syncerr.InternalError || attempt > 0 || !o.Kept {
			return nil, answer
		}
		s.segments.Forget(part, segmentID)
	}
}

// serveForm answers a download with the segment's stored form in
// want.Encoding, authorized exactly as serve authorizes (owns, match, the
// same pick) but from the publications alone, so the segment's bytes are
// neither read nor checked (the form is checked by the store as it opens
// it). done is false when serve must go on with the bytes: the store
// lists no publications alone or keeps no forms, no form is stored, the
// segment is under want.MinBytes, a read failed, or the refusal came from
// a publication list kept in the hot set (serve drops it and reads
// again).
func (s *Service) serveForm(ctx context.Context, part, segmentID string, want FormWanted, owns func(context.Context, segstore.Meta) (bool, error),
	match func(segstore.Meta) bool, refusal error) (seg *Segment, done bool, err error) {
	o, err := s.segments.Publications(ctx, part, segmentID)
	switch {
	case errors.Is(err, segstore.ErrNotFound):
		return nil, true, notFound(segmentID)
	case err != nil:
		return nil, false, nil
	}
	seg, answer := s.pick(ctx, o.Pubs, owns, match, segmentID, refusal)
	if seg == nil {
		if syncerr.CodeOf(answer) != syncerr.InternalError && o.Kept {
			return nil, false, nil
		}
		return nil, true, answer
	}
	if seg.Meta.ByteLength < want.MinBytes {
		return nil, false, nil
	}
	f, err := s.segments.StoredForm(ctx, part, segmentID, want.Encoding)
	if err != nil {
		return nil, false, nil
	}
	seg.Form = &f
	s.segments.CountServed(int(seg.Meta.ByteLength))
	return seg, true, nil
}

// pick selects the publication of pubs a download is served under (see
// serve), or the answer refusing it.
func (s *Service) pick(ctx context.Context, pubs []segstore.Publication, owns func(context.Context, segstore.Meta) (bool, error),
	match func(segstore.Meta) bool, segmentID string, refusal error) (*Segment, error) {
	owned, live := false, false
	for _, p := range pubs {
		ok, err := owns(ctx, p.Meta)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		owned = true
		if !p.Live {
			continue
		}
		live = true
		if match(p.Meta) {
			return &Segment{Meta: p.Meta}, nil
		}
	}
	switch {
	case !owned:
		return nil, notFound(segmentID)
	case !live:
		return nil, syncerr.New(syncerr.SegmentExpired, "segment %s has expired; pull again", syncerr.Quote(segmentID))
	}
	return nil, refusal
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
// segment id are checked (sync.forbidden otherwise). It is served under a
// live publication of the partition the token's audience names, in that
// partition's live log epoch, whose scope digest is the token's: none of
// that partition and epoch is sync.not_found (as an unknown segment), none
// of them live sync.segment_expired, none with the token's digest
// sync.forbidden.
func (s *Service) GetSigned(ctx context.Context, segmentID, token string) (*Segment, error) {
	return s.GetSignedForm(ctx, segmentID, token, FormWanted{})
}

// GetSignedForm is GetSigned for a download that accepts want.Encoding,
// as GetForm is Get's: the same checks, and the stored form in Form,
// without reading the segment's bytes, when there is one.
func (s *Service) GetSignedForm(ctx context.Context, segmentID, token string, want FormWanted) (*Segment, error) {
	if s.deps.SignedURLs == nil {
		return nil, syncerr.New(syncerr.Forbidden, "signed segment URLs are not enabled")
	}
	cl, err := s.deps.SignedURLs.Verify(token, segmentID)
	if err != nil {
		return nil, syncerr.Wrap(syncerr.Forbidden, err, "the signed segment URL is invalid or expired")
	}
	audiences := map[string]bool{} // partition → its audience is the token's
	epochs := s.epochs()
	return s.serve(ctx, "", segmentID, want, func(ctx context.Context, m segstore.Meta) (bool, error) {
		aud, ok := audiences[m.Partition]
		if !ok {
			aud = s.deps.SignedURLs.Audience(m.Partition) == cl.Audience
			audiences[m.Partition] = aud
		}
		if !aud {
			return false, nil
		}
		ep, err := epochs(ctx, m.Partition)
		return ep != "" && m.LogEpoch == ep, err
	}, func(m segstore.Meta) bool {
		return m.ScopeDigest == cl.ScopeDigest
	}, syncerr.New(syncerr.Forbidden, "the signed segment URL does not match segment %s", syncerr.Quote(segmentID)))
}

// Form returns seg's form in encoding enc ("zstd" or "gzip"), built once
// per segment and encoding from its bytes and stored beside them (see
// segstore.Cache.Form): the download sends it as it is. The form is
// returned even when the store did not keep it; an error (the store keeps
// no forms, or could not be read) leaves seg as it was, for the caller to
// compress itself. The caller closes the form.
func (s *Service) Form(ctx context.Context, seg *Segment, enc string) (segstore.Form, error) {
	size := seg.Meta.ByteLength
	if seg.File == nil {
		size = int64(len(seg.Data))
	}
	return s.segments.Form(ctx, seg.Meta.Partition, seg.Meta.ID, enc, size, func() io.Reader {
		if seg.File != nil {
			// ReadAt leaves the file's offset at its start, for the
			// caller's fallback.
			return io.NewSectionReader(seg.File, 0, size)
		}
		return bytes.NewReader(seg.Data)
	})
}
