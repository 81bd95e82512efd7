// Package realtime is synclane's WebSocket transport (SSP2 §8): GET
// <mount>/realtime?clientId=… upgraded to a socket that carries deltas,
// wake-ups, heartbeats, presence and socket rounds.
//
// A Hub owns every socket of one process. Sockets register on their
// client's registered subscriptions (loaded from the client record on
// connect, replaced by every later pull of the client) and on the scope
// keys those subscriptions hold. When a commit becomes durable (this
// process's pushes, or another process's through the engine's commit
// feed), engine.Config.OnCommit tells the hub; one fan-out worker per
// partition then asks the partition's actor for the delta sections of
// every distinct subscription set (engine.BuildDeltas, read-only), encodes
// each once per wire version and queues the same bytes on every socket
// that shares it. A socket that is behind, over its bounds, or whose delta
// is too large gets a "sync" wake-up instead and pulls.
//
// Every goroutine the hub starts (per socket: a reader, a writer while
// there is something to send, heartbeat and ping; per partition: the
// fan-out worker and the ack flusher, while they have work) is counted and
// stopped by Close.
package realtime

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/bodybudget"
	"github.com/synclane/synclane/transport/httperr"
)

// Defaults of Options.
const (
	DefaultMaxConnections    = 20_000
	DefaultHeartbeatInterval = 30 * time.Second
	DefaultPingTimeout       = 15 * time.Second
	DefaultWriteTimeout      = 10 * time.Second
	DefaultMaxDeltaBytes     = 256 << 10
	DefaultMaxUnackedDeltas  = 32
	DefaultMaxQueuedMessages = 64
	DefaultMaxQueuedBytes    = 1 << 20
	DefaultMaxPresenceBytes  = 16 << 10
	DefaultDeltaChanges      = 1000
	DefaultRoundTimeout      = 30 * time.Second
)

// Options configure a Hub. Zero values take the defaults above.
type Options struct {
	// Auth authenticates the upgrade request (required), with the same
	// authenticator as POST /sync (auth.JWTAuth accepts the
	// access_token query parameter on upgrades only).
	Auth auth.Authenticator
	// Logger receives the hub's logs (default: no-op).
	Logger *zap.Logger
	// MaxConnections caps the sockets of this hub; an upgrade beyond it is
	// refused with 429 sync.websocket_connection_limit.
	MaxConnections int
	// MaxConnectionsPerClient caps the sockets of one clientId (of one
	// partition) and MaxConnectionsPerActor those of one authenticated
	// actor (of one partition): an upgrade beyond either is refused with
	// 429 sync.websocket_connection_limit naming the cap, so one client
	// cannot take the sockets meant for everyone. 0 takes the default
	// (DefaultMaxConnectionsPerClient, DefaultMaxConnectionsPerActor); a
	// negative value means no cap. A slot is held from the upgrade's
	// admission until its socket ends (or the upgrade failed).
	MaxConnectionsPerClient, MaxConnectionsPerActor int
	// HeartbeatInterval is how often each socket gets a heartbeat event and
	// a WebSocket ping.
	HeartbeatInterval time.Duration
	// PingTimeout closes a socket whose pong does not arrive within it (a
	// dead peer, or one that stopped reading).
	PingTimeout time.Duration
	// WriteTimeout closes a socket when one message cannot be written
	// within it.
	WriteTimeout time.Duration
	// MaxDeltaBytes is the largest encoded delta; a larger one is replaced
	// by a delta-too-large wake-up (--max-delta-bytes).
	MaxDeltaBytes int
	// MaxUnackedDeltas bounds the deltas sent and not yet acknowledged;
	// beyond it the socket gets catchup-required wake-ups until an ack
	// covers the newest commit it was told about.
	MaxUnackedDeltas int
	// MaxQueuedMessages and MaxQueuedBytes bound a socket's send buffer. A
	// delta that does not fit becomes a wake-up; a socket whose buffer
	// cannot take even a control message is closed (it is not reading).
	MaxQueuedMessages int
	MaxQueuedBytes    int
	// MaxPresenceBytes is the largest presence document
	// (--max-presence-bytes); a larger one is refused with
	// presence.too_large.
	MaxPresenceBytes int
	// MaxRequestBytes bounds one socket round's request (default
	// bodybudget.DefaultMaxBodyBytes, like POST /sync); a larger one closes
	// the socket (1009).
	MaxRequestBytes int64
	// BodyBudget is the in-flight request-body budget the socket rounds'
	// requests are charged to, shared with POST /sync in `synclane serve`
	// (nil: the hub's own, of bodybudget.DefaultLimit). A round it has no
	// room for is answered in-band with sync.rate_limited (see round.go).
	BodyBudget *bodybudget.Budget
	// RoundTimeout bounds how long a socket round's request may take to
	// arrive, from its first chunk to its END frame (default
	// DefaultRoundTimeout, as --read-timeout bounds a POST /sync body).
	// It is checked at every heartbeat, so a socket may hold an
	// incomplete round up to RoundTimeout + HeartbeatInterval; then it is
	// closed (1008).
	RoundTimeout time.Duration
	// DeltaChanges caps the changes of one subscription in one delta;
	// beyond it the socket is told to catch up by pulling.
	DeltaChanges int
	// OriginPatterns, when set, restricts the Origin of upgrade requests
	// (see websocket.AcceptOptions). By default any origin is accepted: the
	// socket is authenticated like POST /sync, by credentials the page must
	// hold, never by ambient cookies (unless a custom Auth reads cookies;
	// then set this).
	OriginPatterns []string
	// Cluster, when set, relays this hub's partitions across the members
	// of a cluster (see ClusterRelay, cluster.go): the hub tells it which
	// partitions it holds sockets of and every change of its sockets'
	// presence, and takes the other members' presence through
	// RemotePresence. Nil (a single process): none of it runs.
	Cluster ClusterRelay
}

