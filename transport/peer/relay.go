package peer

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/cluster"
	"github.com/synclane/synclane/transport/realtime"
)

// HubSink is the local realtime hub, as the relay feeds it (*realtime.Hub
// satisfies it): the owner's commit hooks, relayed, and the other
// members' presence. The relay calls it from one goroutine, never with a
// lock of its own held; each call must not block.
type HubSink interface {
	OnCommit(partition string, maxSeq int64)
	OnCommitKeys(partition string, commits []engine.CommitKeys)
	OnCommitOutcome(partition string, durable bool)
	OnRegistration(partition string, r engine.Registration)
	RemotePresence(partition, origin string, ev realtime.PresenceEvent)
	DropRemotePresence(partition, origin string)
}

var _ HubSink = (*realtime.Hub)(nil)

// Defaults of RelayLimits.
const (
	DefaultQueueMessages        = 4096
	DefaultQueueBytes           = 4 << 20
	DefaultMessageBytes         = 1 << 20
	DefaultFollowsPerLink       = 65_536
	DefaultPresencePerPartition = 65_536
	// maxSeqWorkers read the partitions' newest seqs that follow answers
	// and ownership moves need, at most this many at once.
	maxSeqWorkers = 4
)

// RelayLimits bound a relay; zero fields take the defaults.
type RelayLimits struct {
	// QueueMessages and QueueBytes bound a link's send queue of live
	// messages (relayed hooks and presence changes: 4,096 messages, 4 MiB;
	// QueueBytes is raised to MessageBytes). A live message that does not
	// fit closes the link: a follower that is not keeping up is cut off,
	// re-dials (backoff) and starts over: its follows are answered again,
	// with the owner's presence snapshot and the newest seq, so its
	// sockets miss no commit for good (they are woken, or get deltas,
	// from that seq). The messages of a resync (follows, follow answers
	// and their snapshots, the leaves of a follower's entries) are queued
	// apart from the bound: their number follows state that is bounded
	// already (FollowsPerLink, PresencePerPartition). A reader stops
	// reading while its relay has QueueMessages messages not yet handled
	// (the sender's queue then fills).
	QueueMessages, QueueBytes int
	// MessageBytes is the largest message read from a link (a larger one
	// closes it) or sent (a larger one is dropped and logged): 1 MiB, at
	// least twice PresenceBytes plus 64 KiB.
	MessageBytes int64
	// FollowsPerLink caps the partitions one follower follows here; a
	// follow beyond it is refused (OpRefused).
	FollowsPerLink int
	// PresencePerPartition caps the followers' presence entries this
	// member keeps as a partition's owner; a join beyond it is dropped.
	PresencePerPartition int
	// PresenceBytes is the largest presence document taken from a
	// follower (realtime.DefaultMaxPresenceBytes; set it to the hubs'
	// MaxPresenceBytes).
	PresenceBytes int
}

func (l *RelayLimits) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.QueueMessages, DefaultQueueMessages)
	def(&l.QueueBytes, DefaultQueueBytes)
	def(&l.FollowsPerLink, DefaultFollowsPerLink)
	def(&l.PresencePerPartition, DefaultPresencePerPartition)
	def(&l.PresenceBytes, realtime.DefaultMaxPresenceBytes)
	if l.MessageBytes <= 0 {
		l.MessageBytes = DefaultMessageBytes
	}
	l.MessageBytes = max(l.MessageBytes, 2*int64(l.PresenceBytes)+64<<10)
	l.QueueBytes = max(l.QueueBytes, int(l.MessageBytes))
}

// RelayConfig configures a Relay.
type RelayConfig struct {
	// Self is this member's ID (its advertise URL).
	Self string
	// Membership gives the views of the live members; each partition is
	// followed at cluster.Owner of the current view.
	Membership cluster.Membership
	// Secret signs the links this member dials and checks the ones it
	// serves.
	Secret Secret
	// Hub is the local realtime hub (or set it with SetHub: the hub is
	// made with the relay in its Options, so one of them comes first).
	Hub HubSink
	// MaxSeq returns a partition's newest commit seq, read from storage
	// (no partition actor): the owner answers each follow with it, and a
	// member that becomes a partition's owner tells its hub.
	MaxSeq func(ctx context.Context, partition string) (int64, error)
	// HTTPClient dials the follow links (default http.DefaultClient).
	HTTPClient *http.Client
	// Logger receives the relay's logs (default: no-op); every line
	// carries "member" (Self), and "partition", "peer", "error" where
	// they apply.
	Logger *zap.Logger
	// Limits bound the relay (zero: the defaults).
	Limits RelayLimits
}

