package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine/cluster"
	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/opwire"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// ClusterConfig turns on cluster mode (Config.Cluster): the members of a
// cluster share one store with the Ownership role (PostgreSQL), and each
// partition has one owner at a time, the member cluster.Owner picks over
// the live members. A request for a partition this member does not own is
// forwarded to its owner through Peers (the SSP2 bytes and the
// authenticated identity); the owner runs it as a local request. Every
// partition actor claims the partition's ownership generation when it
// starts and every write it makes is fenced with it, so a deposed owner
// (its member left, paused past its lease, or was cut off) can never
// commit: its transaction fails, the request is retried on the new owner,
// and idempotency keeps a retried push from applying twice.
type ClusterConfig struct {
	// Self is this member's ID (its advertise URL) as registered in
	// Membership.
	Self string
	// Membership gives the live members (engine/cluster/etcdmembers).
	Membership cluster.Membership
	// Peers calls the other members (transport/peer.Client).
	Peers Peers
	// MoveTimeout bounds how long a request waits for its partition to
	// have a reachable owner (its owner left and membership has not
	// noticed yet, the owner refused it as no longer its own, this
	// member's lease is not known alive and the database records another
	// owner it cannot reach): past it the request is
	// answered unavailable, HTTP 503 with Retry-After (a sync.internal_error,
	// retryable, retryLater, details.reason "partition_moving"). Default 5s.
	MoveTimeout time.Duration
}

// Peers is how a member reaches another (implemented by package
// transport/peer). Each call goes to member to (its ID, the advertise URL)
// and runs there as a local call of that member's engine (the *Owned
// methods). An error wrapping ErrNotOwner means the callee does not own
// the partition by its own view; one wrapping ErrPeerUnreachable means no
// answer came (dial failure, connection lost or timeout before the reply
// started): the engine retries both on the owner of its next view. Any
// other error is the callee's answer, returned to the client as is.
type Peers interface {
	// Sync sends an encoded SSP2 request for id and returns the owner's
	// SSP2 response as it streams (the caller closes it). When the body
	// has a Size() int64 method reporting its whole length (>= 0: the
	// owner finished the answer before sending it), the answer is handed
	// to the client whole, as a local one is; otherwise it streams.
	Sync(ctx context.Context, to string, id Identity, request []byte) (io.ReadCloser, error)
	// ClientState, BuildDeltas and Ack are the realtime calls.
	ClientState(ctx context.Context, to string, id Identity, clientID string) (ClientState, error)
	BuildDeltas(ctx context.Context, to string, partition string, req DeltaRequest) (*DeltaResult, error)
	Ack(ctx context.Context, to string, partition string, acks []Ack) error
}

// ErrNotOwner is what an *Owned call returns (wrapped) when this member
// does not own the partition by its current view, or has just lost it:
// the caller retries on the owner of its next view.
var ErrNotOwner = errors.New("engine: this member does not own the partition")

// ErrPeerUnreachable is what Peers wraps when a member gave no answer.
var ErrPeerUnreachable = errors.New("engine: the owning member did not answer")

// errMemberUnhealthy: this member's own registration is not known alive
// and it could not resume the partition (ownedElsewhereError).
var errMemberUnhealthy = errors.New("engine: this member's cluster lease is not known alive")

// errNoMembers: the view has no member to own the partition.
var errNoMembers = errors.New("engine: the cluster view has no live member")

// ClusterStats are a member's cluster counters (Engine.ClusterStats).
type ClusterStats struct {
	// Self is this member's ID; Members the current view's members.
	Self    string           `json:"self"`
	Members []cluster.Member `json:"members"`
	// Healthy is the view's Healthy; Leaving reports Handoff was called.
	Healthy bool `json:"healthy"`
	Leaving bool `json:"leaving"`
	// Forwarded counts requests this member forwarded to an owner, by
	// call (sync, clientState, deltas, ack, operation); Served counts the calls it
	// served for other members.
	Forwarded map[string]uint64 `json:"forwarded"`
	Served    map[string]uint64 `json:"served"`
	// Retries counts routing attempts repeated after a moved or
	// unreachable owner; Unavailable the requests answered unavailable
	// after MoveTimeout; OwnershipLost the local writes refused by the
	// fence; Evictions the actors stopped because their partition moved.
	Retries       uint64 `json:"retries"`
	Unavailable   uint64 `json:"unavailable"`
	OwnershipLost uint64 `json:"ownershipLost"`
	Evictions     uint64 `json:"evictions"`
}