func (o *Options) defaults() {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.MaxConnections, DefaultMaxConnections)
	def(&o.MaxDeltaBytes, DefaultMaxDeltaBytes)
	def(&o.MaxUnackedDeltas, DefaultMaxUnackedDeltas)
	def(&o.MaxQueuedMessages, DefaultMaxQueuedMessages)
	def(&o.MaxQueuedBytes, DefaultMaxQueuedBytes)
	def(&o.MaxPresenceBytes, DefaultMaxPresenceBytes)
	def(&o.DeltaChanges, DefaultDeltaChanges)
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if o.PingTimeout <= 0 {
		o.PingTimeout = DefaultPingTimeout
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = bodybudget.DefaultMaxBodyBytes
	}
	if o.RoundTimeout <= 0 {
		o.RoundTimeout = DefaultRoundTimeout
	}
	if o.BodyBudget == nil {
		o.BodyBudget = bodybudget.New(bodybudget.Options{})
	}
}

// minControlBytes is the least a control (text) message may hold.
const minControlBytes = 1 << 20

// maxControlBytes bounds one control (text) message from a client (1 MiB,
// or twice MaxPresenceBytes when that is larger): an ack or a presence
// publish, whose document may be up to MaxPresenceBytes (a larger one
// within this bound is still refused in-band with presence.too_large; a
// longer message closes the socket, 1009).
func (h *Hub) maxControlBytes() int64 {
	return max(minControlBytes, 2*int64(h.opts.MaxPresenceBytes)+4<<10)
}

// Hub holds every realtime socket of one process. Create it with New, wire
// it into the engine's configuration with Hooks, bind the engine with
// Start, serve it at GET <mount>/realtime, and Close it on shutdown
// (after the HTTP server stopped accepting, before the engine closes).
type Hub struct {
	opts Options
	log  *zap.Logger
	eng  atomic.Pointer[engine.Engine]
	// hooked reports that Hooks installed the hub's hooks in a Config.
	hooked atomic.Bool

	ctx    context.Context // ends at Close
	cancel context.CancelFunc

	mu      sync.RWMutex
	closed  bool
	parts   map[string]*part
	sockets int
	// clientSockets and actorSockets count the slots held per client and
	// per actor (admission.go); perClient and perActor are their caps (0:
	// none).
	clientSockets, actorSockets map[slotKey]int
	perClient, perActor         int

	// followMu orders Options.Cluster's Follow and Unfollow calls; followed
	// is the part each was last told to follow for (cluster.go).
	followMu sync.Mutex
	followed map[string]*part

	// gmu orders goroutine starts before Close's Wait.
	gmu     sync.Mutex
	stopped bool
	wg      sync.WaitGroup

	stats stats

	// tookRound, when set (tests only: export_test.go), runs on a
	// socket's reader goroutine right after it took a round's request, as
	// if the reader were descheduled there.
	tookRound func(clientID string)
}

