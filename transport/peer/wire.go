package peer

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
)

// The member routes (version 1). Every one is POST with a signed request
// (auth.go) and answers:
//   - 200 with the call's answer (sync: the SSP2 response, streamed;
//     the others: JSON);
//   - 421 Misdirected Request when the callee does not own the partition
//     by its own view (the caller re-routes; engine.ErrNotOwner);
//   - 401 when the call is not signed with the cluster secret
//     (sync.auth_required, details.reason "signature" or "clock_skew"),
//     which the caller never hands to its client: it is an unreachable
//     owner there (ErrRefused, engine.ErrPeerUnreachable);
//   - otherwise the protocol's JSON error body (transport/httperr) with
//     its status, which the caller hands to its client unchanged.
//
// Every refusal, of these routes and of the follow link (FollowPath), is
// the protocol's JSON error body.
const (
	// Prefix is the path prefix of every member route; a transport mounts
	// the Handler there.
	Prefix          = "/_cluster/"
	pathSync        = "/_cluster/v1/sync"
	pathClientState = "/_cluster/v1/client-state"
	pathDeltas      = "/_cluster/v1/deltas"
	pathAck         = "/_cluster/v1/ack"
	pathOperation   = "/_cluster/v1/operation"
	pathMember      = "/_cluster/v1/member"
	pathEvents      = "/_cluster/v1/events"
	pathRelease     = "/_cluster/v1/release"
	// pathProbe (liveness.go) is answered {} at once.
)

// IdentityHeader carries the authenticated identity of a forwarded sync
// request or remote operation: base64url (no padding) of its JSON (wireIdentity). The member
// the client reached authenticated it; the owner trusts it because the
// call is signed.
const IdentityHeader = "Synclane-Identity"

// wireIdentity is engine.Identity on the wire.
type wireIdentity struct {
	ActorID   string              `json:"actorId"`
	Partition string              `json:"partition"`
	Grants    map[string][]string `json:"grants,omitempty"`
}

func encodeIdentity(id engine.Identity) (string, error) {
	b, err := json.Marshal(wireIdentity{ActorID: id.ActorID, Partition: id.Partition, Grants: id.Grants})
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func decodeIdentity(s string) (engine.Identity, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return engine.Identity{}, fmt.Errorf("peer: identity header: %w", err)
	}
	var w wireIdentity
	if err := json.Unmarshal(b, &w); err != nil {
		return engine.Identity{}, fmt.Errorf("peer: identity header: %w", err)
	}
	return engine.Identity{ActorID: w.ActorID, Partition: w.Partition, Grants: w.Grants}, nil
}

// clientStateCall is the body of a client-state call.
type clientStateCall struct {
	Identity wireIdentity `json:"identity"`
	ClientID string       `json:"clientId"`
}

// deltasCall is the body of a deltas call.
type deltasCall struct {
	Partition string              `json:"partition"`
	Request   engine.DeltaRequest `json:"request"`
}

// deltasAnswer is engine.DeltaResult on the wire: each group's frames
// travel as one SSP2 response (a RESP_HEADER with the placeholder epoch
// "-", the frames, END), which the
// caller decodes back to the frames.
type deltasAnswer struct {
	LogEpoch string        `json:"logEpoch"`
	UpTo     int64         `json:"upTo"`
	Groups   []deltasGroup `json:"groups"`
}

type deltasGroup struct {
	Frames     []byte `json:"frames,omitempty"`
	Commits    int    `json:"commits"`
	Incomplete bool   `json:"incomplete,omitempty"`
	TooLarge   bool   `json:"tooLarge,omitempty"`
}

func encodeDeltas(r *engine.DeltaResult) (*deltasAnswer, error) {
	out := &deltasAnswer{LogEpoch: r.LogEpoch, UpTo: r.UpTo, Groups: make([]deltasGroup, len(r.Groups))}
	for i, g := range r.Groups {
		out.Groups[i] = deltasGroup{Commits: g.Commits, Incomplete: g.Incomplete, TooLarge: g.TooLarge}
		if len(g.Frames) == 0 {
			continue
		}
		b, err := ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindResponse,
			Frames: append([]ssp2.Frame{&ssp2.RespHeader{LogEpoch: "-"}}, g.Frames...)})
		if err != nil {
			return nil, fmt.Errorf("peer: encoding delta frames: %w", err)
		}
		out.Groups[i].Frames = b
	}
	return out, nil
}

func decodeDeltas(a *deltasAnswer) (*engine.DeltaResult, error) {
	out := &engine.DeltaResult{LogEpoch: a.LogEpoch, UpTo: a.UpTo, Groups: make([]engine.DeltaSections, len(a.Groups))}
	for i, g := range a.Groups {
		out.Groups[i] = engine.DeltaSections{Commits: g.Commits, Incomplete: g.Incomplete, TooLarge: g.TooLarge}
		if len(g.Frames) == 0 {
			continue
		}
		m, err := ssp2.DecodeResponse(g.Frames)
		if err != nil {
			return nil, fmt.Errorf("peer: decoding delta frames: %w", err)
		}
		if len(m.Frames) == 0 {
			return nil, errors.New("peer: delta frames without a header")
		}
		out.Groups[i].Frames = m.Frames[1:]
	}
	return out, nil
}

// releaseCall is the body of a release call.
type releaseCall struct {
	Partition string `json:"partition"`
}

// ackCall is the body of an ack call.
type ackCall struct {
	Partition string       `json:"partition"`
	Acks      []engine.Ack `json:"acks"`
}

// errorBody is the protocol's JSON error body as a member answers it.
type errorBody struct {
	Code    string          `json:"code"`
	Message string          `json:"message"`
	Details json.RawMessage `json:"details,omitempty"`
}

// toError rebuilds the callee's protocol error; a 503 keeps meaning
// unavailable (syncerr.ErrUnavailable) on this side too.
func (b errorBody) toError(status int) error {
	e := &syncerr.Error{Code: syncerr.Code(b.Code), Message: b.Message, Details: b.Details}
	if e.Code == "" {
		e.Code = syncerr.InternalError
	}
	if status == 503 {
		e.Err = syncerr.ErrUnavailable
	}
	return e
}
