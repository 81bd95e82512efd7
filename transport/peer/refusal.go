package peer

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/httperr"
)

// Why a member refused a call's signature: details.reason of its 401.
const (
	// RefusedSignature: not signed with the callee's cluster secret (or not
	// signed at all).
	RefusedSignature = "signature"
	// RefusedClockSkew: signed more than MaxClockSkew from the callee's
	// clock.
	RefusedClockSkew = "clock_skew"
)

// ErrRefused is wrapped by the error of a member call the callee refused
// (HTTP 401 or 403): the two members do not share the cluster secret, or
// their clocks are too far apart (then ErrClockSkew is wrapped too). The
// error of a routed call (Sync and the others) also wraps
// engine.ErrPeerUnreachable: the refusal is between members, never the
// client's, so the request is retried and, past the move timeout,
// answered 503 as for a moving partition.
var ErrRefused = errors.New("peer: the member refused this member's signature")

// writeRefusal answers 401 sync.auth_required for a call Verify refused
// (err), with details.reason RefusedClockSkew or RefusedSignature.
func writeRefusal(w http.ResponseWriter, err error) {
	reason := RefusedSignature
	if errors.Is(err, ErrClockSkew) {
		reason = RefusedClockSkew
	}
	httperr.WriteStatus(w, http.StatusUnauthorized, syncerr.New(syncerr.AuthRequired, "member routes need the cluster secret").
		WithDetails(map[string]string{"reason": reason}))
}

// refusalError is the error of a call member to refused with status and
// body b (its JSON error, whose details.reason says why).
func refusalError(to string, status int, b []byte) error {
	var eb errorBody
	var d struct {
		Reason string `json:"reason"`
	}
	if json.Unmarshal(b, &eb) == nil && len(eb.Details) > 0 {
		_ = json.Unmarshal(eb.Details, &d)
	}
	if d.Reason == RefusedClockSkew {
		return fmt.Errorf("%w: %s answered HTTP %d: %w (more than %v apart)", ErrRefused, to, status, ErrClockSkew, MaxClockSkew)
	}
	return fmt.Errorf("%w: %s answered HTTP %d: the cluster secret differs from its", ErrRefused, to, status)
}

// refusalLogEvery is how often a refusal by one member is logged at most.
const refusalLogEvery = time.Minute

// refusalLog rate-limits the error logged when a member refuses this
// member's calls: one line per member per refusalLogEvery, counting the
// refusals in between.
type refusalLog struct {
	log *zap.Logger

	mu      sync.Mutex
	members map[string]*refusals
}

type refusals struct {
	logged     time.Time
	suppressed int
}

// note records a refusal of member to (err: refusalError's) and logs it
// when none was logged for to within refusalLogEvery.
func (l *refusalLog) note(to string, err error) {
	now := time.Now()
	l.mu.Lock()
	if l.members == nil {
		l.members = map[string]*refusals{}
	}
	r := l.members[to]
	if r == nil {
		r = &refusals{}
		l.members[to] = r
	}
	if !r.logged.IsZero() && now.Sub(r.logged) < refusalLogEvery {
		r.suppressed++
		l.mu.Unlock()
		return
	}
	suppressed := r.suppressed
	r.logged, r.suppressed = now, 0
	l.mu.Unlock()
	l.log.Error("a member refused this member's call: the cluster secrets (or the clocks) differ; requests for its partitions are answered 503 until this is fixed",
		zap.String("peer", to), zap.Int("refusals_not_logged", suppressed), zap.Duration("logged_at_most_every", refusalLogEvery), zap.Error(err))
}

// routedRefusal is the error a routed call returns for a refusal: it
// wraps engine.ErrPeerUnreachable (retried, then 503) and ErrRefused.
func routedRefusal(err error) error {
	return fmt.Errorf("%w: %w", engine.ErrPeerUnreachable, err)
}