// clusterState is the engine's cluster mode (nil in single-process
// mode).
type clusterState struct {
	cfg     ClusterConfig
	e       *Engine
	leaving atomic.Bool

	// members holds a context per member of the last view, cancelled when
	// the member leaves it: forwarded calls to it end at once instead of
	// waiting for a timeout (a paused or cut-off owner).
	mu      sync.Mutex
	members map[string]memberCtx

	forwarded, served                              [numCalls]atomic.Uint64
	retries, unavailable, ownershipLost, evictions atomic.Uint64

	stop chan struct{}
	done chan struct{}
}

type memberCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// The routed calls, indexing the counters.
const (
	callSync = iota
	callClientState
	callDeltas
	callAck
	callOperation
	numCalls
)

var callNames = [numCalls]string{"sync", "clientState", "deltas", "ack", "operation"}

func newClusterState(e *Engine, cfg ClusterConfig) (*clusterState, error) {
	if cfg.Self == "" || cfg.Membership == nil || cfg.Peers == nil {
		return nil, errors.New("engine: Cluster needs Self, Membership and Peers")
	}
	if cfg.MoveTimeout <= 0 {
		cfg.MoveTimeout = 5 * time.Second
	}
	c := &clusterState{cfg: cfg, e: e, members: map[string]memberCtx{}, stop: make(chan struct{}), done: make(chan struct{})}
	c.refresh(cfg.Membership.View())
	return c, nil
}

// start runs the view watcher until close.
func (c *clusterState) start() { go c.watch() }

func (c *clusterState) close() {
	close(c.stop)
	<-c.done
	c.mu.Lock()
	for _, m := range c.members {
		m.cancel()
	}
	c.mu.Unlock()
}

// watch follows the membership: each new view cancels the calls to
// members that left it and evicts the actors of partitions this member no
// longer owns (their queued jobs are served first, with the fence still
// theirs).
func (c *clusterState) watch() {
	defer close(c.done)
	for {
		ch := c.cfg.Membership.Changed()
		c.refresh(c.cfg.Membership.View())
		select {
		case <-ch:
		case <-c.stop:
			return
		}
	}
}

func (c *clusterState) refresh(v cluster.View) {
	c.mu.Lock()
	for id, m := range c.members {
		if !v.Has(id) {
			m.cancel()
			delete(c.members, id)
		}
	}
	for _, m := range v.Members {
		if _, ok := c.members[m.ID]; !ok {
			ctx, cancel := context.WithCancel(context.Background())
			c.members[m.ID] = memberCtx{ctx: ctx, cancel: cancel}
		}
	}
	c.mu.Unlock()
	if c.e.runtime == nil {
		return
	}
	if n := c.e.runtime.EvictIf(func(p string) bool { return !c.ownsIn(v, p) }); n > 0 {
		c.evictions.Add(uint64(n))
		c.e.cfg.Logger.Info("cluster view changed: actors of partitions now owned elsewhere stopped",
			zap.Int("evicted", n), zap.Int("members", len(v.Members)), zap.Int64("revision", v.Revision))
	}
}

// memberContext returns the context of member id in the last view (nil
// when it is not in it).
func (c *clusterState) memberContext(id string) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, ok := c.members[id]; ok {
		return m.ctx
	}
	return nil
}

// owner returns the owner of partition in v: never this member once it is
// leaving.
func (c *clusterState) owner(v cluster.View, partition string) (string, bool) {
	if c.leaving.Load() {
		v.Members = without(v.Members, c.cfg.Self)
	}
	m, ok := cluster.Owner(v, partition)
	return m.ID, ok
}

func without(ms []cluster.Member, id string) []cluster.Member {
	out := make([]cluster.Member, 0, len(ms))
	for _, m := range ms {
		if m.ID != id {
			out = append(out, m)
		}
	}
	return out
}