// New returns a hub; it serves nothing until Start.
func New(opts Options) *Hub {
	opts.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Hub{opts: opts, log: opts.Logger, ctx: ctx, cancel: cancel, parts: map[string]*part{}, followed: map[string]*part{},
		clientSockets: map[slotKey]int{}, actorSockets: map[slotKey]int{},
		perClient: capOf(opts.MaxConnectionsPerClient, DefaultMaxConnectionsPerClient),
		perActor:  capOf(opts.MaxConnectionsPerActor, DefaultMaxConnectionsPerActor)}
}

// Configure implements engine.Extension: it is Hooks. Listing the hub in
// engine.Config.Extensions wires it in the right order by itself (its
// hooks before the engine is built, Start after).
func (h *Hub) Configure(cfg *engine.Config) { h.Hooks(cfg) }

// Hooks sets cfg's OnCommit, OnCommitKeys, OnCommitOutcome and
// OnRegistration to the hub's, keeping (and still calling) any already
// set. Call it before engine.New with the Config given to it (or list the
// hub in Config.Extensions, which does both this and Start).
func (h *Hub) Hooks(cfg *engine.Config) {
	h.hooked.Store(true)
	cfg.AddCommitHooks(engine.CommitHooks{OnCommit: h.OnCommit, OnCommitKeys: h.OnCommitKeys,
		OnCommitOutcome: h.OnCommitOutcome, OnRegistration: h.OnRegistration})
}

// Start binds the engine whose Config carries the hub's Hooks; until then
// upgrades are answered 503.
func (h *Hub) Start(eng *engine.Engine) {
	if !h.hooked.Load() {
		// The hub would hear of no commit: its sockets would never wake.
		h.log.Error("realtime hub started without its engine hooks: call Hooks with the engine's Config before engine.New, or list the hub in engine.Config.Extensions")
	}
	h.eng.Store(eng)
}

// Close closes every socket (status 1001, "server shutting down") and
// waits for every goroutine the hub started. New upgrades are refused.
func (h *Hub) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		h.wg.Wait()
		return
	}
	h.closed = true
	var all []*session
	for _, p := range h.parts {
		p.mu.Lock()
		for s := range p.sessions {
			all = append(all, s)
		}
		p.mu.Unlock()
	}
	h.mu.Unlock()
	for _, s := range all {
		s.shut(websocket.StatusGoingAway, "server shutting down")
	}
	h.gmu.Lock()
	h.stopped = true
	h.gmu.Unlock()
	// The close handshakes above end every reader; then the rest winds
	// down. The context ends whatever is still waiting on the engine.
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(h.opts.WriteTimeout + 5*time.Second):
		h.cancel()
		<-done
	}
	h.cancel()
}

// spawn runs fn on a goroutine Close waits for; false (fn not run) once
// the hub is stopping.
func (h *Hub) spawn(fn func()) bool {
	if !h.enter() {
		return false
	}
	go func() {
		defer h.wg.Done()
		fn()
	}()
	return true
}

// enter counts the calling goroutine as one of the hub's (the caller runs
// h.wg.Done when it ends); false once the hub is stopping.
func (h *Hub) enter() bool {
	h.gmu.Lock()
	defer h.gmu.Unlock()
	if h.stopped {
		return false
	}
	h.wg.Add(1)
	return true
}

// existing returns the hub's state of a partition that has sockets (or
// had them recently), or nil; it never creates one.
func (h *Hub) existing(partitionName string) *part {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.parts[partitionName]
}

func (h *Hub) nowMs() int64 {
	if e := h.eng.Load(); e != nil {
		return e.Now().UnixMilli()
	}
	return time.Now().UnixMilli()
}

