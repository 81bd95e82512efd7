package partition

import (
	"context"

	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
)

// LeaseKeeper is the auth lease hook (SPEC §7.3; package lease implements
// it). Both calls run on the partition's actor: Authorize in precheck,
// after the request-level checks that precede authorization (epoch,
// schema floor, clientId); Slide once the round is sure to be served,
// after the push transaction committed (its own write) and before any
// pull section is built.
type LeaseKeeper interface {
	// Slide keeps the client's lease valid with the grants just resolved
	// and returns the LEASE frame to send.
	Slide(ctx context.Context, partition, clientID, actorID string, grants map[string][]string) (*ssp2.Lease, error)
	// Authorize returns the grants of the client's valid lease during a
	// resolver outage, or a coded request-level error.
	Authorize(ctx context.Context, partition, clientID, actorID string) (map[string][]string, error)
}

// WithOutage marks the job's scope resolution as an outage (the host's
// resolver signalled one): the round is authorized by the client's lease,
// or fails with sync.auth_lease_required / sync.auth_lease_revoked. It
// returns j.
func (j *SyncJob) WithOutage() *SyncJob {
	j.outage, j.allowed, j.resolved = true, nil, false
	return j
}

// leaseAuthorize authorizes an outage round with the client's lease (the
// lease's grants become the round's): without a LeaseKeeper every outage
// round fails with sync.auth_lease_required. Other rounds pass. The answer
// is remembered in j: a push reads the lease before its transaction opens
// (prepare) and precheck, inside it, gets the same answer without a read.
func (p *Partition) leaseAuthorize(ctx context.Context, j *SyncJob) error {
	if !j.outage {
		return nil
	}
	if j.leaseChecked {
		return j.leaseErr
	}
	j.leaseChecked = true
	k := p.cfg.Leases
	if k == nil {
		j.leaseErr = syncerr.New(syncerr.AuthLeaseRequired, "the scope resolver is in an outage and this server issues no leases")
		return j.leaseErr
	}
	grants, err := k.Authorize(ctx, p.name, j.req.Header.ClientID, j.actorID)
	if err != nil {
		j.leaseErr = err
		return err
	}
	j.allowed, j.resolved = Allowed(grants), true
	return nil
}

// addLeases adds the LEASE frame to each reply of a committed push group
// (the slide is a write of its own, made after the push transaction: a
// store may serialize writers, and the transaction holds the lock).
func (p *Partition) addLeases(ctx context.Context, applied []started) {
	for _, a := range applied {
		p.addLease(ctx, a.job, a.rep)
	}
}

// addLease slides the client's lease after a successful resolution (not
// an outage round, which never refreshes it) and puts the LEASE frame
// directly after rep's RESP_HEADER, before any section is built. Nothing
// happens when leases are off or the resolver failed; a slide that fails
// is logged and the round is served without a LEASE frame.
func (p *Partition) addLease(ctx context.Context, j *SyncJob, rep *Reply) {
	k := p.cfg.Leases
	if k == nil || j.outage || !j.resolved {
		return
	}
	clientID := j.req.Header.ClientID
	f, err := k.Slide(ctx, p.name, clientID, j.actorID, j.allowed)
	if err != nil {
		p.log().Warn("lease slide failed; the round is served without a LEASE frame", zap.String("client_id", clientID), zap.Error(err))
		return
	}
	rep.Frames = append(rep.Frames[:1], append([]ssp2.Frame{f}, rep.Frames[1:]...)...)
}
