// Package etcdmembers keeps a synclane cluster's membership in etcd: each
// member registers a key under a lease it keeps alive, and every member
// watches the keys to know who is alive. It implements cluster.Membership
// and is the only package linking the etcd client (go.etcd.io/etcd/client/v3);
// the engine and package cluster link none of it.
//
// # Keys
//
// A member's key is /synclane/<ClusterName>/members/<ID, path-escaped>; its
// value is the JSON of its cluster.Member ({"id", "incarnation",
// "startedAtMs"}); it is attached to the member's lease, so etcd deletes it
// when the lease is revoked (Leave) or expires (a member that crashed or lost
// etcd for longer than the lease TTL).
//
// # Health
//
// View.Healthy is true while the member's lease is known to be alive: from
// the moment a keepalive (or the grant) was sent, the lease lives at least
// the TTL etcd answered, so Healthy is true until that send time plus the
// TTL, and a timer turns it false (firing Changed) when no renewal came in
// time. Since the send time precedes the server's renewal, Healthy turns
// false before etcd can expire the lease and before any other member can see
// this one gone. A lost lease (expired, revoked, or the member's key
// deleted) is replaced by a new registration, retried with backoff until
// Close; Healthy is true again once it succeeds.
//
// # Watching
//
// The view follows a watch of the members' prefix. After a watch error
// (compaction, etcd losing its leader) the prefix is read again and watched
// from there. A registration whose revision is not above the revisions seen
// before means etcd's store was replaced (wiped, or restored from a
// snapshot): the prefix is read again too.
//
// # Duplicate IDs
//
// Two live processes advertising one URL are a misconfiguration. Join finds
// the key held by another incarnation and waits up to that lease's TTL (plus
// 1s) for it to go, as it does when this member's previous run crashed; a
// key still there after that is renewed by a live process, and Join fails
// with ErrDuplicateMember. A key holding this member's own Incarnation (a
// previous Membership of this same process start) is taken over at once.
package etcdmembers

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/synclane/synclane/engine/cluster"
)

// Defaults of Config.
const (
	// DefaultLeaseTTL is the lease TTL when Config.LeaseTTL is zero.
	DefaultLeaseTTL = 2 * time.Second
	// DefaultDialTimeout is the dial timeout when Config.DialTimeout is zero.
	DefaultDialTimeout = 3 * time.Second
)

// Retry pacing of the background loops (re-registration, re-watch).
const (
	minRetry = 100 * time.Millisecond
	maxRetry = 2 * time.Second
)

// ErrDuplicateMember is returned (wrapped, naming the member) by Join when
// another live process holds this member's ID.
var ErrDuplicateMember = errors.New("etcdmembers: another live process is registered with this member ID")

var clusterNamePattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// Config configures Join.
type Config struct {
	// Endpoints are the etcd client URLs (required).
	Endpoints []string
	// ClusterName names the cluster: its members' keys live under
	// /synclane/<ClusterName>/members/ (required, [A-Za-z0-9._-]{1,64}).
	ClusterName string
	// Self is this member. Self.ID is required: its advertise URL, an
	// absolute http or https URL. An empty Self.Incarnation is replaced by a
	// random one (a given one must be unique per process start); a zero
	// Self.StartedAtMs by the time of Join.
	Self cluster.Member
	// LeaseTTL is the TTL asked for the member's lease (default 2s). etcd
	// leases have whole seconds: the value is rounded up to whole seconds, at
	// least 1s. etcd may grant more than asked (its minimum is 1.5 election
	// timeouts: 1.5s, hence 2s, with etcd's default timings); the TTL granted
	// is the one Healthy and the keepalive pace use (Membership.LeaseTTL).
	LeaseTTL time.Duration
	// DialTimeout bounds every etcd request Join makes, the first one
	// included, so Join fails within it when etcd cannot be reached (default
	// 3s). Background requests use it too.
	DialTimeout time.Duration
	// Logger receives the membership's logs (fields "member", "cluster",
	// "lease", "error"), and the etcd client's errors; nil logs nothing.
	Logger *zap.Logger
	// Admit, when set, is called by Join before it registers this member
	// (once etcd answered), with a function reading the members
	// registered at each call, sorted by ID, this member's own ID left
	// out (a key a crashed run of it left behind). An error aborts Join
	// before anything is registered and is returned as it is. serve
	// checks its cluster secret against the live members with it.
	Admit func(ctx context.Context, registered func(context.Context) ([]cluster.Member, error)) error
}