// Relay carries realtime traffic between the members of a cluster: it
// implements realtime.ClusterRelay for the local hub (Options.Cluster),
// serves the follow links of the members that follow partitions this
// member owns (ServeHTTP, at FollowPath) and dials the links to the
// owners of the partitions the hub holds sockets of.
//
// As a follower, for each partition the hub follows it keeps the
// partition followed at its owner in the current view (one link per
// owner member, re-dialed with backoff while it has partitions to
// follow), delivers what the owner relays to the hub, and sends its
// sockets' presence to the owner. On a view change it moves each follow
// whose owner changed: the hub's remote presence of the partition is
// dropped (leaves), the local presence is published at the new owner,
// whose answer brings its presence and newest seq (delivered as OnCommit:
// commits made during the move wake the sockets). A partition the member
// owns itself needs no link: the engine's hooks reach the hub.
//
// As an owner, it relays its commit hooks (Hooks) and its hub's presence
// to the followers of each partition, and each follower's presence to
// its hub and the other followers; a follower's entries leave when it
// unfollows or its link ends.
//
// Start runs it; Close stops every goroutine it started and waits for
// them.
type Relay struct {
	cfg  RelayConfig
	lim  RelayLimits
	self string
	log  *zap.Logger

	ctx    context.Context // ends at Close
	cancel context.CancelFunc

	// gmu orders goroutine starts before Close's Wait.
	gmu     sync.Mutex
	started bool
	stopped bool
	wg      sync.WaitGroup

	box  *inbox
	seqs *seqQueue

	// nfollowers counts (partition, follower) pairs: the commit hooks'
	// fast path when nobody follows anything here.
	nfollowers atomic.Int64

	stats relayStats

	st state // owned by the loop goroutine
}

// NewRelay returns a relay; it dials and serves nothing until Start.
func NewRelay(cfg RelayConfig) *Relay {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = http.DefaultClient
	}
	cfg.Limits.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	r := &Relay{cfg: cfg, lim: cfg.Limits, self: cfg.Self, log: cfg.Logger.With(zap.String("member", cfg.Self)),
		ctx: ctx, cancel: cancel}
	r.box = newInbox(r.lim.QueueMessages)
	r.seqs = newSeqQueue()
	r.st.init()
	return r
}

// SetHub sets RelayConfig.Hub; call it before Start (the hub takes the
// relay in realtime.Options.Cluster, so it is made after the relay).
func (r *Relay) SetHub(h HubSink) { r.cfg.Hub = h }

// Start starts the relay's loop, its view watcher and its storage
// readers; follows and presence reported before are handled then. It
// panics without a hub (RelayConfig.Hub or SetHub).
func (r *Relay) Start() {
	if r.cfg.Hub == nil {
		panic("peer: Relay started without a hub")
	}
	r.gmu.Lock()
	if r.started || r.stopped {
		r.gmu.Unlock()
		return
	}
	r.started = true
	r.gmu.Unlock()
	r.spawn(r.loop)
	r.spawn(r.watch)
	for range maxSeqWorkers {
		r.spawn(r.seqWorker)
	}
}

// Close closes every link and waits for every goroutine the relay
// started (ServeHTTP's included). The hub is not told: it is closing too.
func (r *Relay) Close() {
	r.gmu.Lock()
	r.stopped = true
	r.gmu.Unlock()
	r.cancel()
	r.box.close()
	r.wg.Wait()
}

// spawn runs fn on a goroutine Close waits for; false (fn not run) once
// the relay is closing.
func (r *Relay) spawn(fn func()) bool {
	if !r.enter() {
		return false
	}
	go func() {
		defer r.wg.Done()
		fn()
	}()
	return true
}

// enter counts the calling goroutine as one of the relay's (the caller
// runs r.wg.Done when it ends); false before Start and once closing.
func (r *Relay) enter() bool {
	r.gmu.Lock()
	defer r.gmu.Unlock()
	if !r.started || r.stopped {
		return false
	}
	r.wg.Add(1)
	return true
}

