package peer

import (
	"context"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine/cluster"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/realtime"
)

// state is the relay's state, owned by its loop goroutine: every task
// runs there, one at a time, and it is the only caller of the hub. So the
// hub's remote presence of a partition is always the replay, in order, of
// one source: the owner's link (as a follower) or the followers' table
// (as the owner), switched only by the loop.
type state struct {
	view   cluster.View
	nextID uint64 // the last follow id sent

	// Follower side.
	follows map[string]*follow  // partitions the hub holds sockets of
	out     map[string]*outLink // links to owners, by member
	acked   int                 // follows answered by another member

	// Owner side.
	in        map[*link]*follower                            // followers' links
	followers map[string]map[*link]uint64                    // partition → follower link → follow id
	table     map[string]map[entryKey]tableEntry             // partition → the followers' presence
	local     map[string]map[localKey]realtime.PresenceEvent // partition → the hub's own sockets' presence (in order)
}

func (s *state) init() {
	s.follows = map[string]*follow{}
	s.out = map[string]*outLink{}
	s.in = map[*link]*follower{}
	s.followers = map[string]map[*link]uint64{}
	s.table = map[string]map[entryKey]tableEntry{}
	s.local = map[string]map[localKey]realtime.PresenceEvent{}
}

// follow is one partition the hub holds sockets of.
type follow struct {
	owner string   // the member it is placed at ("": no member in the view)
	link  *outLink // the owner's link, when the owner is another member
	id    uint64   // the follow sent on the link's connection (0: none yet)
	acked bool     // the owner answered id
	gen   uint64   // bumped at every placement
}

// outLink is the link to one owner member: its dialer goroutine keeps a
// connection up while it has partitions (wanted).
type outLink struct {
	member string
	parts  map[string]struct{}
	conn   *link // the connection up (hello exchanged), or nil

	wanted atomic.Bool
	kick   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
}

func (ol *outLink) want(w bool) {
	ol.wanted.Store(w)
	if w {
		select {
		case ol.kick <- struct{}{}:
		default:
		}
	}
}

// follower is a follower's link as the owner sees it.
type follower struct {
	follows map[string]uint64 // partition → follow id
}

// entryKey identifies a follower's presence entry: the member its socket
// is on, the socket, the scope key.
type entryKey struct{ origin, socket, key string }

type tableEntry struct {
	link *link // the link it came on
	ev   realtime.PresenceEvent
}

type localKey struct{ socket, key string }

// ---- follower side ----

// follow starts following partition (the hub created its state).
func (r *Relay) follow(p string) {
	st := &r.st
	if st.follows[p] != nil { // never expected: Follow and Unfollow alternate
		r.unfollow(p)
	}
	f := &follow{}
	st.follows[p] = f
	r.place(p, f, false)
}

// unfollow stops following partition (the hub released its state, with
// its remote presence).
func (r *Relay) unfollow(p string) {
	st := &r.st
	f := st.follows[p]
	if f == nil {
		return
	}
	r.unplace(p, f)
	delete(st.follows, p)
	delete(st.local, p)
}

// place follows p at its owner in the current view. moved: the follow
// moved from another owner (the hub's remote presence was dropped).
func (r *Relay) place(p string, f *follow, moved bool) {
	st := &r.st
	f.gen++
	owner, ok := cluster.Owner(st.view, p)
	switch {
	case !ok:
		f.owner = ""
	case owner.ID == r.self:
		f.owner = r.self
		// The followers' presence reaches the hub from the table now.
		for k, e := range st.table[p] {
			r.cfg.Hub.RemotePresence(p, k.origin, e.ev)
		}
		if moved {
			// Commits the previous owner made during the move wake the
			// sockets: tell the hub the newest seq.
			gen := f.gen
			r.seqs.add(p, func(seq int64, err error) {
				r.box.push(func() {
					if st.follows[p] != f || f.gen != gen {
						return
					}
					if err != nil {
						r.log.Warn("cluster: newest seq of a partition this member now owns not read", zap.String("partition", p), zap.Error(err))
						return
					}
					r.cfg.Hub.OnCommit(p, seq)
				})
			})
		}
	default:
		f.owner = owner.ID
		ol := r.outLink(owner.ID)
		ol.parts[p] = struct{}{}
		f.link = ol
		ol.want(true)
		if ol.conn != nil {
			r.sendFollow(ol, p, f)
		}
	}
	if moved {
		r.log.Debug("cluster: partition follow moved", zap.String("partition", p), zap.String("peer", f.owner))
	}
}