// ownsIn reports whether this member owns partition in v.
func (c *clusterState) ownsIn(v cluster.View, partition string) bool {
	o, ok := c.owner(v, partition)
	return ok && o == c.cfg.Self
}

// retryable reports whether a routing attempt's error is worth another
// attempt on the owner of a later view.
func retryable(err error) bool {
	return errors.Is(err, ErrNotOwner) || errors.Is(err, ErrPeerUnreachable) || errors.Is(err, storage.ErrOwnershipLost) ||
		errors.Is(err, errMemberUnhealthy) || errors.Is(err, errNoMembers) || errors.Is(err, errClaimFailed)
}

// errClaimFailed matches a job failed because its actor could not claim
// the partition (partition.Config.Claim failed).
var errClaimFailed = errors.New("engine: the ownership claim failed")

// route runs a call for partition where it is owned: local when this
// member owns it by the current view (even when its lease is not known
// alive: see resume),
// remote on the owner otherwise. Retryable failures are retried, waiting
// for the next view or a short backoff, until MoveTimeout; then the
// request is answered unavailable. forwarded reports whether the last
// attempt went to another member.
func (c *clusterState) route(ctx context.Context, call int, partition string, local func() error, remote func(ctx context.Context, owner string) error) (forwarded bool, err error) {
	deadline := time.Now().Add(c.cfg.MoveTimeout)
	backoff := 10 * time.Millisecond
	// hint is the owner the database named when this member, its view
	// stale, could not resume the partition (ownedElsewhereError).
	var hint string
	for attempt := 0; ; attempt++ {
		changed := c.cfg.Membership.Changed()
		v := c.cfg.Membership.View()
		owner, ok := c.owner(v, partition)
		switch {
		case !ok:
			forwarded, err = false, errNoMembers
		case owner == c.cfg.Self && hint != "" && hint != c.cfg.Self && v.Has(hint):
			// This member's view is stale (its lease is not known alive)
			// and the database names another live member as the owner:
			// serve there.
			forwarded = true
			c.forwarded[call].Add(1)
			err = c.callMember(ctx, hint, remote)
		case owner == c.cfg.Self:
			// Also while this member's lease is not known alive (the
			// coordinator is unreachable): it keeps serving what the
			// database still says it owns. Its actors resume their
			// generation instead of claiming a new one (claimer), and
			// every write and every reply is fenced by that generation.
			forwarded, err = false, local()
			if errors.Is(err, storage.ErrOwnershipLost) {
				c.lost(partition)
			}
			if elsewhere := ownedElsewhereIn(err); elsewhere != "" {
				hint = elsewhere
			}
		default:
			forwarded = true
			c.forwarded[call].Add(1)
			err = c.callMember(ctx, owner, remote)
		}
		if err == nil || !retryable(err) {
			return forwarded, err
		}
		if ctx.Err() != nil {
			return forwarded, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			c.unavailable.Add(1)
			c.e.cfg.Logger.Warn("no reachable owner for the partition within the move timeout", zap.String("partition", partition),
				zap.String("call", callNames[call]), zap.Int("attempts", attempt+1), zap.Error(err))
			return forwarded, syncerr.Unavailable("partition_moving", err,
				"partition %q has no reachable owner right now (it is moving between cluster members); retry", partition)
		}
		c.retries.Add(1)
		t := time.NewTimer(min(backoff, left))
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		backoff = min(2*backoff, 250*time.Millisecond)
	}
}

// callMember runs remote with a context that also ends when owner leaves
// the view. The context ends when remote returns, unless remote returned
// an answer that keeps streaming on it and called holdMemberCall: then it
// ends when that answer is released (or ctx ends, or owner leaves).
func (c *clusterState) callMember(ctx context.Context, owner string, remote func(ctx context.Context, owner string) error) error {
	mctx := c.memberContext(owner)
	if mctx == nil {
		return fmt.Errorf("%w: %s left the view", ErrPeerUnreachable, owner)
	}
	cctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(mctx, cancel)
	var once sync.Once
	call := &memberCall{release: func() { once.Do(func() { stop(); cancel() }) }}
	err := remote(context.WithValue(cctx, memberCallKey{}, call), owner)
	if err != nil || !call.held {
		call.release()
	}
	if err != nil && mctx.Err() != nil && ctx.Err() == nil {
		return fmt.Errorf("%w: %s left the view during the call: %w", ErrPeerUnreachable, owner, err)
	}
	return err
}