// OnCommit tells the hub that partition's commits up to maxSeq are
// durable. It never blocks; Hooks installs it as engine.Config.OnCommit.
func (h *Hub) OnCommit(partitionName string, maxSeq int64) {
	p := h.existing(partitionName)
	if p == nil {
		return
	}
	p.mu.Lock()
	if maxSeq > p.latest {
		p.latest = maxSeq
		p.kickFanout()
	}
	p.mu.Unlock()
}

// OnCommitKeys tells the hub which scope keys commits of this process are
// about to make durable touch, so that a socket that is not live is woken
// only by commits that touch its keys (a commit the hub learns of only
// through OnCommit, such as another process's, wakes every socket that is
// not live and has keys). Until OnCommitOutcome, those commits are
// undecided: a socket is woken for them, or not, once the outcome is
// known. It never blocks; Hooks installs it as engine.Config.OnCommitKeys.
func (h *Hub) OnCommitKeys(partitionName string, commits []engine.CommitKeys) {
	p := h.existing(partitionName)
	if p == nil {
		return // no socket: nothing to wake
	}
	p.mu.Lock()
	p.recent.announce(commits)
	p.mu.Unlock()
}

// OnCommitOutcome settles the commits OnCommitKeys announced: durable,
// they wake the sockets on their keys; otherwise (rolled back, or an
// unknown outcome) they count as touching every key. It never blocks;
// Hooks installs it as engine.Config.OnCommitOutcome.
func (h *Hub) OnCommitOutcome(partitionName string, durable bool) {
	p := h.existing(partitionName)
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.recent.settle(durable) && p.undecided {
		p.undecided = false
		p.kickFanout() // sockets whose decision waited on these commits
	}
	p.mu.Unlock()
}

// OnRegistration follows a client's served rounds: the wire version of
// its deltas and, after a pull, its new registrations. The client's
// sockets then get wake-ups, not deltas, until an ack covers the newest
// commit they were told about (the pull's answer may still be on its way
// to the client). It never blocks; Hooks installs it.
func (h *Hub) OnRegistration(partitionName string, r engine.Registration) {
	p := h.existing(partitionName)
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.byClient[r.ClientID] {
		if s.ident.ActorID != r.ActorID || s.state == stateClosed {
			continue
		}
		if s.state == stateConnecting {
			// Not upgraded yet (no connection to write to, no hello
			// sent): connect applies the newest registration after the
			// upgrade instead of the client record it read before it.
			reg := r
			if !r.Pulled && s.pendingReg != nil { // keep the last pull's subscriptions
				reg = *s.pendingReg
				reg.WireVersion = r.WireVersion
			}
			s.pendingReg = &reg
			continue
		}
		s.wire = r.WireVersion
		if !r.Pulled {
			continue
		}
		s.epoch, s.reset = r.LogEpoch, false
		s.gen++
		s.live = false
		s.sent = s.sent[:0]
		p.register(s, registeredSubs(r))
		floor := registeredFloor(r, max(s.checked, s.highest))
		if s.inRound {
			// A socket round's own pull: commits made durable during the
			// round still owe it a wake-up however far the pull reached
			// (SPEC §8.7), so it is not moved past any it has not weighed.
			floor = min(floor, s.checked)
		}
		s.checked = floor
		if s.checked < p.latest {
			p.kickFanout() // commits past the pull's cursors that touch its new keys wake it
		}
	}
}

// registeredFloor is the lowest cursor of a pull's active subscriptions
// (what the client holds for certain), or def when none has one: commits
// past it that touch the new keys must still reach the socket.
func registeredFloor(r engine.Registration, def int64) int64 {
	floor, ok := int64(0), false
	for _, rs := range r.Subscriptions {
		if rs.Active && rs.Cursor >= 0 && (!ok || rs.Cursor < floor) {
			floor, ok = rs.Cursor, true
		}
	}
	if !ok {
		return def
	}
	return floor
}

// registeredSubs are the subscriptions of a pull's registration.
func registeredSubs(r engine.Registration) []sub {
	subs := make([]sub, 0, len(r.Subscriptions))
	for _, rs := range r.Subscriptions {
		subs = append(subs, sub{id: rs.ID, table: rs.Table, eff: rs.Effective, cursor: rs.Cursor, active: rs.Active, ready: rs.Ready})
	}
	return subs
}

