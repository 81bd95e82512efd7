package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/cluster"
	"github.com/synclane/synclane/engine/cluster/etcdmembers"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/transport/admin"
	"github.com/synclane/synclane/transport/peer"
)

// clusterConfig are the cluster flags (docs/cluster.md).
type clusterConfig struct {
	etcd, name, advertise, secretFile string
	peerProtocol                      string
	leaseTTL, moveTimeout, forwardTO  time.Duration
	unresponsiveTO                    time.Duration
}

func clusterFlags(fs *flag.FlagSet, c *clusterConfig) {
	fs.StringVar(&c.etcd, "cluster-etcd", "", "run as a member of a cluster: etcd client URLs, comma-separated (membership; needs --postgres, --cluster-secret)")
	fs.StringVar(&c.name, "cluster-name", "synclane", "the cluster's name: members of one cluster share it (etcd keys /synclane/<name>/members/)")
	fs.StringVar(&c.advertise, "cluster-advertise", "", "URL where the other members reach this one, e.g. http://10.0.0.5:8787 (default: http://<the bound --listen address>); it may be the ordinary listener: member calls use their own authenticated path /_cluster/")
	fs.StringVar(&c.secretFile, "cluster-secret", "", "file whose bytes (any, the same on every member) authenticate member-to-member calls")
	fs.DurationVar(&c.leaseTTL, "cluster-lease-ttl", 2*time.Second, "the membership lease: a member that stops renewing it (killed, paused, cut off) loses its partitions this long after its last renewal")
	fs.DurationVar(&c.moveTimeout, "cluster-move-timeout", 5*time.Second, "how long a request waits for its partition to have a reachable owner before it is answered 503 (retryable)")
	fs.DurationVar(&c.forwardTO, "cluster-forward-timeout", 35*time.Second, "how long a forwarded request waits for the answer of an owner that is alive (it answers its liveness probes) to start; past the engine's 30s storage turn")
	fs.DurationVar(&c.unresponsiveTO, "cluster-unresponsive-timeout", peer.DefaultUnresponsiveTimeout, "how long a member call waits for the callee to show it is alive (its answer starts, or it answers a liveness probe sent after half of it) before the callee counts as unreachable: the request is retried on the next view, or answered 503 past --cluster-move-timeout; also each member's time to answer the secret check at start")
	fs.StringVar(&c.peerProtocol, "cluster-peer-protocol", peer.ProtocolFrames, "how member calls travel: frames (one long-lived connection per member pair carrying every call as binary frames, the cheapest in CPU; HTTP/1.1 to a member that does not serve it), http1 (keep-alive HTTP/1.1 connections) or h2 (HTTP/2, h2c on http:// advertise URLs); every member serves all three")
}

var clusterNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// enabled reports whether cluster mode is on.
func (c *clusterConfig) enabled() bool { return c.etcd != "" }

// validate checks the cluster flags (given: the flags set).
func (c *clusterConfig) validate(given map[string]bool, postgresURL string) error {
	if !c.enabled() {
		for _, f := range []string{"cluster-name", "cluster-advertise", "cluster-secret", "cluster-lease-ttl", "cluster-move-timeout", "cluster-forward-timeout", "cluster-unresponsive-timeout", "cluster-peer-protocol"} {
			if given[f] {
				return fmt.Errorf("--%s needs --cluster-etcd", f)
			}
		}
		return nil
	}
	if postgresURL == "" {
		return errors.New("--cluster-etcd needs --postgres: the members share one PostgreSQL database, where every write is fenced (embedded SQLite is one process's)")
	}
	if c.secretFile == "" {
		return errors.New("--cluster-etcd needs --cluster-secret FILE: member-to-member calls must be authenticated")
	}
	if !clusterNameRE.MatchString(c.name) {
		return fmt.Errorf("--cluster-name %q: want 1 to 64 of A-Z a-z 0-9 . _ -", c.name)
	}
	for _, e := range c.endpoints() {
		if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--cluster-etcd: %q is not an http(s) URL", e)
		}
	}
	if c.advertise != "" {
		if u, err := url.Parse(c.advertise); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return fmt.Errorf("--cluster-advertise %q: want http(s)://host:port", c.advertise)
		}
	}
	if c.leaseTTL < time.Second {
		return errors.New("--cluster-lease-ttl must be at least 1s (etcd leases count whole seconds)")
	}
	if c.peerProtocol != peer.ProtocolFrames && c.peerProtocol != peer.ProtocolHTTP1 && c.peerProtocol != peer.ProtocolH2 {
		return fmt.Errorf("--cluster-peer-protocol %q: want %s, %s or %s", c.peerProtocol, peer.ProtocolFrames, peer.ProtocolHTTP1, peer.ProtocolH2)
	}
	if c.moveTimeout <= 0 || c.forwardTO <= 0 || c.unresponsiveTO <= 0 {
		return errors.New("--cluster-move-timeout, --cluster-forward-timeout and --cluster-unresponsive-timeout must be positive")
	}
	return nil
}