// Membership is this process's registration in a cluster and its view of
// the cluster's members, kept up to date from etcd. Create it with Join;
// stop it with Leave (graceful) or Close.
type Membership struct {
	cfg    Config
	log    *zap.Logger
	cli    *clientv3.Client
	prefix string // /synclane/<cluster>/members/
	key    string // prefix + escaped Self.ID
	value  string // JSON of Self
	ttlReq int64  // seconds asked at each grant

	ctx     context.Context // the background loops' context, cancelled by Leave/Close
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	kick    chan struct{} // the watch saw this member's key deleted (buffered 1)
	rewatch chan struct{} // a registration saw the store's revision go backwards (buffered 1)

	mu            sync.Mutex
	members       map[string]cluster.Member // by key
	revision      int64
	lease         clientv3.LeaseID // 0 while unregistered
	ttl           time.Duration    // granted TTL of lease
	regRev        int64            // revision of this member's latest registration put
	seenRev       int64            // highest store revision seen in a response header
	keyDeletedRev int64            // revision of the latest deletion of this member's key
	healthyUntil  time.Time
	healthTimer   *time.Timer
	published     cluster.View
	changed       chan struct{}
	stopped       bool

	stopMu sync.Mutex // serializes Leave and Close
	closed bool
}

var _ cluster.Membership = (*Membership)(nil)

// normalize checks cfg and fills in its defaults.
func normalize(cfg Config) (Config, error) {
	if len(cfg.Endpoints) == 0 || slices.Contains(cfg.Endpoints, "") {
		return cfg, errors.New("etcdmembers: Endpoints are required (etcd client URLs, none empty)")
	}
	if !clusterNamePattern.MatchString(cfg.ClusterName) {
		return cfg, fmt.Errorf("etcdmembers: ClusterName %q: want 1 to 64 of [A-Za-z0-9._-]", cfg.ClusterName)
	}
	if cfg.Self.ID == "" {
		return cfg, errors.New("etcdmembers: Self.ID is required (the member's advertise URL)")
	}
	if u, err := url.Parse(cfg.Self.ID); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return cfg, fmt.Errorf("etcdmembers: Self.ID %q: want an absolute http or https URL (the member's advertise URL)", cfg.Self.ID)
	}
	switch {
	case cfg.LeaseTTL < 0:
		return cfg, fmt.Errorf("etcdmembers: LeaseTTL %v is negative", cfg.LeaseTTL)
	case cfg.LeaseTTL == 0:
		cfg.LeaseTTL = DefaultLeaseTTL
	case cfg.LeaseTTL < time.Second:
		cfg.LeaseTTL = time.Second
	}
	cfg.LeaseTTL = (cfg.LeaseTTL + time.Second - 1).Truncate(time.Second)
	switch {
	case cfg.DialTimeout < 0:
		return cfg, fmt.Errorf("etcdmembers: DialTimeout %v is negative", cfg.DialTimeout)
	case cfg.DialTimeout == 0:
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.Self.Incarnation == "" {
		cfg.Self.Incarnation = crand.Text() // 128 random bits
	}
	if cfg.Self.StartedAtMs == 0 {
		cfg.Self.StartedAtMs = time.Now().UnixMilli()
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	cfg.Endpoints = slices.Clone(cfg.Endpoints)
	return cfg, nil
}

// Join registers cfg.Self in the cluster and returns its Membership once the
// first view, this member in it, is loaded; the lease is then kept alive and
// the members watched until Leave or Close. It fails when etcd cannot be
// reached within cfg.DialTimeout, and with ErrDuplicateMember when another
// live process holds the ID (see the package doc). ctx bounds Join only.
func Join(ctx context.Context, cfg Config) (*Membership, error) {
	cfg, err := normalize(cfg)
	if err != nil {
		return nil, err
	}
	value, err := json.Marshal(cfg.Self)
	if err != nil {
		return nil, fmt.Errorf("etcdmembers: encode member: %w", err)
	}
	log := cfg.Logger.With(zap.String("member", cfg.Self.ID), zap.String("cluster", cfg.ClusterName))
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		// A dead connection is noticed by gRPC's pings (10s is gRPC's
		// minimum) besides the keepalive requests' own deadlines.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: cfg.DialTimeout,
		// Reconnect within a second of etcd coming back (gRPC's default
		// backoff grows to 2 minutes).
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: cfg.DialTimeout,
		})},
		// The client logs each retry as a warning; its errors are enough.
		Logger: cfg.Logger.Named("etcdclient").WithOptions(zap.IncreaseLevel(zap.ErrorLevel)),
	})
	if err != nil {
		return nil, fmt.Errorf("etcdmembers: etcd client for %v: %w", cfg.Endpoints, err)
	}
	prefix := "/synclane/" + cfg.ClusterName + "/members/"
	m := &Membership{
		cfg:     cfg,
		log:     log,
		cli:     cli,
		prefix:  prefix,
		key:     prefix + url.PathEscape(cfg.Self.ID),
		value:   string(value),
		ttlReq:  int64(cfg.LeaseTTL / time.Second),
		kick:    make(chan struct{}, 1),
		rewatch: make(chan struct{}, 1),
		members: map[string]cluster.Member{},
		changed: make(chan struct{}),
	}
	m.healthTimer = time.AfterFunc(time.Hour, m.healthCheck)
	m.healthTimer.Stop()
	m.ctx, m.cancel = context.WithCancel(context.Background())

	if cfg.Admit != nil {
		if err := cfg.Admit(ctx, m.registered); err != nil {
			m.abort()
			return nil, err
		}
	}
	if err := m.register(ctx); err != nil {
		m.abort()
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	resp, err := cli.Get(rctx, prefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		m.abort()
		return nil, fmt.Errorf("etcdmembers: read the members of %s: %w", cfg.ClusterName, err)
	}
	m.mu.Lock()
	m.replaceLocked(resp.Kvs, resp.Header.Revision)
	m.mu.Unlock()
	log.Info("joined the cluster", zap.String("lease", leaseString(m.currentLease())), zap.Int("members", len(m.View().Members)))

	m.wg.Add(2)
	go m.runLease()
	go m.runWatch(resp.Header.Revision)
	return m, nil
}