// memberCallKey is the context key of a member call's *memberCall.
type memberCallKey struct{}

// memberCall is the state of one callMember call.
type memberCall struct {
	release func() // ends the call's context (once)
	held    bool   // holdMemberCall was called
}

// holdMemberCall keeps the context of the member call ctx belongs to
// (callMember) alive after the call returns, for an answer that streams
// on it (a forwarded sync reply: its body is read after Peers.Sync
// returns, on the call's context). The caller must call release once the
// answer is consumed or dropped. Outside a member call it does nothing.
func holdMemberCall(ctx context.Context) (release func()) {
	if call, ok := ctx.Value(memberCallKey{}).(*memberCall); ok {
		call.held = true
		return call.release
	}
	return func() {}
}

// answerStarted waits for the first bytes of a forwarded answer: an owner
// that failed (or was cut off) after its response headers but before any
// byte of the answer is as unreachable as one that never answered, and the
// call is retried on the owner of the next view (a push it may have
// committed is then answered cached). An SSP2 answer is never empty. The
// body returned yields the whole answer.
func answerStarted(rc io.ReadCloser, owner string) (io.ReadCloser, error) {
	first := make([]byte, 512)
	for {
		n, err := rc.Read(first)
		if n > 0 {
			return &startedBody{Reader: io.MultiReader(bytes.NewReader(first[:n]), rc), Closer: rc}, nil
		}
		if err != nil {
			_ = rc.Close()
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("%w: %s: the answer ended before its first byte: %w", ErrPeerUnreachable, owner, err)
		}
	}
}

// startedBody is a forwarded answer's body after answerStarted.
type startedBody struct {
	io.Reader
	io.Closer
}

// heldBody is a forwarded answer's body whose member call ends when it is
// closed.
type heldBody struct {
	io.ReadCloser
	release func()
}

// Close closes the body and ends its member call.
func (b *heldBody) Close() error {
	err := b.ReadCloser.Close()
	b.release()
	return err
}

// lost handles a local write refused by the fence: the actor is stale
// (another member claimed the partition), so it is evicted; the next
// activation claims again.
func (c *clusterState) lost(partition string) {
	c.ownershipLost.Add(1)
	if c.e.runtime.Evict(partition) {
		c.evictions.Add(1)
	}
	c.e.cfg.Logger.Info("a write or a reply was refused by the ownership fence: the partition moved to another member; its actor is stopped",
		zap.String("partition", partition))
}

// owned runs a call another member forwarded here: only while this member
// owns the partition by its current view (its lease alive or not: the
// actor resumes only a generation the database still records for it)
// (ErrNotOwner otherwise, so the caller re-routes; a forwarded call is
// never forwarded again).
func (c *clusterState) owned(call int, partition string, local func() error) error {
	v := c.cfg.Membership.View()
	if !c.ownsIn(v, partition) {
		return fmt.Errorf("%w: %q (member %s, view revision %d)", ErrNotOwner, partition, c.cfg.Self, v.Revision)
	}
	c.served[call].Add(1)
	err := local()
	if errors.Is(err, storage.ErrOwnershipLost) {
		c.lost(partition)
		return fmt.Errorf("%w: %q: %w", ErrNotOwner, partition, err)
	}
	if elsewhere := ownedElsewhereIn(err); elsewhere != "" {
		return fmt.Errorf("%w: %q: the database names %s as its owner: %w", ErrNotOwner, partition, elsewhere, err)
	}
	return err
}

