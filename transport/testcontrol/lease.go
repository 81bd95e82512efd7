package testcontrol

import (
	"errors"
	"net/http"

	"github.com/synclane/synclane/engine/lease"
	"github.com/synclane/synclane/protocol/syncerr"
)

// revokeLease revokes the auth lease {leaseId} of the request's partition
// (lease.Service.RevokeID): → {} (also for a lease already revoked); 404
// sync.not_found when no client holds that lease; 409 when the server runs
// without --lease-ttl. The body is ignored.
func (c Controls) revokeLease(w http.ResponseWriter, r *http.Request) {
	err := c.Engine.Leases().RevokeID(r.Context(), partitionOf(r), r.PathValue("leaseId"))
	switch {
	case err == nil:
		writeJSON(w, struct{}{})
	case errors.Is(err, lease.ErrLeasesOff):
		writeError(w, http.StatusConflict, syncerr.New(syncerr.InvalidRequest, "auth leases are off; start the server with --lease-ttl"))
	case errors.Is(err, lease.ErrNoLease):
		writeError(w, http.StatusNotFound, syncerr.New(syncerr.NotFound, "no client of this partition holds lease %s", syncerr.Quote(r.PathValue("leaseId"))))
	default:
		writeError(w, 0, syncerr.Wrap(syncerr.InternalError, err, "revoke the lease: %v", err))
	}
}