// registered reads the members registered now, sorted by ID, this one
// left out (Config.Admit).
func (m *Membership) registered(ctx context.Context) ([]cluster.Member, error) {
	rctx, cancel := context.WithTimeout(ctx, m.cfg.DialTimeout)
	defer cancel()
	resp, err := m.cli.Get(rctx, m.prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcdmembers: read the members of %s: %w", m.cfg.ClusterName, err)
	}
	var out []cluster.Member
	for _, kv := range resp.Kvs {
		if mem, ok := m.decode(kv); ok && string(kv.Key) != m.key {
			out = append(out, mem)
		}
	}
	slices.SortFunc(out, func(a, b cluster.Member) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// abort undoes a Join that failed after the client was made: revokes the
// lease if one was granted and closes the client.
func (m *Membership) abort() {
	m.cancel()
	m.healthTimer.Stop()
	if lease := m.currentLease(); lease != 0 {
		m.revokeQuiet(lease)
	}
	_ = m.cli.Close()
}

// Self returns this member as registered (with its Incarnation and
// StartedAtMs filled in).
func (m *Membership) Self() cluster.Member { return m.cfg.Self }

// LeaseTTL returns the TTL etcd granted to the current lease (the one asked,
// rounded up to seconds, before the first grant).
func (m *Membership) LeaseTTL() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ttl == 0 {
		return m.cfg.LeaseTTL
	}
	return m.ttl
}

// View returns the current view. Its Members are a copy the caller may keep.
// Healthy is computed at the call from the time of the last renewal, so it
// is false once the lease TTL has passed even if the timer announcing it has
// not fired yet. After Leave or Close the view stays as it was then, without
// this member and not Healthy.
func (m *Membership) View() cluster.View {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.published
	v.Members = slices.Clone(v.Members)
	v.Healthy = v.Healthy && m.healthyLocked(time.Now())
	return v
}

// Changed returns a channel that is closed at the next change of the view
// after the call: a member joining or going, or Healthy turning. A revision
// alone that changes neither does not count. After Leave or Close there is
// no next change: the channel returned then is never closed.
func (m *Membership) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// Leave leaves the cluster gracefully: it stops the keepalive and the watch,
// revokes the lease (the member's key disappears at once for every member)
// and closes the client. The revoke is bounded by ctx and DialTimeout; when
// it fails the key still expires after the TTL, and the error is returned.
// Leave and Close after Leave or Close do nothing and return nil.
func (m *Membership) Leave(ctx context.Context) error {
	m.stopMu.Lock()
	defer m.stopMu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	lease := m.stop()
	var err error
	if lease != 0 {
		rctx, cancel := context.WithTimeout(ctx, m.cfg.DialTimeout)
		_, err = m.cli.Revoke(rctx, lease)
		cancel()
		if err != nil {
			m.log.Warn("revoking the lease at leave failed; the key expires after the TTL", zap.String("lease", leaseString(lease)), zap.Error(err))
			err = fmt.Errorf("etcdmembers: leave %s: revoke lease %s: %w", m.cfg.ClusterName, leaseString(lease), err)
		} else {
			m.log.Info("left the cluster", zap.String("lease", leaseString(lease)))
		}
	}
	if cerr := m.cli.Close(); cerr != nil && !errors.Is(cerr, context.Canceled) {
		err = errors.Join(err, fmt.Errorf("etcdmembers: close the etcd client: %w", cerr))
	}
	return err
}

// Close stops the keepalive and the watch and closes the client without
// revoking the lease: the member's key expires after the TTL, as it would if
// the process had crashed. Close after Leave or Close does nothing and
// returns nil.
func (m *Membership) Close() error {
	m.stopMu.Lock()
	defer m.stopMu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	lease := m.stop()
	m.log.Info("closed without leaving; the key expires after the TTL", zap.String("lease", leaseString(lease)))
	if err := m.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("etcdmembers: close the etcd client: %w", err)
	}
	return nil
}

