package realtime

import (
	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/syncerr"
)

// Defaults of the per-client and per-actor socket caps (Options).
const (
	DefaultMaxConnectionsPerClient = 16
	DefaultMaxConnectionsPerActor  = 256
)

// Refusal reasons of upgrades refused at a socket cap, the reason label of
// synclane_realtime_refused_total.
const (
	RefusedProcess = "process" // Options.MaxConnections
	RefusedClient  = "client"  // Options.MaxConnectionsPerClient
	RefusedActor   = "actor"   // Options.MaxConnectionsPerActor
)

// slotKey names a client or an actor within its partition: ids are only
// unique inside one partition.
type slotKey struct{ partition, id string }

// capOf is an Options cap as applied: 0 takes def, a negative value means
// no cap (returned as 0).
func capOf(v, def int) int {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// admit takes a socket slot for the client clientID of id, or returns the
// refusal (429 sync.websocket_connection_limit) naming the cap that is
// full. Called with h.mu held; every admitted slot is given back once with
// release.
func (h *Hub) admit(id engine.Identity, clientID string) (refused *syncerr.Error, reason string) {
	ck, ak := slotKey{id.Partition, clientID}, slotKey{id.Partition, id.ActorID}
	switch {
	case h.sockets >= h.opts.MaxConnections:
		h.stats.refusedLimit.Add(1)
		return syncerr.New(syncerr.WebsocketConnLimit, "this server holds its maximum of %d realtime sockets; retry later", h.opts.MaxConnections).
			WithDetails(refusalDetails{Limit: RefusedProcess, Max: h.opts.MaxConnections}), RefusedProcess
	case h.perClient > 0 && h.clientSockets[ck] >= h.perClient:
		h.stats.refusedClient.Add(1)
		return syncerr.New(syncerr.WebsocketConnLimit, "this clientId already holds %d realtime sockets, the per-client cap; close one or retry later", h.perClient).
			WithDetails(refusalDetails{Limit: RefusedClient, Max: h.perClient}), RefusedClient
	case h.perActor > 0 && h.actorSockets[ak] >= h.perActor:
		h.stats.refusedActor.Add(1)
		return syncerr.New(syncerr.WebsocketConnLimit, "this actor already holds %d realtime sockets, the per-actor cap; close one or retry later", h.perActor).
			WithDetails(refusalDetails{Limit: RefusedActor, Max: h.perActor}), RefusedActor
	}
	h.sockets++
	h.clientSockets[ck]++
	h.actorSockets[ak]++
	return nil, ""
}

// refusalDetails are the details of a refusal at a socket cap.
type refusalDetails struct {
	Limit string `json:"limit"`
	Max   int    `json:"max"`
}

// release gives back the slot admit took. Called with h.mu held.
func (h *Hub) release(id engine.Identity, clientID string) {
	h.sockets--
	dec := func(m map[slotKey]int, k slotKey) {
		if m[k] <= 1 {
			delete(m, k)
		} else {
			m[k]--
		}
	}
	dec(h.clientSockets, slotKey{id.Partition, clientID})
	dec(h.actorSockets, slotKey{id.Partition, id.ActorID})
}

// releaseSlot is release taking h.mu.
func (h *Hub) releaseSlot(id engine.Identity, clientID string) {
	h.mu.Lock()
	h.release(id, clientID)
	h.mu.Unlock()
}

// SocketsOf reports the open sockets (counted from admission to the end of
// the socket) of one client and of one actor of a partition.
func (h *Hub) SocketsOf(partition, clientID, actorID string) (client, actor int) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.clientSockets[slotKey{partition, clientID}], h.actorSockets[slotKey{partition, actorID}]
}