// part is the hub's state of one partition with sockets. Its mutex guards
// the fields below and every session's registration and flow state (lock
// order: Hub.mu, then part.mu, then a session's queue lock).
type part struct {
	h    *Hub
	name string

	mu       sync.Mutex
	gone     bool // removed from Hub.parts
	sessions map[*session]struct{}
	byClient map[string][]*session
	keys     map[string]map[*session]struct{}      // registered scope key → sockets
	presence map[string]map[*session]presenceEntry // scope key → socket → doc
	latest   int64                                 // newest commit seq known
	recent   commitKeyLog                          // scope keys of this process's newest commits
	// remote holds other members' sockets' presence (Options.Cluster): scope
	// key → (origin, socket) → doc; nremote counts its entries.
	remote  map[string]map[remoteID]remoteEntry
	nremote int
	// undecided is set when a socket's wake-up waits on a pending commit
	// (commitKeyLog.touches); OnCommitOutcome then runs the fan-out.
	undecided bool

	// refreshes counts RefreshScopes calls on the partition: a socket that
	// was connecting when one ran (its resolution may predate it)
	// registers nothing (refresh.go).
	refreshes uint64

	fanRunning, fanDirty bool
	// keyBuf is collect's scratch buffer for group keys.
	keyBuf     []byte
	acks       map[string]engine.Ack
	ackRunning bool
}

type presenceEntry struct {
	doc json.RawMessage
}

// acquirePart returns the partition's state, creating it.
func (h *Hub) acquirePart(name string) *part {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.parts[name]
	if p == nil {
		p = &part{h: h, name: name, sessions: map[*session]struct{}{}, byClient: map[string][]*session{},
			keys: map[string]map[*session]struct{}{}, presence: map[string]map[*session]presenceEntry{}, latest: -1}
		h.parts[name] = p
	}
	return p
}

// releasePart drops an idle partition with no socket.
func (h *Hub) releasePart(p *part) {
	h.mu.Lock()
	p.mu.Lock()
	released := false
	if len(p.sessions) == 0 && !p.fanRunning && !p.ackRunning && !p.gone && h.parts[p.name] == p {
		delete(h.parts, p.name)
		p.gone = true
		released = true
	}
	p.mu.Unlock()
	h.mu.Unlock()
	if released {
		h.syncFollow(p.name)
	}
}

// ServeHTTP serves GET /realtime?clientId=…: authenticate, load the
// client's registrations, upgrade, send hello.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	eng := h.eng.Load()
	id, ok := auth.AuthenticateUpgrade(w, r, eng, h.opts.Auth, "realtime", "realtime")
	if !ok {
		return
	}
	clientID := r.URL.Query().Get("clientId")
	if verr := engine.ValidateClientID(clientID); verr != nil {
		httperr.Write(w, verr)
		return
	}
	if verr := engine.ValidateIdentity(id.ActorID, id.Partition); verr != nil {
		httperr.Write(w, verr)
		return
	}
	if !isUpgrade(r) {
		httperr.WriteStatus(w, http.StatusUpgradeRequired, syncerr.New(syncerr.InvalidRequest, "GET /realtime needs a WebSocket upgrade"))
		return
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		httperr.WriteStatus(w, http.StatusServiceUnavailable, syncerr.New(syncerr.InternalError, "the server is shutting down; retry"))
		return
	}
	if refused, reason := h.admit(id, clientID); refused != nil {
		h.mu.Unlock()
		h.log.Debug("realtime upgrade refused at a socket cap", zap.String("partition", id.Partition), zap.String("client_id", clientID),
			zap.String("reason", reason))
		httperr.Write(w, refused)
		return
	}
	h.mu.Unlock()
	// The upgrade counts as one of the hub's goroutines until the socket's
	// reader runs (or it failed): Close, which waits for them, then never
	// returns while a connect is between its hello and its reader, whose
	// socket would outlive it.
	if !h.enter() {
		h.releaseSlot(id, clientID)
		httperr.WriteStatus(w, http.StatusServiceUnavailable, syncerr.New(syncerr.InternalError, "the server is shutting down; retry"))
		return
	}
	defer h.wg.Done()
	s := h.newSession(id, clientID)
	if !h.connect(w, r, eng, s) {
		h.releaseSlot(id, clientID)
	}
}