func (c *clusterState) stats() ClusterStats {
	v := c.cfg.Membership.View()
	st := ClusterStats{Self: c.cfg.Self, Members: v.Members, Healthy: v.Healthy, Leaving: c.leaving.Load(),
		Forwarded: map[string]uint64{}, Served: map[string]uint64{},
		Retries: c.retries.Load(), Unavailable: c.unavailable.Load(), OwnershipLost: c.ownershipLost.Load(), Evictions: c.evictions.Load()}
	for i := range numCalls {
		st.Forwarded[callNames[i]] = c.forwarded[i].Load()
		st.Served[callNames[i]] = c.served[i].Load()
	}
	return st
}

// Clustered reports whether the engine runs in cluster mode.
func (e *Engine) Clustered() bool { return e.cluster != nil }

// ClusterStats returns the cluster counters; ok is false in
// single-process mode.
func (e *Engine) ClusterStats() (st ClusterStats, ok bool) {
	if e.cluster == nil {
		return ClusterStats{}, false
	}
	return e.cluster.stats(), true
}

// Owner returns the member that owns partition by this member's current
// view (its ID, the advertise URL); ok is false in single-process mode or
// when the view is empty.
func (e *Engine) Owner(partition string) (owner string, ok bool) {
	if e.cluster == nil {
		return "", false
	}
	return e.cluster.owner(e.cluster.cfg.Membership.View(), partition)
}

// Owns reports whether this member serves partition itself: always in
// single-process mode; in cluster mode when it owns it by its current
// view. Feature services use it to work only on their own partitions
// (the maintenance pass prunes only partitions its member owns).
func (e *Engine) Owns(partition string) bool {
	if e.cluster == nil {
		return true
	}
	return e.cluster.ownsIn(e.cluster.cfg.Membership.View(), partition)
}

// Handoff prepares a graceful stop in cluster mode: this member stops
// owning partitions (every request is routed to the other members from
// now on) and its partition actors are stopped after the jobs already
// routed to them, writing back their client records, before it returns
// (or ctx ends). Call it before leaving the membership (so no other member
// claims a partition while its actor here still works: its last jobs and
// write-backs are not fenced out), and leave right after: until the others
// see this member gone, they route its partitions' requests here, where
// they are refused and retried, so bound ctx well within MoveTimeout.
// Requests keep being forwarded until Close. It does nothing in
// single-process mode.
func (e *Engine) Handoff(ctx context.Context) {
	if e.cluster == nil {
		return
	}
	e.cluster.leaving.Store(true)
	n := e.runtime.EvictAll(ctx)
	e.cluster.evictions.Add(uint64(n))
	e.cfg.Logger.Info("cluster handoff: partitions left to the other members", zap.Int("actors_stopped", n))
}

// claimer returns partition.Config.Claim for cluster mode: the previous
// owner, when it is another live member, is asked to let go first
// (ReleasePeers), then the generation is claimed.
func (e *Engine) claimer(own storage.Ownership, self string) func(ctx context.Context, p string) (int64, error) {
	return func(ctx context.Context, p string) (int64, error) {
		if !e.cluster.cfg.Membership.View().Healthy {
			return e.resume(ctx, own, self, p)
		}
		if rel, ok := e.cluster.cfg.Peers.(ReleasePeers); ok {
			if prev, _, err := own.PartitionOwner(ctx, p); err == nil && prev != "" && prev != self && e.cluster.cfg.Membership.View().Has(prev) {
				rctx, cancel := context.WithTimeout(ctx, releaseTimeout)
				if err := rel.Release(rctx, prev, p); err != nil {
					e.cfg.Logger.Debug("the previous owner did not release the partition; claiming anyway", zap.String("partition", p),
						zap.String("peer", prev), zap.Error(err))
				}
				cancel()
			}
		}
		return e.claim(ctx, own, self, p)
	}
}

// claim takes a new ownership generation of p for self.
func (e *Engine) claim(ctx context.Context, own storage.Ownership, self, p string) (int64, error) {
	gen, err := own.ClaimPartition(ctx, p, self, e.cfg.Now().UnixMilli())
	if err != nil {
		return 0, errors.Join(errClaimFailed, err)
	}
	e.cfg.Logger.Debug("partition claimed", zap.String("partition", p), zap.Int64("generation", gen))
	return gen, nil
}

