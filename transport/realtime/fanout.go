package realtime

import (
	"bytes"
	"context"
	"strconv"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
)

// kickFanout makes sure the partition's fan-out worker runs (p.mu held).
func (p *part) kickFanout() {
	if p.fanRunning {
		p.fanDirty = true
		return
	}
	if p.h.spawn(p.fanout) {
		p.fanRunning = true
	}
}

// buildGroup is the sockets sharing one subscription set and cursors.
type buildGroup struct {
	subs     []engine.DeltaSub
	sessions []*session
	gens     []uint64
}

// fanout brings every socket of the partition up to its newest commit:
// live sockets get deltas, the others a wake-up for newer commits that
// touch their scope keys (coalesced while one is queued). It
// runs while there is work and then exits (level-triggered: it compares
// each socket with the partition's newest seq, so a notification that
// arrives while it builds is never lost).
func (p *part) fanout() {
	defer p.h.releasePart(p)
	for {
		p.mu.Lock()
		p.fanDirty = false
		target := p.latest
		groups, order := p.collect(target)
		if len(order) == 0 {
			if !p.fanDirty {
				p.fanRunning = false
				p.mu.Unlock()
				return
			}
			p.mu.Unlock()
			continue
		}
		p.mu.Unlock()
		p.build(target, groups, order)
	}
}

// collect wakes the sockets that are not live (SPEC §8.2: each later
// commit that matches their registration gets a catch-up wake-up) and
// groups the live ones that need a delta (p.mu held). A socket that is not
// live is woken only when a commit since the last one weighed for it may
// touch one of its scope keys (commitKeyLog.touches): a socket with no
// keys (it never pulled, or every subscription is revoked) is woken by
// none; commits the hub holds no keys for wake every socket with keys;
// a commit still pending is weighed once its outcome is known.
func (p *part) collect(target int64) (map[string]*buildGroup, []string) {
	var groups map[string]*buildGroup
	var order []string
	for s := range p.sessions {
		if s.state != stateStarted || s.reset {
			continue
		}
		if !s.live || s.inRound {
			p.weigh(s, target)
			continue
		}
		if s.building {
			continue
		}
		if !s.behind(target) {
			s.checked = max(s.checked, target) // nothing it must be told
			continue
		}
		// The group key (registrations and cursors) is built in one scratch
		// buffer and the subscriptions once per group, not per socket.
		key := append(p.keyBuf[:0], s.groupKey...)
		for _, x := range s.subs {
			if x.ready {
				key = strconv.AppendInt(key, x.cursor, 10)
				key = append(key, ',')
			}
		}
		p.keyBuf = key
		g := groups[string(key)]
		if g == nil {
			if groups == nil {
				groups = map[string]*buildGroup{}
			}
			var subs []engine.DeltaSub
			for _, x := range s.subs {
				if x.ready {
					subs = append(subs, engine.DeltaSub{ID: x.id, Table: x.table, Effective: x.eff, Cursor: x.cursor})
				}
			}
			g = &buildGroup{subs: subs}
			k := string(key)
			groups[k] = g
			order = append(order, k)
		}
		s.building = true
		g.sessions = append(g.sessions, s)
		g.gens = append(g.gens, s.gen)
	}
	return groups, order
}

// weigh decides whether the commits up to target that s has not weighed
// yet wake it, for a socket that gets no deltas: one that is not live, or
// one serving a round (p.mu held). A commit that may touch one of its keys
// wakes it (catchup-required); during a round the wake-up is owed to the
// round instead, which sends it with its answer (owe); a commit whose
// outcome is not known yet is weighed again once it is.
func (p *part) weigh(s *session, target int64) {
	if s.checked >= target {
		return
	}
	touch, undecided := p.recent.touches(s.checked, target, s.keys)
	switch {
	case touch && s.inRound:
		s.owe(max(s.highest, target))
	case touch:
		s.wake(ssp2.WakeCatchupRequired, max(s.highest, target))
	case undecided >= 0:
		s.checked = undecided - 1 // weighed again once its outcome is known
		p.undecided = true
	default:
		s.checked = target
	}
}

