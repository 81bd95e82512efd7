package realtime

import (
	"encoding/json"

	"github.com/synclane/synclane/protocol/ssp2"
)

// Presence (§8.6) is kept in memory, per process: a socket may publish a
// document on a scope key it is registered on; the other sockets
// registered on that key get join (first document), update (later ones)
// and leave (a null document, the socket leaving the key, or closing); a
// socket that gains a key gets a join for every document already there.
// A socket never hears its own presence.
//
// With Options.Cluster, presence is cluster-wide: every change of a local
// socket's document is handed to the relay (ClusterRelay.Presence), and
// the other members' sockets' documents arrive through RemotePresence; a
// local socket hears a remote socket exactly as it hears a local one
// (cluster.go).

// publish handles a presence publish of s (doc nil: leave).
func (p *part) publish(s *session, key string, doc json.RawMessage) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.state != stateStarted {
		return
	}
	now := p.h.nowMs()
	if _, ok := s.keys[key]; !ok {
		s.control(&ssp2.PresenceError{ScopeKey: key, Error: ssp2.PresenceForbidden, Timestamp: now})
		return
	}
	if len(doc) > p.h.opts.MaxPresenceBytes {
		s.control(&ssp2.PresenceError{ScopeKey: key, Error: ssp2.PresenceTooLarge, Timestamp: now})
		return
	}
	if doc == nil {
		p.presenceLeave(s, key)
		return
	}
	entries := p.presence[key]
	kind := ssp2.PresenceUpdate
	if _, ok := entries[s]; !ok {
		kind = ssp2.PresenceJoin
	}
	if entries == nil {
		entries = map[*session]presenceEntry{}
		p.presence[key] = entries
	}
	entries[s] = presenceEntry{doc: doc}
	p.presenceFanout(s, key, kind, s.ident.ActorID, s.clientID, doc, now)
	if r := p.h.opts.Cluster; r != nil {
		r.Presence(p.name, PresenceEvent{Key: key, Kind: kind, ActorID: s.ident.ActorID, ClientID: s.clientID, Socket: s.id, Doc: doc})
	}
}

// presenceLeave removes s's document on key, telling the others (p.mu
// held).
func (p *part) presenceLeave(s *session, key string) {
	entries := p.presence[key]
	if _, ok := entries[s]; !ok {
		return
	}
	delete(entries, s)
	if len(entries) == 0 {
		delete(p.presence, key)
	}
	p.presenceFanout(s, key, ssp2.PresenceLeave, s.ident.ActorID, s.clientID, nil, p.h.nowMs())
	if r := p.h.opts.Cluster; r != nil {
		r.Presence(p.name, PresenceEvent{Key: key, Kind: ssp2.PresenceLeave, ActorID: s.ident.ActorID, ClientID: s.clientID, Socket: s.id})
	}
}

// presenceFanout tells every socket registered on key but from (nil for
// a remote socket) of a document of actorID's clientID (p.mu held).
func (p *part) presenceFanout(from *session, key, kind, actorID, clientID string, doc json.RawMessage, now int64) {
	for o := range p.keys[key] {
		if o == from || o.state != stateStarted {
			continue
		}
		p.h.stats.presence.Add(1)
		o.enqueue(outMsg{typ: textMessage, presence: &ssp2.PresenceFanout{ScopeKey: key, Kind: kind, ActorID: actorID,
			ClientID: clientID, Doc: doc, Timestamp: now}}, true)
	}
}

// presenceBurst sends s a join for every document on key (p.mu held).
func (p *part) presenceBurst(s *session, key string) {
	now := p.h.nowMs()
	for o, e := range p.presence[key] {
		if o == s {
			continue
		}
		p.h.stats.presence.Add(1)
		s.enqueue(outMsg{typ: textMessage, presence: &ssp2.PresenceFanout{ScopeKey: key, Kind: ssp2.PresenceJoin, ActorID: o.ident.ActorID,
			ClientID: o.clientID, Doc: e.doc, Timestamp: now}}, true)
	}
	for _, e := range p.remote[key] {
		p.h.stats.presence.Add(1)
		s.enqueue(outMsg{typ: textMessage, presence: &ssp2.PresenceFanout{ScopeKey: key, Kind: ssp2.PresenceJoin, ActorID: e.actorID,
			ClientID: e.clientID, Doc: e.doc, Timestamp: now}}, true)
	}
}