// stop ends the background loops and freezes the view (without self, not
// Healthy, announced through Changed). It returns the lease held.
func (m *Membership) stop() clientv3.LeaseID {
	m.cancel()
	m.wg.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	lease := m.lease
	m.lease = 0
	m.healthyUntil = time.Time{}
	delete(m.members, m.key)
	m.publishLocked()
	m.stopped = true
	m.healthTimer.Stop()
	return lease
}

// healthyLocked reports whether the lease is known alive at now.
func (m *Membership) healthyLocked(now time.Time) bool {
	return !m.stopped && m.lease != 0 && now.Before(m.healthyUntil)
}

// healthCheck runs on the health timer: it publishes Healthy turning false
// when the lease was not renewed in time.
func (m *Membership) healthCheck() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	if m.published.Healthy && !m.healthyLocked(time.Now()) {
		m.log.Warn("lease not renewed within its TTL: not healthy", zap.String("lease", leaseString(m.lease)))
	}
	m.publishLocked()
}

// publishLocked makes the view from the current state and, when its members
// or Healthy differ from the published one, publishes it and closes the
// Changed channel.
func (m *Membership) publishLocked() {
	if m.stopped {
		return
	}
	members := make([]cluster.Member, 0, len(m.members))
	for _, mem := range m.members {
		members = append(members, mem)
	}
	slices.SortFunc(members, func(a, b cluster.Member) int { return strings.Compare(a.ID, b.ID) })
	v := cluster.View{Members: members, Revision: m.revision, Healthy: m.healthyLocked(time.Now())}
	same := v.Healthy == m.published.Healthy && slices.Equal(v.Members, m.published.Members)
	m.published = v
	if !same {
		close(m.changed)
		m.changed = make(chan struct{})
	}
}

// currentLease returns the lease held (0 when unregistered).
func (m *Membership) currentLease() clientv3.LeaseID {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lease
}

// renewedLocked records that lease was alive when a request sent at sent
// answered ttl seconds, and re-arms the health timer.
func (m *Membership) renewedLocked(sent time.Time, ttlSeconds int64) {
	m.ttl = time.Duration(ttlSeconds) * time.Second
	m.healthyUntil = sent.Add(m.ttl)
	m.healthTimer.Reset(time.Until(m.healthyUntil))
	m.publishLocked()
}

