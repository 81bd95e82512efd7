package peer

import (
	"encoding/json"
	"fmt"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/transport/realtime"
)

// The follow link (wire version 1) is a WebSocket a member dials at a
// partition's owner: GET FollowPath, signed with the cluster secret
// (Secret.Sign; an unsigned or mis-signed upgrade is answered 401). It
// carries JSON text frames, one object per frame, each with an "op" field
// naming what it is. Both sides send OpHello first and read the other's
// before anything else; a member that does not speak the version closes
// the link (1008). Ops a side does not know are ignored, so a later
// version may add ops (and fields) that an older member skips; a change
// an older member must not skip gets a new version (and path).
//
// The dialing member (the follower) sends OpFollow and OpUnfollow for the
// partitions it holds sockets of and whose owner the dialed member is (in
// the follower's view), and OpPresence for its sockets' presence on them.
// The owner answers each OpFollow with OpFollowed (or OpRefused), then the
// presence it knows of the partition (OpPresence, one per entry), then
// the partition's newest commit seq (OpCommit, read from storage after
// the follow was registered, so that no commit is missed); from then on
// it relays, in order, its commits (OpKeys, OpOutcome, OpCommit), its
// clients' registrations (OpRegistration) and every presence change of
// the partition that is not the follower's own (OpPresence).
const (
	// WireVersion is the follow link's version, in OpHello and the path.
	WireVersion = 1
	// FollowPath is where a member serves the follow link.
	FollowPath = "/_cluster/v1/follow"
)

// Ops of the follow link.
const (
	// OpHello opens the link, both ways: {"op":"hello","v":1,"member":ID}
	// (member: the sender's member ID, which must be the signed one).
	OpHello = "hello"
	// OpFollow (follower → owner) starts following partition p:
	// {"op":"follow","p":P,"id":N}. id, chosen by the follower, is echoed
	// by the answer (a follower ignores the answer of a follow it has
	// replaced since).
	OpFollow = "follow"
	// OpUnfollow (follower → owner) stops following p: {"op":"unfollow","p":P}.
	// The owner drops the follower's presence entries of p (a leave to
	// everyone else for each).
	OpUnfollow = "unfollow"
	// OpFollowed (owner → follower) answers a follow: {"op":"followed","p":P,"id":N}.
	// The follower drops every remote presence entry it held for p and
	// settles its undecided commits (OpOutcome false): the presence that
	// follows, and the OpCommit after it, start it over.
	OpFollowed = "followed"
	// OpRefused (owner → follower) refuses a follow (the link follows its
	// maximum of partitions): {"op":"refused","p":P,"id":N,"reason":…}.
	OpRefused = "refused"
	// OpPresence carries one presence change of partition p:
	// {"op":"presence","p":P,"origin":M,"e":{key,kind,actor,client,socket,doc}}.
	// From a follower, origin is absent (it is the link's member) and the
	// event is one of its own sockets'; from the owner, origin is the
	// member the socket is on. socket is unique in the cluster
	// (member-prefixed); kind is join, update or leave (doc absent).
	OpPresence = "presence"
	// OpCommit (owner → follower): p's commits up to seq are durable
	// (engine.Config.OnCommit): {"op":"commit","p":P,"seq":N}.
	OpCommit = "commit"
	// OpKeys (owner → follower): the scope keys of commits of p about to
	// become durable (engine.Config.OnCommitKeys):
	// {"op":"keys","p":P,"commits":[{"seq":N,"keys":[…],"any":bool}]}.
	OpKeys = "keys"
	// OpOutcome (owner → follower) settles the last OpKeys
	// (engine.Config.OnCommitOutcome): {"op":"outcome","p":P,"durable":bool}.
	OpOutcome = "outcome"
	// OpRegistration (owner → follower): a client's served round
	// (engine.Config.OnRegistration): {"op":"reg","p":P,"reg":{…}}.
	OpRegistration = "reg"
)

// message is one frame of the follow link: the op and the fields its op
// uses (the others are left out).
type message struct {
	Op      string            `json:"op"`
	V       int               `json:"v,omitempty"`
	Member  string            `json:"member,omitempty"`
	P       string            `json:"p,omitempty"`
	ID      uint64            `json:"id,omitempty"`
	Reason  string            `json:"reason,omitempty"`
	Origin  string            `json:"origin,omitempty"`
	Event   *wirePresence     `json:"e,omitempty"`
	Seq     *int64            `json:"seq,omitempty"`
	Commits []wireKeys        `json:"commits,omitempty"`
	Durable *bool             `json:"durable,omitempty"`
	Reg     *wireRegistration `json:"reg,omitempty"`
}

