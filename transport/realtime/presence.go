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
	p.presenceFanout(s, key, kind, doc, now)
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
	p.presenceFanout(s, key, ssp2.PresenceLeave, nil, p.h.nowMs())
}

// presenceFanout tells every other socket registered on key (p.mu held).
func (p *part) presenceFanout(from *session, key, kind string, doc json.RawMessage, now int64) {
	for o := range p.keys[key] {
		if o == from || o.state != stateStarted {
			continue
		}
		p.h.stats.presence.Add(1)
		o.enqueue(outMsg{typ: textMessage, presence: &ssp2.PresenceFanout{ScopeKey: key, Kind: kind, ActorID: from.ident.ActorID,
			ClientID: from.clientID, Doc: doc, Timestamp: now}}, true)
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
}
