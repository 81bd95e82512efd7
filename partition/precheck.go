package partition

import (
	"context"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// header builds the RESP_HEADER of a served (not reset) reply.
func (p *Partition) header(wire uint16) *ssp2.RespHeader {
	latest := p.cfg.Schema.Version
	h := &ssp2.RespHeader{LatestSchemaVersion: &latest}
	if wire >= ssp2.WireV2 {
		h.LogEpoch = p.token.LogEpoch
	}
	return h
}

// precheck runs the request-level checks in the reference order (after
// decode): wire/epoch requirement, epoch-less push, schema floor, epoch
// reset, clientId, op cap, accept bits, subscriptions, auth lease (an
// outage round is authorized by the lease here), resolver keys. It
// returns either an error (request-level failure, nothing sent), a complete
// header-only reply with stop set, or the started reply to fill.
func (p *Partition) precheck(ctx context.Context, j *SyncJob, info storage.PartitionInfo) (rep *Reply, stop bool, err error) {
	req := j.req
	wire := req.WireVersion
	h := req.Header
	verdict := CheckEpoch(wire, h.LogEpoch, info.LogEpoch, info.EpochRequired)
	if verdict == EpochWireUnsupported {
		return nil, true, syncerr.New(syncerr.ClientWireUnsupported, "this partition's log epoch was rotated; wire version 1 is no longer served, upgrade to wire version 2")
	}
	if wire >= ssp2.WireV2 && h.LogEpoch == nil && len(req.Commits) > 0 {
		return nil, true, syncerr.New(syncerr.InvalidRequest, "a request without a logEpoch acquires the epoch and may not carry pushes")
	}
	s := p.cfg.Schema
	if NeedsFloor(h.SchemaVersion, p.cfg.MinSchemaVersion, s.Version) {
		v := s.Version
		rh := &ssp2.RespHeader{RequiredSchemaVersion: &v, LatestSchemaVersion: &v}
		if wire >= ssp2.WireV2 {
			// A v2 floor reply still carries the epoch verdict (SPEC §1.6).
			rh.LogEpoch, rh.ResetRequired = info.LogEpoch, verdict == EpochReset
		}
		return &Reply{WireVersion: wire, Frames: []ssp2.Frame{rh}, Reset: true}, true, nil
	}
	if verdict == EpochReset {
		latest := s.Version
		rh := &ssp2.RespHeader{LogEpoch: info.LogEpoch, ResetRequired: true, LatestSchemaVersion: &latest}
		return &Reply{WireVersion: wire, Frames: []ssp2.Frame{rh}, Reset: true}, true, nil
	}
	// The binding bind read (before any push transaction opened): a
	// check inside the transaction reads no storage outside it.
	if cerr := CheckClientID(h.ClientID, j.actorID, j.bound); cerr != nil {
		return nil, true, cerr
	}
	ops := 0
	for _, c := range req.Commits {
		ops += len(c.Operations)
	}
	if ops > p.cfg.MaxOperations {
		return nil, true, syncerr.New(syncerr.TooManyOperations, "request carries %d operations; the limit is %d", ops, p.cfg.MaxOperations)
	}
	if req.Pull != nil && req.Pull.Accept&(ssp2.AcceptInlineRows|ssp2.AcceptRefRows) == 0 {
		return nil, true, syncerr.New(syncerr.InvalidRequest, "PULL_HEADER.accept must include inline rows (bit 0) or ref rows (bit 1)")
	}
	seen := make(map[string]bool, len(req.Subscriptions))
	for _, sub := range req.Subscriptions {
		if seen[sub.ID] {
			return nil, true, syncerr.New(syncerr.InvalidSubscription, "duplicate subscription id %q", sub.ID)
		}
		seen[sub.ID] = true
		t := s.Table(sub.Table)
		if t == nil {
			return nil, true, syncerr.New(syncerr.UnknownTable, "subscription %q names unknown table %q", sub.ID, sub.Table)
		}
		if verr := ValidateRequested(t, sub.Scopes); verr != nil {
			return nil, true, verr
		}
	}
	if lerr := p.leaseAuthorize(ctx, j); lerr != nil {
		return nil, true, lerr
	}
	if j.resolved {
		if verr := ValidateAllowed(s, j.allowed); verr != nil {
			return nil, true, verr
		}
	}
	return &Reply{WireVersion: wire, Frames: []ssp2.Frame{p.header(wire)}}, false, nil
}