// register grants a lease and puts this member's key under it, waiting for
// a key of another incarnation to go (see the package doc). On success the
// lease is the member's and Healthy is true.
func (m *Membership) register(ctx context.Context) error {
	for {
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, m.cfg.DialTimeout)
		g, err := m.cli.Grant(rctx, m.ttlReq)
		cancel()
		if err != nil {
			return fmt.Errorf("etcdmembers: grant a lease at %v (each request bounded by DialTimeout %v): %w", m.cfg.Endpoints, m.cfg.DialTimeout, err)
		}
		m.mu.Lock()
		seenBefore := m.seenRev // below the put's revision, in the same store
		m.mu.Unlock()
		ok, held, rev, err := m.claim(ctx, g.ID)
		if err != nil {
			m.revokeQuiet(g.ID)
			return err
		}
		if ok {
			m.mu.Lock()
			m.lease, m.regRev, m.keyDeletedRev = g.ID, rev, 0
			// A put's revision exceeds every revision committed before it:
			// one not above a revision seen before it was sent is from
			// another store.
			replaced := rev <= seenBefore
			if replaced {
				m.seenRev = rev
			}
			m.renewedLocked(sent, g.TTL)
			m.mu.Unlock()
			if replaced {
				select {
				case m.rewatch <- struct{}{}:
				default:
				}
			}
			if held != nil && held.Lease != 0 && clientv3.LeaseID(held.Lease) != g.ID {
				m.revokeQuiet(clientv3.LeaseID(held.Lease)) // our own previous registration
			}
			m.log.Info("registered", zap.String("lease", leaseString(g.ID)), zap.Int64("ttlSeconds", g.TTL))
			return nil
		}
		m.revokeQuiet(g.ID)
		if err := m.awaitRelease(ctx, held, rev); err != nil {
			return err
		}
	}
}

// claim puts this member's key under lease if the key is absent or holds
// this member's own incarnation. Otherwise it returns the key as found and
// the revision it was read at. rev is the revision of the put (or the read).
func (m *Membership) claim(ctx context.Context, lease clientv3.LeaseID) (ok bool, held *mvccpb.KeyValue, rev int64, err error) {
	put := clientv3.OpPut(m.key, m.value, clientv3.WithLease(lease))
	for {
		rctx, cancel := context.WithTimeout(ctx, m.cfg.DialTimeout)
		resp, err := m.cli.Txn(rctx).
			If(clientv3.Compare(clientv3.CreateRevision(m.key), "=", 0)).
			Then(put).
			Else(clientv3.OpGet(m.key)).
			Commit()
		cancel()
		if err != nil {
			return false, nil, 0, fmt.Errorf("etcdmembers: put the member key: %w", err)
		}
		if resp.Succeeded {
			return true, nil, resp.Header.Revision, nil
		}
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			continue // deleted between the compare and the get: impossible in one txn, but harmless
		}
		kv := kvs[0]
		var cur cluster.Member
		if json.Unmarshal(kv.Value, &cur) != nil || cur.ID != m.cfg.Self.ID || cur.Incarnation != m.cfg.Self.Incarnation {
			return false, kv, resp.Header.Revision, nil
		}
		rctx, cancel = context.WithTimeout(ctx, m.cfg.DialTimeout)
		resp, err = m.cli.Txn(rctx).
			If(clientv3.Compare(clientv3.ModRevision(m.key), "=", kv.ModRevision)).
			Then(put).
			Commit()
		cancel()
		if err != nil {
			return false, nil, 0, fmt.Errorf("etcdmembers: put the member key: %w", err)
		}
		if resp.Succeeded {
			return true, kv, resp.Header.Revision, nil
		}
	}
}

// awaitRelease waits for the key held (by another incarnation, as read at
// revision rev) to be deleted, for at most its lease's TTL plus 1s; then it
// returns ErrDuplicateMember. A key without a lease never goes: refused at
// once.
func (m *Membership) awaitRelease(ctx context.Context, held *mvccpb.KeyValue, rev int64) error {
	var other cluster.Member
	_ = json.Unmarshal(held.Value, &other)
	dup := func(why string) error {
		return fmt.Errorf("%w: member %s of cluster %s is held by incarnation %q (started at %s, lease %s) %s; two processes advertise one URL",
			ErrDuplicateMember, m.cfg.Self.ID, m.cfg.ClusterName, other.Incarnation,
			time.UnixMilli(other.StartedAtMs).UTC().Format(time.RFC3339), leaseString(clientv3.LeaseID(held.Lease)), why)
	}
	if held.Lease == 0 {
		return dup("under no lease (delete the key " + m.key + ")")
	}
	wait := m.cfg.LeaseTTL
	rctx, cancel := context.WithTimeout(ctx, m.cfg.DialTimeout)
	ttl, err := m.cli.TimeToLive(rctx, clientv3.LeaseID(held.Lease))
	cancel()
	if err == nil && ttl.GrantedTTL > 0 {
		wait = time.Duration(ttl.GrantedTTL) * time.Second
	}
	wait += time.Second
	m.log.Info("the member key is held by another incarnation; waiting for it to expire",
		zap.String("lease", leaseString(clientv3.LeaseID(held.Lease))), zap.String("incarnation", other.Incarnation), zap.Duration("wait", wait))

	wctx, wcancel := context.WithTimeout(ctx, wait)
	defer wcancel()
	for resp := range m.cli.Watch(wctx, m.key, clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			return fmt.Errorf("etcdmembers: watch the member key: %w", err)
		}
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return nil
			}
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("etcdmembers: waiting for member %s to expire: %w", m.cfg.Self.ID, ctx.Err())
	}
	return dup(fmt.Sprintf("and still alive after %v", wait))
}