func isUpgrade(r *http.Request) bool {
	for _, v := range r.Header.Values("Upgrade") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "websocket") {
				return true
			}
		}
	}
	return false
}

// connect registers s, loads its client, upgrades and starts it; false
// when the upgrade was refused (answered already).
func (h *Hub) connect(w http.ResponseWriter, r *http.Request, eng *engine.Engine, s *session) bool {
	// Register before reading the partition's newest seq: a commit after
	// that read is then always seen by this socket (as a delta or wake-up).
	var p *part
	for {
		p = h.acquirePart(s.ident.Partition)
		p.mu.Lock()
		if !p.gone {
			break
		}
		p.mu.Unlock()
	}
	s.p = p
	p.sessions[s] = struct{}{}
	p.byClient[s.clientID] = append(p.byClient[s.clientID], s)
	s.refreshSeen = p.refreshes
	p.mu.Unlock()
	h.syncFollow(p.name) // before the socket can publish presence
	fail := func(err error) bool {
		p.unregister(s)
		h.releasePart(p)
		httperr.Write(w, err)
		return false
	}
	st, err := eng.ClientState(r.Context(), s.ident, s.clientID)
	if err != nil {
		return fail(err)
	}
	if cerr := engine.CheckClientID(s.clientID, s.ident.ActorID, st.ActorID); cerr != nil {
		return fail(cerr)
	}
	var subs []sub
	if len(st.Subscriptions) > 0 {
		allowed, ok := eng.Resolve(r.Context(), s.ident)
		for _, ss := range st.Subscriptions {
			eff, revoked := engine.Effective(ss.Scopes, allowed, ok)
			x := sub{id: ss.ID, table: ss.Table, cursor: ss.Cursor, active: !revoked}
			if !revoked {
				x.eff = eff
				x.ready = !ss.Pending && ss.Cursor >= 0
			}
			subs = append(subs, x)
		}
	}
	// A hijacked connection keeps the server's read and write deadlines:
	// clear them, the socket has its own timeouts.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	rw := &refusalWriter{ResponseWriter: w, watch: &s.watch}
	conn, err := websocket.Accept(rw, r, &websocket.AcceptOptions{InsecureSkipVerify: len(h.opts.OriginPatterns) == 0,
		OriginPatterns: h.opts.OriginPatterns})
	if err != nil {
		p.unregister(s)
		h.releasePart(p)
		rw.answer() // a bad handshake or a refused Origin: the JSON error
		h.log.Debug("realtime upgrade failed", zap.String("partition", p.name), zap.String("client_id", s.clientID), zap.Error(err))
		return false
	}
	conn.SetReadLimit(h.opts.MaxRequestBytes + 1)
	s.conn = conn
	s.aconn.Store(conn)
	h.stats.accepted.Add(1)

	p.mu.Lock()
	if s.ctx.Err() != nil { // the hub is closing
		p.mu.Unlock()
		_ = conn.CloseNow()
		p.unregister(s)
		h.releasePart(p)
		return false
	}
	latest := max(st.Info.MaxCommitSeq, p.latest)
	p.latest = latest
	s.epoch, s.wire = st.Info.LogEpoch, st.WireVersion
	requiresSync := !st.Exists || st.Cursor < latest
	s.highest, s.checked = latest, latest
	s.live = !requiresSync
	if reg := s.pendingReg; reg != nil {
		// A round of this client was served while the socket connected:
		// its registration is newer than the client record read above.
		s.wire = reg.WireVersion
		if reg.Pulled {
			s.epoch, subs = reg.LogEpoch, registeredSubs(*reg)
			s.live = false // wake-ups until an ack: the pull's answer may still be on its way
			s.checked = min(s.checked, registeredFloor(*reg, s.checked))
		}
		s.pendingReg = nil
	}
	// A RefreshScopes call since this socket registered may have revoked
	// scopes its resolution above (or a round's) still holds: fail closed,
	// register nothing and have the client run a round (after hello).
	refreshed := p.refreshes != s.refreshSeen
	if refreshed {
		subs = nil
	}
	s.state = stateStarted
	hello := &ssp2.Hello{ProtocolVersion: 1, SessionID: s.id, ActorID: s.ident.ActorID, ClientID: s.clientID,
		Cursor: st.Cursor, LatestCursor: latest, RequiresSync: requiresSync, Timestamp: h.nowMs()}
	if b, err := ssp2.MarshalControl(hello); err == nil {
		s.enqueue(outMsg{typ: websocket.MessageText, data: b}, true)
	}
	p.register(s, subs) // after hello: the presence burst follows it
	if refreshed {
		s.wake(ssp2.WakeCatchupRequired, latest)
	}
	if s.live && s.behind(latest) || !s.live && s.checked < latest {
		p.kickFanout()
	}
	p.mu.Unlock()
	h.log.Debug("realtime socket connected", zap.String("partition", p.name), zap.String("client_id", s.clientID),
		zap.String("session_id", s.id), zap.Int64("cursor", st.Cursor), zap.Int64("latest_cursor", latest))
	if !h.spawn(s.readLoop) {
		s.finish() // the hub is closing
		return true
	}
	s.scheduleBeat()
	return true
}