// resume is the claim of a member whose lease is not known alive (the
// coordinator is unreachable, or this member is cut off from it): it must
// not take a partition from another member, since its view may be stale,
// so it resumes the generation the database records for it, claims a
// partition no member ever owned, and refuses anything else
// (ownedElsewhereError: the request is routed to the recorded owner when
// that one is in this member's view, else retried until the view is
// known again or the move timeout). Resuming is safe for the same reason
// claiming is: every write and every reply is fenced by the generation, so
// a claim another member makes meanwhile ends this member's service of the
// partition at its next database read.
func (e *Engine) resume(ctx context.Context, own storage.Ownership, self, p string) (int64, error) {
	owner, gen, err := own.PartitionOwner(ctx, p)
	if err != nil {
		return 0, errors.Join(errClaimFailed, err)
	}
	switch {
	case owner == self && gen > 0:
		e.cfg.Logger.Debug("partition resumed without a live lease: the database still records this member's generation",
			zap.String("partition", p), zap.Int64("generation", gen))
		return gen, nil
	case owner == "":
		return e.claim(ctx, own, self, p)
	default:
		return 0, errors.Join(errClaimFailed, &ownedElsewhereError{owner: owner, generation: gen})
	}
}

// ownedElsewhereError is resume's refusal: the database records another
// member as the partition's owner.
type ownedElsewhereError struct {
	owner      string
	generation int64
}

func (e *ownedElsewhereError) Error() string {
	return fmt.Sprintf("engine: this member's lease is not known alive and the database records %s (generation %d) as the partition's owner", e.owner, e.generation)
}

// Unwrap makes the refusal an errMemberUnhealthy.
func (e *ownedElsewhereError) Unwrap() error { return errMemberUnhealthy }

// ownedElsewhereIn returns the owner an ownedElsewhereError in err's chain
// names ("" when there is none).
func ownedElsewhereIn(err error) string {
	var oe *ownedElsewhereError
	if errors.As(err, &oe) {
		return oe.owner
	}
	return ""
}

// forwardedReply wraps a forwarded response body of size bytes (-1:
// streamed).
func forwardedReply(body io.ReadCloser, size int64) *Reply {
	return partition.NewForwardedReply(body, size)
}

// answerSize returns the whole length of a forwarded answer when its body
// reports it (engine.Peers.Sync), else -1.
func answerSize(rc io.ReadCloser) int64 {
	if s, ok := rc.(interface{ Size() int64 }); ok {
		return s.Size()
	}
	return -1
}

// ownedSubmitter submits the feature services' jobs (commands, prune and
// restore batches, backfill batches) in cluster mode: to the local actor
// when this member owns the partition, else the job fails as unavailable
// (503, retryable; details.reason "not_owner"), so a service never
// activates — and claims — a partition another member owns. (The
// maintenance pass asks Owns first; an admin action names the owner in
// its error.)
type ownedSubmitter struct{ e *Engine }

// Submit implements the services' Actors.
func (s ownedSubmitter) Submit(p string, job partition.Job) {
	if s.e.Owns(p) {
		s.e.runtime.Submit(p, job)
		return
	}
	owner, _ := s.e.Owner(p)
	job.Fail(syncerr.Unavailable("not_owner", ErrNotOwner,
		"partition %q is owned by cluster member %s: run this there (its admin API), or retry", p, owner))
}

// OperationPeers is implemented by Peers that also forward remote
// operations (transport/peer.Client does): a command for a partition
// owned by another member runs there, on the partition's actor, as the
// actor serializes it with the partition's pushes.
type OperationPeers interface {
	// Operation sends an encoded operation request for id and returns
	// the owner's encoded result.
	Operation(ctx context.Context, to string, id Identity, request []byte) ([]byte, error)
}

// ReleasePeers is implemented by Peers that can ask a member to let go of
// a partition (transport/peer.Client does). A member that starts a
// partition's actor asks the partition's previous owner, when that one is
// still a live member, to stop its actor first: the previous owner's
// queued jobs and client-record write-back then finish under its own
// ownership generation instead of being refused by the new claim.
type ReleasePeers interface {
	// Release asks member to to stop its actor of partition (once it
	// does not own it by its own view) and returns when it has stopped.
	Release(ctx context.Context, to, partition string) error
}