// revokeQuiet revokes lease, logging a failure (the lease then expires).
func (m *Membership) revokeQuiet(lease clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.DialTimeout)
	defer cancel()
	if _, err := m.cli.Revoke(ctx, lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		m.log.Debug("revoke failed; the lease expires after its TTL", zap.String("lease", leaseString(lease)), zap.Error(err))
	}
}

// dropLease forgets lease (it is lost): Healthy turns false at once.
func (m *Membership) dropLease(lease clientv3.LeaseID, why string) {
	m.mu.Lock()
	if m.lease == lease {
		m.lease = 0
		m.healthyUntil = time.Time{}
		m.healthTimer.Stop()
		m.publishLocked()
	}
	m.mu.Unlock()
	m.log.Warn("registration lost; registering again", zap.String("lease", leaseString(lease)), zap.String("reason", why))
}

// runLease keeps the lease alive: a keepalive every third of the TTL
// (retried at once while failing), and a new registration, with backoff,
// when the lease is lost. It ends when the Membership stops.
func (m *Membership) runLease() {
	defer m.wg.Done()
	retry := minRetry
	next := time.Now()
	failing := false
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		lease := m.currentLease()
		if lease == 0 {
			err := m.register(m.ctx)
			if err == nil {
				retry, failing = minRetry, false
				next = time.Now().Add(m.LeaseTTL() / 3)
				continue
			}
			if m.ctx.Err() != nil {
				return
			}
			if errors.Is(err, ErrDuplicateMember) {
				m.log.Error("registering again refused: another process holds this member ID; retrying", zap.Error(err))
			} else {
				m.log.Warn("registering again failed; retrying", zap.Error(err), zap.Duration("retryIn", retry))
			}
			if !m.sleep(jitter(retry)) {
				return
			}
			retry = min(2*retry, maxRetry)
			continue
		}

		timer.Reset(time.Until(next))
		select {
		case <-m.ctx.Done():
			return
		case <-m.kick:
			m.mu.Lock()
			deleted := m.lease == lease && m.keyDeletedRev > m.regRev
			m.mu.Unlock()
			if deleted {
				m.dropLease(lease, "member key deleted")
				m.revokeQuiet(lease)
			}
			continue
		case <-timer.C:
		}

		ttl := m.LeaseTTL()
		sent := time.Now()
		actx, cancel := context.WithTimeout(m.ctx, ttl)
		resp, err := m.cli.KeepAliveOnce(actx, lease)
		cancel()
		switch {
		case err == nil:
			m.mu.Lock()
			if m.lease == lease {
				m.renewedLocked(sent, resp.TTL)
			}
			if resp.ResponseHeader != nil {
				m.seenRev = max(m.seenRev, resp.ResponseHeader.Revision)
			}
			m.mu.Unlock()
			if failing {
				m.log.Info("keepalive recovered", zap.String("lease", leaseString(lease)))
				failing = false
			}
			next = sent.Add(ttl / 3)
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			m.dropLease(lease, "lease expired or revoked")
		case m.ctx.Err() != nil:
			return
		default:
			if !failing {
				m.log.Warn("keepalive failed; retrying", zap.String("lease", leaseString(lease)), zap.Error(err))
				failing = true
			}
			next = time.Now().Add(minRetry)
		}
	}
}

// errStoreReplaced ends a watch when this member registered at a revision
// not above one seen before: etcd's store was replaced (wiped, or restored
// from a snapshot), and the watch waits for revisions that mean something
// else now. (A store replaced under a lease that survives it, as a restore
// can do, is not noticed this way: the view then follows the new store only
// once its revisions pass the old ones.)
var errStoreReplaced = errors.New("etcd's revision went backwards (store replaced)")