// unplace stops following p at its current owner.
func (r *Relay) unplace(p string, f *follow) {
	if ol := f.link; ol != nil {
		delete(ol.parts, p)
		if ol.conn != nil && f.id != 0 {
			ol.conn.sendMsg(&message{Op: OpUnfollow, P: p})
		}
		if len(ol.parts) == 0 {
			ol.want(false)
		}
	}
	r.setAcked(f, false)
	f.link, f.id, f.owner = nil, 0, ""
}

func (r *Relay) setAcked(f *follow, acked bool) {
	if f.acked != acked {
		f.acked = acked
		if acked {
			r.st.acked++
		} else {
			r.st.acked--
		}
	}
}

// outLink returns the link to member, creating it (and its dialer).
func (r *Relay) outLink(member string) *outLink {
	st := &r.st
	ol := st.out[member]
	if ol == nil {
		ctx, cancel := context.WithCancel(r.ctx)
		ol = &outLink{member: member, parts: map[string]struct{}{}, kick: make(chan struct{}, 1), ctx: ctx, cancel: cancel}
		st.out[member] = ol
		r.spawn(func() { r.dialLoop(ol) })
	}
	return ol
}

// sendFollow sends a follow of p on ol's connection, then the local
// sockets' presence of p.
func (r *Relay) sendFollow(ol *outLink, p string, f *follow) {
	st := &r.st
	st.nextID++
	f.id = st.nextID
	r.setAcked(f, false)
	ol.conn.sendMsg(&message{Op: OpFollow, P: p, ID: f.id})
	for _, ev := range st.local[p] {
		ol.conn.sendMsg(&message{Op: OpPresence, P: p, Origin: r.self, Event: toWirePresence(ev)})
	}
}

// ownerUp: ol's connection l is up; follow its partitions there.
func (r *Relay) ownerUp(ol *outLink, l *link) {
	st := &r.st
	if st.out[ol.member] != ol || ol.ctx.Err() != nil {
		l.fail("member left the view")
		return
	}
	ol.conn = l
	for p := range ol.parts {
		r.sendFollow(ol, p, st.follows[p])
	}
}

// ownerDown: ol's connection l ended; the hub's remote presence of its
// partitions is dropped (the follow answers on the next connection bring
// it back, with the newest seq).
func (r *Relay) ownerDown(ol *outLink, l *link) {
	st := &r.st
	if ol.conn != l {
		return
	}
	ol.conn = nil
	for p := range ol.parts {
		f := st.follows[p]
		if f.acked {
			r.cfg.Hub.DropRemotePresence(p, "")
		}
		r.setAcked(f, false)
		f.id = 0
	}
}

// fromOwner handles a message of ol's connection l.
func (r *Relay) fromOwner(ol *outLink, l *link, m *message) {
	st := &r.st
	if ol.conn != l {
		return // a connection since replaced
	}
	f := st.follows[m.P]
	if f == nil || f.link != ol {
		return // no longer followed there
	}
	hub := r.cfg.Hub
	switch m.Op {
	case OpFollowed:
		if f.id != m.ID {
			return // the answer of a follow replaced since
		}
		r.setAcked(f, true)
		// Start over from the owner: its presence follows, then its newest
		// seq; commits relayed without their outcome are settled.
		hub.DropRemotePresence(m.P, "")
		hub.OnCommitOutcome(m.P, false)
	case OpRefused:
		if f.id == m.ID {
			r.log.Warn("cluster: the owner refused a follow; the partition's sockets here get no realtime events until the link is re-dialed",
				zap.String("partition", m.P), zap.String("peer", ol.member), zap.String("reason", m.Reason))
		}
	}
	if !f.acked {
		return
	}
	switch m.Op {
	case OpPresence:
		if m.Origin != "" && m.Origin != r.self {
			hub.RemotePresence(m.P, m.Origin, m.Event.event())
		}
	case OpCommit:
		hub.OnCommit(m.P, *m.Seq)
	case OpKeys:
		hub.OnCommitKeys(m.P, fromWireKeys(m.Commits))
	case OpOutcome:
		hub.OnCommitOutcome(m.P, *m.Durable)
	case OpRegistration:
		hub.OnRegistration(m.P, m.Reg.registration())
	}
}