// build asks the partition's actor for the groups' sections, encodes each
// delta once per wire version and queues it on the group's sockets.
func (p *part) build(target int64, groups map[string]*buildGroup, order []string) {
	h := p.h
	req := engine.DeltaRequest{Groups: make([]engine.DeltaGroup, len(order)), LimitChanges: h.opts.DeltaChanges, MaxBytes: h.opts.MaxDeltaBytes}
	for i, k := range order {
		req.Groups[i] = engine.DeltaGroup{Subs: groups[k].subs}
	}
	ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	res, err := h.eng.Load().BuildDeltas(ctx, p.name, req)
	cancel()
	if err != nil && h.ctx.Err() == nil {
		h.log.Warn("realtime deltas not built; sockets told to catch up", zap.String("partition", p.name), zap.Error(err))
	}
	var schemaVersion int32
	if sch := h.schema(); sch != nil {
		schemaVersion = sch.Version
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if res != nil && res.UpTo > p.latest {
		p.latest = res.UpTo
	}
	for i, k := range order {
		g := groups[k]
		var sec *engine.DeltaSections
		if res != nil {
			sec = &res.Groups[i]
		}
		encoded := map[uint16][]byte{}
		for j, s := range g.sessions {
			s.building = false
			if s.state != stateStarted || s.gen != g.gens[j] || !s.live || s.inRound {
				continue // re-registered or paused meanwhile: the next pass sees it
			}
			switch {
			case sec == nil:
				s.live = false
				s.wake(ssp2.WakeCatchupRequired, max(s.highest, p.latest))
			case res.LogEpoch != s.epoch:
				s.live, s.reset = false, true
				s.wake(ssp2.WakeResetRequired, res.UpTo)
			case sec.TooLarge:
				s.live = false
				s.wake(ssp2.WakeDeltaTooLarge, res.UpTo)
			case sec.Incomplete:
				s.live = false
				s.wake(ssp2.WakeCatchupRequired, res.UpTo)
			case sec.Commits == 0:
				s.advance(res.UpTo) // nothing of its scopes: no message
			default:
				b, ok := encoded[s.wire]
				if !ok {
					b = encodeDelta(s.wire, schemaVersion, res.LogEpoch, sec.Frames)
					encoded[s.wire] = b
					h.stats.deltaBuilds.Add(1)
				}
				switch {
				case b == nil || len(b)-1 > h.opts.MaxDeltaBytes:
					s.live = false
					s.wake(ssp2.WakeDeltaTooLarge, res.UpTo)
				case len(s.sent) >= h.opts.MaxUnackedDeltas:
					s.live = false
					s.wake(ssp2.WakeCatchupRequired, res.UpTo)
				case !s.enqueue(outMsg{typ: websocket.MessageBinary, data: b}, false):
					s.live = false
					s.wake(ssp2.WakeCatchupRequired, res.UpTo)
				default:
					h.stats.deltas.Add(1)
					s.advance(res.UpTo)
					s.sent = append(s.sent, res.UpTo)
				}
			}
			if s.live && s.behind(target) {
				// The log did not reach a seq this hub was told is durable
				// (never expected): pull instead of building again and again.
				s.live = false
				s.wake(ssp2.WakeCatchupRequired, target)
			}
		}
	}
}

// advance moves every ready subscription's cursor to seq (p.mu held).
func (s *session) advance(seq int64) {
	for i := range s.subs {
		if s.subs[i].ready {
			s.subs[i].cursor = max(s.subs[i].cursor, seq)
		}
	}
	s.highest = max(s.highest, seq)
	s.checked = max(s.checked, seq)
}

// encodeDelta renders a delta message: the tag, then a whole SSP2 response
// (RESP_HEADER in wire version wire, the sections, END). nil if it cannot
// be encoded.
func encodeDelta(wire uint16, schemaVersion int32, epoch string, sections []ssp2.Frame) []byte {
	if wire == 0 {
		wire = ssp2.WireV3 // no version recorded yet: the current one
	}
	hdr := &ssp2.RespHeader{LatestSchemaVersion: &schemaVersion}
	if wire >= ssp2.WireV2 {
		hdr.LogEpoch = epoch
	}
	rep := engine.Reply{WireVersion: wire, Frames: append([]ssp2.Frame{hdr}, sections...)}
	var buf bytes.Buffer
	buf.WriteByte(TagDelta)
	if _, err := rep.WriteTo(&buf); err != nil {
		return nil
	}
	return buf.Bytes()
}