// register replaces s's subscriptions and scope keys (presence follows:
// leave on keys it loses, the current set of keys it gains). Called with
// p.mu held.
func (p *part) register(s *session, subs []sub) {
	s.subs = subs
	s.groupKey = groupKey(subs)
	keys := map[string]struct{}{}
	schema := p.h.schema()
	for _, x := range subs {
		if !x.active || schema == nil {
			continue
		}
		t := schema.Table(x.table)
		if t == nil {
			continue
		}
		for v, vals := range x.eff {
			sv := t.ScopeVar(v)
			if sv == nil {
				continue
			}
			for _, val := range vals {
				keys[sv.Key(val)] = struct{}{}
			}
		}
	}
	for k := range s.keys {
		if _, ok := keys[k]; ok {
			continue
		}
		delete(p.keys[k], s)
		if len(p.keys[k]) == 0 {
			delete(p.keys, k)
		}
		p.presenceLeave(s, k)
	}
	old := s.keys
	s.keys = keys
	for k := range keys {
		if _, ok := old[k]; ok {
			continue
		}
		if p.keys[k] == nil {
			p.keys[k] = map[*session]struct{}{}
		}
		p.keys[k][s] = struct{}{}
		p.presenceBurst(s, k)
	}
}

// unregister removes s from the partition's indexes (presence: leave).
func (p *part) unregister(s *session) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.sessions[s]; !ok {
		s.state = stateClosed
		return
	}
	s.state = stateClosed
	delete(p.sessions, s)
	list := p.byClient[s.clientID]
	for i, x := range list {
		if x == s {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(p.byClient, s.clientID)
	} else {
		p.byClient[s.clientID] = list
	}
	for k := range s.keys {
		delete(p.keys[k], s)
		if len(p.keys[k]) == 0 {
			delete(p.keys, k)
		}
		p.presenceLeave(s, k)
	}
	s.keys = nil
}

func (h *Hub) schema() *schema.Schema {
	if e := h.eng.Load(); e != nil {
		return e.Schema()
	}
	return nil
}

// groupKey identifies a subscription set for delta sharing: the ready
// subscriptions with their effective scopes (cursors are added per build).
func groupKey(subs []sub) string {
	b := make([]byte, 0, 64)
	for _, x := range subs {
		if !x.ready {
			continue
		}
		b = append(b, x.id...)
		b = append(b, 0)
		b = append(b, x.table...)
		b = append(b, 0)
		vars := make([]string, 0, len(x.eff))
		for v := range x.eff {
			vars = append(vars, v)
		}
		sort.Strings(vars)
		for _, v := range vars {
			b = append(b, v...)
			b = append(b, 1)
			for _, val := range x.eff[v] {
				b = append(b, val...)
				b = append(b, 2)
			}
		}
		b = append(b, 3)
	}
	return string(b)
}