// releaseTimeout bounds how long a claim waits for the previous owner to
// let go (ReleasePeers); the claim goes ahead after it either way (the
// fence keeps it safe).
const releaseTimeout = time.Second

// ReleaseOwned serves a Release call: when this member does not own the
// partition by its current view, its actor (if any) is stopped after the
// jobs already routed to it and its Stop (client records written back)
// before it returns, or when ctx ends. When it does own it by its view
// (the views disagree: the caller's claim goes ahead and the fence
// decides), its live actor first writes back the client records it
// buffered, under its generation (writeBackForRelease), and then it
// answers an error.
func (e *Engine) ReleaseOwned(ctx context.Context, partition string) error {
	if e.cluster == nil {
		return errors.New("engine: not a cluster member")
	}
	if e.Owns(partition) {
		e.writeBackForRelease(ctx, partition)
		return fmt.Errorf("engine: %s still owns %q by its view", e.cluster.cfg.Self, partition)
	}
	if e.runtime.EvictWait(ctx, partition) {
		e.cluster.evictions.Add(1)
		e.cfg.Logger.Debug("partition released to its new owner", zap.String("partition", partition))
	}
	return nil
}

// RunOperation runs a remote operation (REMOTE.md revision 1; see
// operations.Service.Run) and returns its encoded result. raw is the
// request as received (req decoded from it). Queries run on this member
// (they read storage, never an actor); in cluster mode a command for a
// partition another member owns is forwarded there (when Peers
// implements OperationPeers; otherwise it is answered unavailable, 503).
func (e *Engine) RunOperation(ctx context.Context, id Identity, req *opwire.Request, raw []byte) ([]byte, error) {
	if e.cluster == nil || req == nil || req.Kind != opwire.KindCommand || id.Partition == "" {
		return e.runOperationLocal(ctx, id, req)
	}
	op, ok := e.cluster.cfg.Peers.(OperationPeers)
	if !ok {
		return e.runOperationLocal(ctx, id, req)
	}
	out, _, err := routeCall(ctx, e.cluster, callOperation, id.Partition, func() ([]byte, error) {
		return e.runOperationLocal(ctx, id, req)
	}, func(ctx context.Context, owner string) ([]byte, error) {
		return op.Operation(ctx, owner, id, raw)
	})
	return out, err
}

// RunOperationOwned is RunOperation for a call another member forwarded
// here (ErrNotOwner when this member does not own the partition).
func (e *Engine) RunOperationOwned(ctx context.Context, id Identity, req *opwire.Request) ([]byte, error) {
	if e.cluster == nil {
		return e.runOperationLocal(ctx, id, req)
	}
	return ownedCall(e.cluster, callOperation, id.Partition, func() ([]byte, error) {
		return e.runOperationLocal(ctx, id, req)
	})
}

func (e *Engine) runOperationLocal(ctx context.Context, id Identity, req *opwire.Request) ([]byte, error) {
	res, err := e.operations.Run(ctx, id, req)
	if err != nil {
		return nil, err
	}
	out, err := res.Encode()
	if err != nil {
		return nil, syncerr.Wrap(syncerr.OperationExecutionFailed, err, "the result could not be encoded")
	}
	return out, nil
}

// routeCall is clusterState.route for a call with a result: local runs it
// here, remote on the owner; forwarded reports where the last attempt ran.
func routeCall[T any](ctx context.Context, c *clusterState, call int, partition string, local func() (T, error),
	remote func(ctx context.Context, owner string) (T, error)) (out T, forwarded bool, err error) {
	forwarded, err = c.route(ctx, call, partition, func() error {
		var lerr error
		out, lerr = local()
		return lerr
	}, func(ctx context.Context, owner string) error {
		var rerr error
		out, rerr = remote(ctx, owner)
		return rerr
	})
	return out, forwarded, err
}

// ownedCall is clusterState.owned for a call with a result.
func ownedCall[T any](c *clusterState, call int, partition string, local func() (T, error)) (out T, err error) {
	err = c.owned(call, partition, func() error {
		var lerr error
		out, lerr = local()
		return lerr
	})
	return out, err
}