// wirePresence is a realtime.PresenceEvent on the wire.
type wirePresence struct {
	Key      string          `json:"key"`
	Kind     string          `json:"kind"`
	ActorID  string          `json:"actor"`
	ClientID string          `json:"client"`
	Socket   string          `json:"socket"`
	Doc      json.RawMessage `json:"doc,omitempty"`
}

func toWirePresence(ev realtime.PresenceEvent) *wirePresence {
	return &wirePresence{Key: ev.Key, Kind: ev.Kind, ActorID: ev.ActorID, ClientID: ev.ClientID, Socket: ev.Socket, Doc: ev.Doc}
}

func (w *wirePresence) event() realtime.PresenceEvent {
	return realtime.PresenceEvent{Key: w.Key, Kind: w.Kind, ActorID: w.ActorID, ClientID: w.ClientID, Socket: w.Socket, Doc: w.Doc}
}

// wireKeys is an engine.CommitKeys on the wire.
type wireKeys struct {
	Seq  int64    `json:"seq"`
	Keys []string `json:"keys,omitempty"`
	Any  bool     `json:"any,omitempty"`
}

// wireRegistration is an engine.Registration on the wire.
type wireRegistration struct {
	ClientID      string    `json:"client"`
	ActorID       string    `json:"actor"`
	WireVersion   uint16    `json:"wire"`
	LogEpoch      string    `json:"epoch,omitempty"`
	Pulled        bool      `json:"pulled,omitempty"`
	Subscriptions []wireSub `json:"subs,omitempty"`
}

type wireSub struct {
	ID        string              `json:"id"`
	Table     string              `json:"table"`
	Effective map[string][]string `json:"eff,omitempty"`
	Cursor    int64               `json:"cursor"`
	Active    bool                `json:"active,omitempty"`
	Ready     bool                `json:"ready,omitempty"`
}

func toWireKeys(commits []engine.CommitKeys) []wireKeys {
	out := make([]wireKeys, len(commits))
	for i, c := range commits {
		out[i] = wireKeys{Seq: c.Seq, Keys: c.Keys, Any: c.Any}
	}
	return out
}

func fromWireKeys(commits []wireKeys) []engine.CommitKeys {
	out := make([]engine.CommitKeys, len(commits))
	for i, c := range commits {
		out[i] = engine.CommitKeys{Seq: c.Seq, Keys: c.Keys, Any: c.Any}
	}
	return out
}

func toWireRegistration(r engine.Registration) *wireRegistration {
	w := &wireRegistration{ClientID: r.ClientID, ActorID: r.ActorID, WireVersion: r.WireVersion, LogEpoch: r.LogEpoch, Pulled: r.Pulled}
	if len(r.Subscriptions) > 0 {
		w.Subscriptions = make([]wireSub, len(r.Subscriptions))
		for i, s := range r.Subscriptions {
			w.Subscriptions[i] = wireSub{ID: s.ID, Table: s.Table, Effective: s.Effective, Cursor: s.Cursor, Active: s.Active, Ready: s.Ready}
		}
	}
	return w
}

func (w *wireRegistration) registration() engine.Registration {
	r := engine.Registration{ClientID: w.ClientID, ActorID: w.ActorID, WireVersion: w.WireVersion, LogEpoch: w.LogEpoch, Pulled: w.Pulled}
	if len(w.Subscriptions) > 0 {
		r.Subscriptions = make([]engine.RegisteredSubscription, len(w.Subscriptions))
		for i, s := range w.Subscriptions {
			r.Subscriptions[i] = engine.RegisteredSubscription{ID: s.ID, Table: s.Table, Effective: s.Effective, Cursor: s.Cursor, Active: s.Active, Ready: s.Ready}
		}
	}
	return r
}

// check reports a message its op cannot be handled without (a missing
// partition, event, seq, …); nil for an op this version does not know
// (ignored).
func (m *message) check() error {
	need := func(ok bool, what string) error {
		if !ok {
			return fmt.Errorf("peer: %s message without %s", m.Op, what)
		}
		return nil
	}
	switch m.Op {
	case OpHello:
		return need(m.V > 0 && m.Member != "", "v and member")
	case OpFollow, OpFollowed, OpRefused:
		return need(m.P != "" && m.ID != 0, "p and id")
	case OpUnfollow:
		return need(m.P != "", "p")
	case OpPresence:
		return need(m.P != "" && m.Event != nil && m.Event.Key != "" && m.Event.Socket != "" && m.Event.Kind != "", "p and an event")
	case OpCommit:
		return need(m.P != "" && m.Seq != nil, "p and seq")
	case OpKeys:
		return need(m.P != "" && len(m.Commits) > 0, "p and commits")
	case OpOutcome:
		return need(m.P != "" && m.Durable != nil, "p and durable")
	case OpRegistration:
		return need(m.P != "" && m.Reg != nil && m.Reg.ClientID != "", "p and a registration")
	}
	return nil
}
