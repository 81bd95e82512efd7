package natssync

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
)

// Notification is the body of a commit notification: the partition and
// its highest durable commit seq. It is a hint to pull (as the realtime
// socket's wake-up), not the data: a subscriber that sees a seq above its
// cursor runs a sync request.
type Notification struct {
	Partition string `json:"partition"`
	Seq       int64  `json:"seq"`
}

// Notifier publishes a Notification on Subject(partition) after commits
// become durable: this process's pushes and, with engine.Config.Feed,
// commits other processes made to the shared store (in a cluster, the
// partition's owner sees all of its commits). Notifications coalesce: the
// engine's commit hook only records the partition's latest seq (it must
// not block the partition's actor), and Run publishes the latest seq of
// each partition that changed, so a burst of commits may be announced
// once, always with the last seq.
type Notifier struct {
	nc     *nats.Conn
	prefix string
	logger *zap.Logger

	mu      sync.Mutex
	pending map[string]int64 // partition -> latest seq not yet published
	wake    chan struct{}    // capacity 1: something is pending

	failed atomic.Int64
}

// NewNotifier returns a notifier publishing on nc under subject prefix
// (e.g. "synclane.commits"); logger may be nil.
func NewNotifier(nc *nats.Conn, prefix string, logger *zap.Logger) *Notifier {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Notifier{nc: nc, prefix: prefix, logger: logger, pending: map[string]int64{}, wake: make(chan struct{}, 1)}
}

// Hook sets cfg.OnCommit to record commits for the notifier, keeping an
// OnCommit already set (a realtime hub's) and calling it first. Call it
// before engine.New.
func (n *Notifier) Hook(cfg *engine.Config) {
	cfg.AddCommitHooks(engine.CommitHooks{OnCommit: n.note})
}

// Configure implements engine.Extension (it is Hook): list the notifier
// in engine.Config.Extensions and New installs it in the right order.
func (n *Notifier) Configure(cfg *engine.Config) { n.Hook(cfg) }

// Start implements engine.Extension; the notifier needs no engine (Run
// publishes what the hook records).
func (n *Notifier) Start(*engine.Engine) {}

// note records a commit; it never blocks.
func (n *Notifier) note(partition string, seq int64) {
	n.mu.Lock()
	if seq > n.pending[partition] {
		n.pending[partition] = seq
	}
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// Subject is the subject partition's notifications are published on: the
// prefix, a dot and the partition as one subject token (SubjectToken).
func (n *Notifier) Subject(partition string) string { return n.prefix + "." + SubjectToken(partition) }

// Failed counts the notifications NATS refused (for example with the
// connection closed); a reconnecting connection buffers them instead.
func (n *Notifier) Failed() int64 { return n.failed.Load() }

// Run publishes pending notifications until ctx ends, then publishes
// those still pending and returns. It is the notifier's only goroutine:
// the caller owns it.
func (n *Notifier) Run(ctx context.Context) {
	for {
		select {
		case <-n.wake:
			n.publish()
		case <-ctx.Done():
			n.publish()
			return
		}
	}
}

func (n *Notifier) publish() {
	n.mu.Lock()
	batch := n.pending
	n.pending = map[string]int64{}
	n.mu.Unlock()
	for p, seq := range batch {
		b, _ := json.Marshal(Notification{Partition: p, Seq: seq})
		if err := n.nc.Publish(n.Subject(p), b); err != nil {
			n.failed.Add(1)
			n.logger.Debug("commit notification not published", zap.String("partition", p), zap.Error(err))
		}
	}
}

// SubjectToken maps a partition name to one NATS subject token: bytes
// other than ASCII letters, digits, '-' and '_' are written %XX (so '.',
// '*', '>' and spaces cannot split or wildcard the subject); distinct
// names give distinct tokens.
func SubjectToken(partition string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(partition); i++ {
		c := partition[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	if b.Len() == 0 {
		return "%" // the empty partition (never served: identities are validated)
	}
	return b.String()
}