// Stats are the hub's counters.
type Stats struct {
	// Sockets is the number of open sockets; Partitions the partitions
	// they are on.
	Sockets    int `json:"sockets"`
	Partitions int `json:"partitions"`
	// Accepted counts upgrades; RefusedLimit upgrades refused at
	// MaxConnections, RefusedClient at MaxConnectionsPerClient and
	// RefusedActor at MaxConnectionsPerActor.
	Accepted      uint64 `json:"accepted"`
	RefusedLimit  uint64 `json:"refusedLimit"`
	RefusedClient uint64 `json:"refusedClient"`
	RefusedActor  uint64 `json:"refusedActor"`
	// Deltas counts deltas queued; DeltaBuilds the distinct deltas
	// encoded (one per subscription set and wire version).
	Deltas      uint64 `json:"deltas"`
	DeltaBuilds uint64 `json:"deltaBuilds"`
	// Wakes counts wake-ups by reason.
	Wakes map[string]uint64 `json:"wakes"`
	// Closed counts sockets closed by the server, by reason: "slow"
	// (send buffer full), "ping" (no pong), "protocol" (a violation),
	// "shutdown".
	Closed map[string]uint64 `json:"closed"`
	// Rounds counts socket rounds served; Presence presence events queued.
	Rounds   uint64 `json:"rounds"`
	Presence uint64 `json:"presence"`
	// RoundReaderWaits counts the times a socket round's answer waited
	// for the socket's reader to take bytes the client had sent (read
	// while you write, readwatch.go): control messages or a pipelined
	// request arriving while the answer was being written.
	RoundReaderWaits uint64 `json:"roundReaderWaits"`
}

type stats struct {
	accepted, refusedLimit, deltas, deltaBuilds, rounds, presence atomic.Uint64
	roundReaderWaits                                              atomic.Uint64
	refusedClient, refusedActor                                   atomic.Uint64
	wakeTooLarge, wakeCatchup, wakeReset                          atomic.Uint64
	closedSlow, closedPing, closedProtocol, closedShutdown        atomic.Uint64
}

// Stats returns the hub's counters.
func (h *Hub) Stats() Stats {
	h.mu.RLock()
	st := Stats{Sockets: h.sockets, Partitions: len(h.parts)}
	h.mu.RUnlock()
	s := &h.stats
	st.Accepted, st.RefusedLimit = s.accepted.Load(), s.refusedLimit.Load()
	st.RefusedClient, st.RefusedActor = s.refusedClient.Load(), s.refusedActor.Load()
	st.Deltas, st.DeltaBuilds, st.Rounds, st.Presence = s.deltas.Load(), s.deltaBuilds.Load(), s.rounds.Load(), s.presence.Load()
	st.RoundReaderWaits = s.roundReaderWaits.Load()
	st.Wakes = map[string]uint64{ssp2.WakeDeltaTooLarge: s.wakeTooLarge.Load(), ssp2.WakeCatchupRequired: s.wakeCatchup.Load(), ssp2.WakeResetRequired: s.wakeReset.Load()}
	st.Closed = map[string]uint64{"slow": s.closedSlow.Load(), "ping": s.closedPing.Load(), "protocol": s.closedProtocol.Load(), "shutdown": s.closedShutdown.Load()}
	return st
}

// SessionInfo describes one open socket (for tests and operators).
type SessionInfo struct {
	SessionID string `json:"sessionId"`
	ActorID   string `json:"actorId"`
	ClientID  string `json:"clientId"`
	// Keys are the scope keys it is registered on, sorted.
	Keys []string `json:"keys"`
	// Live reports that it gets deltas (not wake-ups).
	Live bool `json:"live"`
	// Queued is the number of messages in its send buffer.
	Queued int `json:"queued"`
}

// Sessions lists the open sockets of a partition.
func (h *Hub) Sessions(partitionName string) []SessionInfo {
	p := h.existing(partitionName)
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]SessionInfo, 0, len(p.sessions))
	for s := range p.sessions {
		if s.state != stateStarted {
			continue
		}
		si := SessionInfo{SessionID: s.id, ActorID: s.ident.ActorID, ClientID: s.clientID, Live: s.live}
		si.Queued, _ = s.queued()
		for k := range s.keys {
			si.Keys = append(si.Keys, k)
		}
		sort.Strings(si.Keys)
		out = append(out, si)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SessionID < out[j].SessionID })
	return out
}