// localPresence takes a change of a local socket's presence: kept (for
// the follows sent later) and sent to the partition's owner and to the
// members following it here.
func (r *Relay) localPresence(p string, ev realtime.PresenceEvent) {
	st := &r.st
	ev.Socket = r.self + "|" + ev.Socket
	k := localKey{socket: ev.Socket, key: ev.Key}
	if ev.Kind == ssp2.PresenceLeave {
		if _, ok := st.local[p][k]; !ok {
			return
		}
		delete(st.local[p], k)
		if len(st.local[p]) == 0 {
			delete(st.local, p)
		}
		ev.Doc = nil
	} else {
		if st.local[p] == nil {
			st.local[p] = map[localKey]realtime.PresenceEvent{}
		}
		kept := ev
		kept.Kind = ssp2.PresenceJoin // as a snapshot replays it
		st.local[p][k] = kept
	}
	b, err := encode(&message{Op: OpPresence, P: p, Origin: r.self, Event: toWirePresence(ev)}, r.lim.MessageBytes)
	if err != nil {
		r.stats.dropped.Add(1)
		r.log.Error("cluster: presence not relayed", zap.String("partition", p), zap.Error(err))
		return
	}
	for l := range st.followers[p] {
		l.send(b, false)
	}
	if f := st.follows[p]; f != nil && f.link != nil && f.link.conn != nil && f.id != 0 {
		f.link.conn.send(b, false)
	}
}

// onView re-places every follow whose owner changed in v and closes the
// links to members that left.
func (r *Relay) onView(v cluster.View) {
	st := &r.st
	st.view = v
	hub := r.cfg.Hub
	for p, f := range st.follows {
		owner := ""
		if m, ok := cluster.Owner(v, p); ok {
			owner = m.ID
		}
		if owner == f.owner {
			continue
		}
		placed, wasRemote := f.owner != "", f.link != nil
		r.unplace(p, f)
		if placed {
			// The remote presence came from the previous owner (or, for
			// this member, from its table): the new owner's follow answer
			// brings it again.
			hub.DropRemotePresence(p, "")
		}
		if wasRemote {
			hub.OnCommitOutcome(p, false) // commits relayed without their outcome
		}
		r.place(p, f, placed)
	}
	for m, ol := range st.out {
		if !v.Has(m) && len(ol.parts) == 0 {
			ol.cancel()
			delete(st.out, m)
		}
	}
}

// ---- owner side ----

// followerUp registers a follower's new link l (replacing any older link
// of the same member: it is dead, the member dialed again).
func (r *Relay) followerUp(l *link) {
	st := &r.st
	for o := range st.in {
		if o.peer == l.peer {
			o.fail("replaced by a new link of the member")
		}
	}
	st.in[l] = &follower{follows: map[string]uint64{}}
}

// followerDown forgets a follower's ended link: its entries leave.
func (r *Relay) followerDown(l *link) {
	st := &r.st
	fo := st.in[l]
	if fo == nil {
		return
	}
	for p := range fo.follows {
		r.dropFollower(l, fo, p)
	}
	delete(st.in, l)
}

// fromFollower handles a message of a follower's link l.
func (r *Relay) fromFollower(l *link, m *message) {
	st := &r.st
	fo := st.in[l]
	if fo == nil {
		return
	}
	switch m.Op {
	case OpFollow:
		p := m.P
		if _, ok := fo.follows[p]; ok {
			r.dropFollower(l, fo, p)
		}
		if len(fo.follows) >= r.lim.FollowsPerLink {
			r.log.Warn("cluster: follow refused: the link follows its maximum of partitions", zap.String("partition", p),
				zap.String("peer", l.peer), zap.Int("follows_per_link", r.lim.FollowsPerLink))
			l.sendMsg(&message{Op: OpRefused, P: p, ID: m.ID, Reason: "the link follows its maximum of partitions"})
			return
		}
		fo.follows[p] = m.ID
		if st.followers[p] == nil {
			st.followers[p] = map[*link]uint64{}
		}
		st.followers[p][l] = m.ID
		r.nfollowers.Add(1)
		l.sendMsg(&message{Op: OpFollowed, P: p, ID: m.ID})
		for k, e := range st.table[p] {
			if k.origin != l.peer {
				l.sendMsg(&message{Op: OpPresence, P: p, Origin: k.origin, Event: toWirePresence(e.ev)})
			}
		}
		for _, ev := range st.local[p] {
			l.sendMsg(&message{Op: OpPresence, P: p, Origin: r.self, Event: toWirePresence(ev)})
		}
		id := m.ID
		r.seqs.add(p, func(seq int64, err error) { r.box.push(func() { r.answerSeq(l, p, id, seq, err) }) })
	case OpUnfollow:
		if _, ok := fo.follows[m.P]; ok {
			r.dropFollower(l, fo, m.P)
		}
	case OpPresence:
		r.followerPresence(l, fo, m)
	}
}