func (c *clusterConfig) endpoints() []string {
	var out []string
	for _, e := range strings.Split(c.etcd, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// member is this process's cluster membership: its etcd registration and
// the peer client, ready for engine.Config.Cluster.
type member struct {
	self    string
	members *etcdmembers.Membership
	peers   *peer.Client
	secret  peer.Secret

	leaveOnce sync.Once
}

// joinCluster reads the secret and registers this member (advertise:
// --cluster-advertise, else the bound listener's URL). etcd unreachable
// within its dial timeout: an error (serve refuses to start).
func joinCluster(ctx context.Context, c clusterConfig, bound string, log *zap.Logger) (*member, error) {
	key, err := os.ReadFile(c.secretFile)
	if err != nil {
		return nil, fmt.Errorf("--cluster-secret: %w", err)
	}
	secret, err := peer.NewSecret(key)
	if err != nil {
		return nil, fmt.Errorf("--cluster-secret %s: %w", c.secretFile, err)
	}
	self := strings.TrimRight(c.advertise, "/")
	if self == "" {
		self = bound
	}
	inc, err := randomHex(8)
	if err != nil {
		return nil, err
	}
	peers, err := peer.NewClient(peer.ClientOptions{Self: self, Secret: secret, Timeout: c.forwardTO, UnresponsiveTimeout: c.unresponsiveTO,
		Protocol: c.peerProtocol, Logger: log.Named("peer")})
	if err != nil {
		return nil, err
	}
	ms, err := etcdmembers.Join(ctx, etcdmembers.Config{Endpoints: c.endpoints(), ClusterName: c.name,
		Self:     cluster.Member{ID: self, Incarnation: inc, StartedAtMs: time.Now().UnixMilli()},
		LeaseTTL: c.leaseTTL, Logger: log.Named("cluster"),
		Admit: secretCheck(peers, c.unresponsiveTO, c.leaseTTL+c.unresponsiveTO, log.Named("cluster"))})
	if errors.Is(err, errJoinRefused) {
		peers.Close()
		return nil, fmt.Errorf("cluster %q: %w", c.name, err)
	}
	if err != nil {
		peers.Close()
		return nil, fmt.Errorf("join cluster %q through etcd %s: %w", c.name, c.etcd, err)
	}
	m := &member{self: self, members: ms, secret: secret, peers: peers}
	log.Info("joined the cluster", zap.String("cluster", c.name), zap.String("member", self), zap.Int("members", len(ms.View().Members)))
	return m, nil
}

// errJoinRefused is wrapped by joinCluster's error when the secret check
// refused this member (serve exits 1 and prints it).
var errJoinRefused = errors.New("refused to join the cluster")

// secretCheckRetry paces the secret check's rounds while no registered
// member answers.
const secretCheckRetry = 250 * time.Millisecond

// secretCheck is the etcdmembers.Config.Admit of a starting member: it
// sends every registered member a signed probe (peer.Client.Probe, each
// within probeTimeout, all at once) before this member registers, so a
// member that cannot call the others (another cluster secret, or a clock
// more than peer.MaxClockSkew off) is never placed as an owner:
//   - a member refusing the signature stops the start (errJoinRefused,
//     naming it and the reason);
//   - members that do not answer are skipped with a warning when another
//     accepted the signature;
//   - when none answered, the members are read and probed again, every
//     secretCheckRetry, for up to wait (the lease TTL plus one probe: the
//     key of a member that crashed expires within its lease); then the
//     start is refused;
//   - no member registered: the first member, nothing to check.
func secretCheck(peers *peer.Client, probeTimeout, wait time.Duration, log *zap.Logger) func(context.Context, func(context.Context) ([]cluster.Member, error)) error {
	return func(ctx context.Context, registered func(context.Context) ([]cluster.Member, error)) error {
		deadline := time.Now().Add(wait)
		for {
			ms, err := registered(ctx)
			if err != nil {
				return err
			}
			if len(ms) == 0 {
				log.Info("no member is registered: this is the first, there is no cluster secret to check against")
				return nil
			}
			errs := make([]error, len(ms))
			var wg sync.WaitGroup
			for i, mb := range ms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					pctx, cancel := context.WithTimeout(ctx, probeTimeout)
					defer cancel()
					errs[i] = peers.Probe(pctx, mb.ID)
				}()
			}
			wg.Wait()
			var accepted, silent []string
			for i, err := range errs {
				switch {
				case errors.Is(err, peer.ErrClockSkew):
					return fmt.Errorf("%w: this member's clock is more than %v from member %s's (its signature was refused): %w", errJoinRefused, peer.MaxClockSkew, ms[i].ID, err)
				case errors.Is(err, peer.ErrRefused):
					return fmt.Errorf("%w: the cluster secret differs from member %s's (it refused this member's signature): %w", errJoinRefused, ms[i].ID, err)
				case err == nil:
					accepted = append(accepted, ms[i].ID)
				default:
					silent = append(silent, ms[i].ID)
				}
			}
			if len(accepted) > 0 {
				for i, err := range errs {
					if err != nil {
						log.Warn("a registered member did not answer the cluster secret check; skipped (the others accepted this member's signature)",
							zap.String("peer", ms[i].ID), zap.Error(err))
					}
				}
				log.Info("cluster secret checked: the registered members accept this member's signature", zap.Strings("accepted", accepted), zap.Strings("not_answering", silent))
				return nil
			}
			if !time.Now().Before(deadline) {
				return fmt.Errorf("%w: none of the %d registered members answered the cluster secret check within %v (%v): %w", errJoinRefused, len(ms), wait, silent, errors.Join(errs...))
			}
			t := time.NewTimer(secretCheckRetry)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
	}
}

// engineConfig is engine.Config.Cluster for this member.
func (m *member) engineConfig(c clusterConfig) *engine.ClusterConfig {
	return &engine.ClusterConfig{Self: m.self, Membership: m.members, Peers: m.peers, MoveTimeout: c.moveTimeout}
}

// leave revokes the membership lease (the others move this member's
// partitions at once); later calls do nothing.
func (m *member) leave(log *zap.Logger) {
	m.leaveOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := m.members.Leave(ctx); err != nil {
			log.Warn("leaving the cluster failed; the others notice when the lease expires", zap.Error(err))
		}
	})
}