// Follow implements realtime.ClusterRelay: the hub holds sockets of
// partition. It never blocks.
func (r *Relay) Follow(partition string) { r.box.push(func() { r.follow(partition) }) }

// Unfollow implements realtime.ClusterRelay: the hub no longer holds
// sockets of partition. It never blocks.
func (r *Relay) Unfollow(partition string) { r.box.push(func() { r.unfollow(partition) }) }

// Presence implements realtime.ClusterRelay: a local socket's presence
// changed. It never blocks.
func (r *Relay) Presence(partition string, ev realtime.PresenceEvent) {
	r.box.push(func() { r.localPresence(partition, ev) })
}

// Hooks sets cfg's OnCommit, OnCommitKeys, OnCommitOutcome and
// OnRegistration so that they also relay, in order, to the members
// following the partition here, keeping (and still calling first) any
// already set (as realtime.Hub.Hooks does). They never block; with no
// follower at all they cost an atomic load.
func (r *Relay) Hooks(cfg *engine.Config) {
	// send queues a relay of m to the loop, when anyone follows at all.
	send := func(m func() *message) {
		if r.nfollowers.Load() > 0 {
			r.box.push(func() { r.relay(m()) })
		}
	}
	cfg.AddCommitHooks(engine.CommitHooks{
		OnCommit: func(p string, seq int64) {
			send(func() *message { return &message{Op: OpCommit, P: p, Seq: &seq} })
		},
		OnCommitKeys: func(p string, commits []engine.CommitKeys) {
			send(func() *message { return &message{Op: OpKeys, P: p, Commits: toWireKeys(commits)} })
		},
		OnCommitOutcome: func(p string, durable bool) {
			send(func() *message { return &message{Op: OpOutcome, P: p, Durable: &durable} })
		},
		OnRegistration: func(p string, reg engine.Registration) {
			send(func() *message { return &message{Op: OpRegistration, P: p, Reg: toWireRegistration(reg)} })
		},
	})
}

// watch hands every view of the membership to the loop.
func (r *Relay) watch() {
	for {
		changed := r.cfg.Membership.Changed()
		v := r.cfg.Membership.View()
		r.box.push(func() { r.onView(v) })
		select {
		case <-changed:
		case <-r.ctx.Done():
			return
		}
	}
}

// loop runs the inbox's tasks, one at a time, until Close.
func (r *Relay) loop() {
	for {
		tasks := r.box.take(r.ctx)
		if tasks == nil {
			return
		}
		for i, t := range tasks {
			t()
			tasks[i] = nil
		}
		r.publishCounts()
	}
}

// RelayStats are a relay's counters.
type RelayStats struct {
	// OutLinks are the links up to owners; InLinks the followers' links
	// served.
	OutLinks, InLinks int
	// Followed is the number of partitions the hub holds sockets of;
	// FollowedRemote those of them followed at another member (answered).
	Followed, FollowedRemote int
	// Followers counts the (partition, follower) pairs served as owner.
	Followers int
	// Sent and Received count messages written to and read from links;
	// Dropped counts messages not delivered (a link down or full, a
	// message over a limit, presence beyond PresencePerPartition).
	Sent, Received, Dropped uint64
	// Overflows counts links closed on a full send queue; Dials the links
	// dialed and DialFailures those that failed.
	Overflows, Dials, DialFailures uint64
}

type relayStats struct {
	outLinks, inLinks                   atomic.Int64
	followed, followedRemote, followers atomic.Int64
	sent, received, dropped             atomic.Uint64
	overflows, dials, dialFailures      atomic.Uint64
}

// Stats returns the relay's counters.
func (r *Relay) Stats() RelayStats {
	s := &r.stats
	return RelayStats{OutLinks: int(s.outLinks.Load()), InLinks: int(s.inLinks.Load()),
		Followed: int(s.followed.Load()), FollowedRemote: int(s.followedRemote.Load()), Followers: int(s.followers.Load()),
		Sent: s.sent.Load(), Received: s.received.Load(), Dropped: s.dropped.Load(),
		Overflows: s.overflows.Load(), Dials: s.dials.Load(), DialFailures: s.dialFailures.Load()}
}