// answerSeq sends a follower the newest seq read for its follow (id) of
// p, if it still follows; a seq that could not be read fails the link
// (the follower re-dials and asks again).
func (r *Relay) answerSeq(l *link, p string, id uint64, seq int64, err error) {
	fo := r.st.in[l]
	if fo == nil || fo.follows[p] != id {
		return
	}
	if err != nil {
		r.log.Warn("cluster: newest seq not read for a follower; its link is closed", zap.String("partition", p), zap.String("peer", l.peer), zap.Error(err))
		l.fail("newest seq not read")
		return
	}
	l.sendMsg(&message{Op: OpCommit, P: p, Seq: &seq})
}

// followerPresence takes a presence change of one of a follower's
// sockets.
func (r *Relay) followerPresence(l *link, fo *follower, m *message) {
	st := &r.st
	p := m.P
	if _, ok := fo.follows[p]; !ok {
		r.stats.dropped.Add(1)
		return
	}
	ev := m.Event.event()
	k := entryKey{origin: l.peer, socket: ev.Socket, key: ev.Key}
	t := st.table[p]
	switch ev.Kind {
	case ssp2.PresenceLeave:
		if _, ok := t[k]; !ok {
			return
		}
		delete(t, k)
		if len(t) == 0 {
			delete(st.table, p)
		}
		ev.Doc = nil
	case ssp2.PresenceJoin, ssp2.PresenceUpdate:
		if len(ev.Doc) == 0 || len(ev.Doc) > r.lim.PresenceBytes {
			r.stats.dropped.Add(1)
			return
		}
		if _, ok := t[k]; !ok && len(t) >= r.lim.PresencePerPartition {
			r.stats.dropped.Add(1)
			r.log.Debug("cluster: presence entry dropped: the partition holds its maximum", zap.String("partition", p),
				zap.String("peer", l.peer), zap.Int("presence_per_partition", r.lim.PresencePerPartition))
			return
		}
		if t == nil {
			t = map[entryKey]tableEntry{}
			st.table[p] = t
		}
		kept := ev
		kept.Kind = ssp2.PresenceJoin // as a snapshot replays it
		t[k] = tableEntry{link: l, ev: kept}
	default:
		r.stats.dropped.Add(1)
		return
	}
	r.spread(p, l.peer, ev, false)
}

// dropFollower ends l's follow of p: its entries leave.
func (r *Relay) dropFollower(l *link, fo *follower, p string) {
	st := &r.st
	delete(fo.follows, p)
	delete(st.followers[p], l)
	if len(st.followers[p]) == 0 {
		delete(st.followers, p)
	}
	r.nfollowers.Add(-1)
	t := st.table[p]
	for k, e := range t {
		if e.link != l {
			continue
		}
		delete(t, k)
		leave := e.ev
		leave.Kind, leave.Doc = ssp2.PresenceLeave, nil
		r.spread(p, k.origin, leave, true)
	}
	if len(t) == 0 {
		delete(st.table, p)
	}
}

// spread sends a follower's presence change (origin: its member) to the
// other followers of p and, when this member owns p, to the hub. bulk:
// the change is one of a follow's end (its entries leave), bounded by the
// table, not live traffic.
func (r *Relay) spread(p, origin string, ev realtime.PresenceEvent, bulk bool) {
	st := &r.st
	if fs := st.followers[p]; len(fs) > 0 {
		b, err := encode(&message{Op: OpPresence, P: p, Origin: origin, Event: toWirePresence(ev)}, r.lim.MessageBytes)
		if err == nil {
			for l := range fs {
				if l.peer != origin {
					l.send(b, bulk)
				}
			}
		}
	}
	if f := st.follows[p]; f != nil && f.owner == r.self {
		r.cfg.Hub.RemotePresence(p, origin, ev)
	}
}

// relay sends a commit hook's message to the followers of its partition.
func (r *Relay) relay(m *message) {
	fs := r.st.followers[m.P]
	if len(fs) == 0 {
		return
	}
	b, err := encode(m, r.lim.MessageBytes)
	if err != nil {
		r.stats.dropped.Add(uint64(len(fs)))
		r.log.Error("cluster: commit event not relayed", zap.String("op", m.Op), zap.String("partition", m.P), zap.Error(err))
		return
	}
	for l := range fs {
		l.send(b, false)
	}
}

// publishCounts publishes the loop's counts for Stats.
func (r *Relay) publishCounts() {
	st := &r.st
	r.stats.followed.Store(int64(len(st.follows)))
	r.stats.followedRemote.Store(int64(st.acked))
	r.stats.followers.Store(r.nfollowers.Load())
}