// close ends the membership (without leaving, when leave did not run: the
// lease then expires) and the peer client.
func (m *member) close() {
	_ = m.members.Close()
	m.peers.Close()
}

// clusterView is GET /api/cluster: the members as this one sees them,
// each member's counters (asked over the member route, concurrently, 2 s
// each), and with ?partition= the partition's owner.
func (m *member) clusterView(ctx context.Context, eng *engine.Engine, partition string) (any, error) {
	return admin.BuildClusterView(ctx, eng, partition, m.peers.Member), nil
}

// randomHex returns n random bytes as hex.
func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// clusterEvents is GET /api/cluster/events: every member's most recent
// events (at most limit each, default 100, through the member route, 2 s
// each), merged newest first, each tagged with its member; members that
// did not answer are listed under "unreachable".
func (m *member) clusterEvents(ctx context.Context, eng *engine.Engine, limit int) (any, error) {
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	st, _ := eng.ClusterStats()
	type tagged struct {
		Member string `json:"member"`
		events.Event
	}
	var (
		mu          sync.Mutex
		all         []tagged
		unreachable = []string{}
		wg          sync.WaitGroup
	)
	for _, mb := range st.Members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var evs []events.Event
			var err error
			if mb.ID == m.self {
				if ring := eng.Events(); ring != nil {
					evs = ring.Recent(0, limit)
				}
			} else {
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				evs, err = m.peers.Events(cctx, mb.ID, 0, limit)
				cancel()
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				unreachable = append(unreachable, mb.ID)
				return
			}
			for _, ev := range evs {
				all = append(all, tagged{Member: mb.ID, Event: ev})
			}
		}()
	}
	wg.Wait()
	sort.Slice(all, func(i, j int) bool { return all[i].At.After(all[j].At) })
	return map[string]any{"items": all, "unreachable": unreachable}, nil
}
