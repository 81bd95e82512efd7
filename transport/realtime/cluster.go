package realtime

import (
	"encoding/json"
	"sort"

	"github.com/synclane/synclane/protocol/ssp2"
)

// ClusterRelay carries a hub's realtime traffic across the members of a
// cluster (Options.Cluster; package transport/peer implements it). Sockets
// stay on the member they connected to; the member owning a partition
// relays its commits, registrations and presence to the members that hold
// sockets of it, and those members' presence to each other.
type ClusterRelay interface {
	// Follow tells the relay that the hub holds sockets of partition: its
	// state of the partition was created. Unfollow tells it that the
	// last of them left and that state was released (with every remote
	// presence entry the hub held for it: the next Follow starts empty).
	// For each partition, Follow and Unfollow alternate, starting with
	// Follow, in the order the hub's state was created and released; a
	// state released and created again quickly is always told as Unfollow
	// then Follow. They are called with no hub lock held that any Hub
	// method takes (the hub serializes them on a lock of their own), and
	// before any Presence call of the partition's new state; they should
	// not block (enqueue).
	Follow(partition string)
	Unfollow(partition string)
	// Presence reports a change of a local socket's presence (Kind join,
	// update or leave; Socket is the socket's process-unique session id;
	// Doc is nil for a leave). It is called with the partition's lock
	// held, in the order of the changes: it must not block and must not
	// call back into the Hub (enqueue).
	Presence(partition string, ev PresenceEvent)
}

// PresenceEvent is one change of a socket's presence document on a scope
// key (§8.6), as relayed between the members of a cluster.
type PresenceEvent struct {
	// Key is the scope key; Kind is ssp2.PresenceJoin, PresenceUpdate or
	// PresenceLeave.
	Key, Kind string
	// ActorID and ClientID are the publishing socket's client.
	ActorID, ClientID string
	// Socket identifies the socket: the hub gives its session id (unique
	// in the process); across the cluster the relay makes it unique
	// (prefixed with the member).
	Socket string
	// Doc is the document (nil for a leave).
	Doc json.RawMessage `json:",omitempty"`
}

// maxRemotePresence bounds the remote presence entries one partition's
// state holds; a join beyond it is dropped (the relay bounds its own
// table the same way, so it is never expected).
const maxRemotePresence = 65_536

// remoteID identifies a remote socket's entry: the member it came through
// (origin) and its socket id.
type remoteID struct{ origin, socket string }

type remoteEntry struct {
	actorID, clientID string
	doc               json.RawMessage
}

// syncFollow tells the relay whether the hub holds state of partition
// name: Unfollow for a released one (or one replaced since), Follow for
// the current one. It runs after every creation and release of a part,
// outside the hub's and the part's locks; followMu makes the calls of one
// partition alternate in the order of those changes.
func (h *Hub) syncFollow(name string) {
	r := h.opts.Cluster
	if r == nil {
		return
	}
	h.followMu.Lock()
	defer h.followMu.Unlock()
	h.mu.RLock()
	cur := h.parts[name]
	h.mu.RUnlock()
	old := h.followed[name]
	if old == cur {
		return
	}
	if old != nil {
		delete(h.followed, name)
		r.Unfollow(name)
	}
	if cur != nil {
		h.followed[name] = cur
		r.Follow(name)
	}
}

// RemotePresence applies a change of a remote socket's presence (a socket
// of another member, origin the member it came through) to the
// partition's local sockets: the sockets registered on ev.Key hear it
// exactly as they would hear a local socket (join for a first document,
// update for a later one, leave), and the document is kept for the
// join burst of sockets that register on the key later. The hub decides
// join or update by what it holds (ev.Kind only tells a leave from a
// document); a leave of an unknown entry, a document over
// MaxPresenceBytes, and a partition without local sockets (the hub holds
// no state for it: nothing is kept) are ignored. It never blocks.
func (h *Hub) RemotePresence(partition, origin string, ev PresenceEvent) {
	p := h.existing(partition)
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone {
		return
	}
	id := remoteID{origin: origin, socket: ev.Socket}
	entries := p.remote[ev.Key]
	now := h.nowMs()
	if ev.Kind == ssp2.PresenceLeave {
		p.remoteLeave(ev.Key, id, now)
		return
	}
	if len(ev.Doc) > h.opts.MaxPresenceBytes || ev.Doc == nil {
		return
	}
	kind := ssp2.PresenceUpdate
	if _, ok := entries[id]; !ok {
		if p.nremote >= maxRemotePresence {
			return
		}
		kind = ssp2.PresenceJoin
		p.nremote++
	}
	if entries == nil {
		if p.remote == nil {
			p.remote = map[string]map[remoteID]remoteEntry{}
		}
		entries = map[remoteID]remoteEntry{}
		p.remote[ev.Key] = entries
	}
	entries[id] = remoteEntry{actorID: ev.ActorID, clientID: ev.ClientID, doc: ev.Doc}
	p.presenceFanout(nil, ev.Key, kind, ev.ActorID, ev.ClientID, ev.Doc, now)
}

// remoteLeave drops a remote entry, telling the sockets on key (p.mu
// held).
func (p *part) remoteLeave(key string, id remoteID, now int64) {
	entries := p.remote[key]
	e, ok := entries[id]
	if !ok {
		return
	}
	delete(entries, id)
	p.nremote--
	if len(entries) == 0 {
		delete(p.remote, key)
	}
	p.presenceFanout(nil, key, ssp2.PresenceLeave, e.actorID, e.clientID, nil, now)
}

// DropRemotePresence removes every remote entry of partition that came
// through origin (every remote entry when origin is ""), sending the
// local sockets on their keys a leave for each. It never blocks.
func (h *Hub) DropRemotePresence(partition, origin string) {
	p := h.existing(partition)
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := h.nowMs()
	for key, entries := range p.remote {
		for id := range entries {
			if origin == "" || id.origin == origin {
				p.remoteLeave(key, id, now)
			}
		}
	}
}

// LocalPresence returns the current presence documents of partition's
// local sockets (Kind join, Socket the session id), sorted by key and
// socket: what a relay publishes to a partition's new owner.
func (h *Hub) LocalPresence(partition string) []PresenceEvent {
	p := h.existing(partition)
	if p == nil {
		return nil
	}
	p.mu.Lock()
	var out []PresenceEvent
	for key, entries := range p.presence {
		for s, e := range entries {
			out = append(out, PresenceEvent{Key: key, Kind: ssp2.PresenceJoin, ActorID: s.ident.ActorID, ClientID: s.clientID, Socket: s.id, Doc: e.doc})
		}
	}
	p.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Key != out[j].Key {
			return out[i].Key < out[j].Key
		}
		return out[i].Socket < out[j].Socket
	})
	return out
}