// runWatch follows the members' keys from revision rev+1; after a watch
// error (compaction, lost leader, a replaced store, ...) it reads the keys
// again and watches from there. It ends when the Membership stops.
func (m *Membership) runWatch(rev int64) {
	defer m.wg.Done()
	retry := minRetry
	for {
		werr := m.watch(rev, &retry)
		if m.ctx.Err() != nil {
			return
		}
		m.log.Warn("watch of the members ended; reading them again", zap.Error(werr))
		for {
			if !m.sleep(jitter(retry)) {
				return
			}
			retry = min(2*retry, maxRetry)
			rctx, cancel := context.WithTimeout(m.ctx, m.cfg.DialTimeout)
			resp, err := m.cli.Get(rctx, m.prefix, clientv3.WithPrefix())
			cancel()
			if err == nil {
				m.mu.Lock()
				m.replaceLocked(resp.Kvs, resp.Header.Revision)
				m.mu.Unlock()
				rev = resp.Header.Revision
				break
			}
			if m.ctx.Err() != nil {
				return
			}
			m.log.Warn("reading the members failed; retrying", zap.Error(err), zap.Duration("retryIn", retry))
		}
	}
}

// watch applies the changes after revision rev until the watch fails or
// the Membership stops, and returns why it ended.
func (m *Membership) watch(rev int64, retry *time.Duration) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(m.ctx))
	defer cancel()
	wch := m.cli.Watch(wctx, m.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for {
		select {
		case <-m.rewatch:
			return errStoreReplaced
		case resp, ok := <-wch:
			if !ok {
				return m.ctx.Err()
			}
			if err := resp.Err(); err != nil {
				return err
			}
			if len(resp.Events) > 0 {
				m.apply(resp.Events, resp.Header.Revision)
				*retry = minRetry
			}
		}
	}
}

// apply applies watch events to the members and publishes the result.
func (m *Membership) apply(events []*clientv3.Event, headerRev int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ev := range events {
		key := string(ev.Kv.Key)
		switch ev.Type {
		case clientv3.EventTypePut:
			if mem, ok := m.decode(ev.Kv); ok {
				m.members[key] = mem
			} else {
				delete(m.members, key)
			}
		case clientv3.EventTypeDelete:
			delete(m.members, key)
			if key == m.key {
				m.selfDeletedLocked(ev.Kv.ModRevision)
			}
		}
		m.revision = max(m.revision, ev.Kv.ModRevision)
	}
	m.seenRev = max(m.seenRev, headerRev)
	m.publishLocked()
}

// replaceLocked replaces the members by kvs, read at revision rev, and
// publishes the result.
func (m *Membership) replaceLocked(kvs []*mvccpb.KeyValue, rev int64) {
	m.members = make(map[string]cluster.Member, len(kvs))
	for _, kv := range kvs {
		if mem, ok := m.decode(kv); ok {
			m.members[string(kv.Key)] = mem
		}
	}
	m.revision = rev
	m.seenRev = rev
	if _, ok := m.members[m.key]; !ok {
		m.selfDeletedLocked(rev)
	}
	m.publishLocked()
}

// selfDeletedLocked notes that this member's key was gone at rev and tells
// the lease loop, which registers again if the deletion is newer than its
// registration.
func (m *Membership) selfDeletedLocked(rev int64) {
	if m.lease == 0 || rev <= m.regRev {
		return
	}
	m.keyDeletedRev = max(m.keyDeletedRev, rev)
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// decode reads a member record; a malformed one (or one whose key is not its
// ID's) is logged and left out.
func (m *Membership) decode(kv *mvccpb.KeyValue) (cluster.Member, bool) {
	var mem cluster.Member
	if err := json.Unmarshal(kv.Value, &mem); err != nil || mem.ID == "" || m.prefix+url.PathEscape(mem.ID) != string(kv.Key) {
		m.log.Warn("ignoring a malformed member record", zap.ByteString("key", kv.Key), zap.Error(err))
		return cluster.Member{}, false
	}
	return mem, true
}

// sleep waits d or until the Membership stops; false when it stopped.
func (m *Membership) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-m.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// jitter spreads d by ±20% so members retrying together do not stay in step.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// leaseString formats a lease ID as etcdctl prints it (hex).
func leaseString(id clientv3.LeaseID) string { return fmt.Sprintf("%x", int64(id)) }
