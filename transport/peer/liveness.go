package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/synclane/synclane/engine"
)

// A member that stops running without leaving the membership (SIGSTOP, a
// VM frozen, a machine whose kernel still accepts connections for a
// process that does not run) takes a call's request and never answers
// it. ClientOptions.Timeout cannot tell it from an owner that is alive
// but slow to commit, so a call whose answer has not started after half
// of ClientOptions.UnresponsiveTimeout asks the callee's probe route
// (pathProbe: signed, answered at once without touching the engine) on
// a connection of its own, which must answer within the other half. A
// callee that answers the probe is alive: the call keeps waiting (and
// probes again every half timeout) up to Timeout. A callee that answers
// neither is unresponsive: the call fails with ErrUnresponsive (wrapping
// engine.ErrPeerUnreachable, so the engine retries it on the next view,
// or answers 503 past its move timeout), and the next calls to that
// member probe at once, failing within half the timeout while it stays
// silent. Probes are single-flight per member: a slow member with many
// calls waiting gets one probe per half timeout, not one per call.

// pathProbe is the probe route: a signed POST answered {} at once. The
// secret check at start (Probe) uses it too.
const pathProbe = "/_cluster/v1/probe"

// DefaultUnresponsiveTimeout is ClientOptions.UnresponsiveTimeout's
// default.
const DefaultUnresponsiveTimeout = 2 * time.Second

// ErrUnresponsive is wrapped (with engine.ErrPeerUnreachable) by the
// error of a call whose callee answered neither the call nor a liveness
// probe within ClientOptions.UnresponsiveTimeout.
var ErrUnresponsive = errors.New("peer: the member answered neither the call nor a liveness probe")

// liveness is a client's per-member probe state.
type liveness struct {
	c       *Client
	timeout time.Duration // UnresponsiveTimeout
	hc      *http.Client  // the probes' own connections

	ctx    context.Context // ends at Close: probes in flight stop
	cancel context.CancelFunc
	wg     sync.WaitGroup // probes in flight

	mu      sync.Mutex
	closed  bool // no probe starts once set
	members map[string]*memberLiveness
}

// memberLiveness is what the probes found out about one member.
type memberLiveness struct {
	answered time.Time     // when a probe was last answered
	silent   bool          // the last probe got no answer
	probe    chan struct{} // closed when the probe in flight ends; nil when none
}

// forgetAfter drops a member's state once it was neither probed nor
// silent for this long (members come and go).
const forgetAfter = 10 * time.Minute

func newLiveness(c *Client, timeout time.Duration) *liveness {
	l := &liveness{c: c, timeout: timeout, members: map[string]*memberLiveness{},
		hc: &http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: 1,
			MaxConnsPerHost:     4,
			IdleConnTimeout:     90 * time.Second,
		}}}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	return l
}

func (l *liveness) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.cancel()
	l.wg.Wait()
	l.hc.CloseIdleConnections()
}

// silent reports whether the last probe of member to got no answer.
func (l *liveness) silent(to string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ml := l.members[to]
	return ml != nil && ml.silent
}

// alive reports whether member to answered a probe: a recent answer (less
// than half the timeout old) counts, else it joins (or starts) the
// member's probe and waits for it. ctx ending first, or the client
// closed: true (there is nothing to conclude).
func (l *liveness) alive(ctx context.Context, to string) bool {
	now := time.Now()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return true
	}
	ml := l.members[to]
	if ml == nil {
		l.forgetLocked(now)
		ml = &memberLiveness{}
		l.members[to] = ml
	}
	if !ml.silent && now.Sub(ml.answered) < l.timeout/2 {
		l.mu.Unlock()
		return true
	}
	ch := ml.probe
	if ch == nil {
		ch = make(chan struct{})
		ml.probe = ch
		l.wg.Add(1)
		go l.run(to, ml, ch) // owned by l: ends within timeout/2, or at close
	}
	l.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return !ml.silent
}

// run probes member to once and records the outcome.
func (l *liveness) run(to string, ml *memberLiveness, done chan struct{}) {
	defer l.wg.Done()
	ctx, cancel := context.WithTimeout(l.ctx, l.timeout/2)
	_, _, err := l.c.probe(ctx, l.hc, to)
	cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		ml.answered, ml.silent = time.Now(), false
	case l.ctx.Err() == nil:
		ml.silent = true
	}
	ml.probe = nil
	close(done)
}

// forgetLocked drops the state of members not probed for forgetAfter.
func (l *liveness) forgetLocked(now time.Time) {
	for to, ml := range l.members {
		if ml.probe == nil && !ml.silent && now.Sub(ml.answered) > forgetAfter {
			delete(l.members, to)
		}
	}
}

// watch probes member to while a call to it waits for its answer (ctx
// ends when the answer starts or the call ends) and fails the call
// (fail) when the member is unresponsive.
func (l *liveness) watch(ctx context.Context, to string, fail context.CancelCauseFunc) {
	for {
		if !l.alive(ctx, to) {
			if ctx.Err() == nil {
				fail(fmt.Errorf("%w: %s: %w within %v", engine.ErrPeerUnreachable, to, ErrUnresponsive, l.timeout))
			}
			return
		}
		if !sleep(ctx, l.timeout/2) {
			return
		}
	}
}

// do runs send (a call to member to, under the context it is given)
// while watching that the member is alive. On success the response's
// body ends that context when closed.
func (c *Client) do(ctx context.Context, to string, send func(context.Context) (*http.Response, error)) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	wctx, stopWatch := context.WithCancel(ctx)
	first := c.live.timeout / 2
	if c.live.silent(to) {
		first = 0
	}
	watched := make(chan struct{})
	t := time.AfterFunc(first, func() {
		defer close(watched)
		c.live.watch(wctx, to, cancel)
	})
	res, err := send(ctx)
	stopWatch()
	if !t.Stop() {
		<-watched
	}
	if err != nil {
		cause := context.Cause(ctx)
		cancel(nil)
		if errors.Is(cause, ErrUnresponsive) {
			return nil, cause
		}
		return nil, err
	}
	res.Body = &cancelBody{ReadCloser: res.Body, cancel: func() { cancel(nil) }}
	return res, nil
}

// cancelBody ends its request's context when closed.
type cancelBody struct {
	io.ReadCloser
	cancel func()
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// probe sends a signed POST to member to's probe route through hc and
// returns the answer's status and (at most 64 KiB of) body; err when no
// answer came.
func (c *Client) probe(ctx context.Context, hc *http.Client, to string) (int, []byte, error) {
	url := strings.TrimRight(to, "/") + pathProbe
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, http.NoBody)
	if err != nil {
		return 0, nil, fmt.Errorf("peer: %s: %w", url, err)
	}
	c.Sign(req)
	res, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	return res.StatusCode, b, nil
}

// Probe checks that member to accepts this member's signature (its probe
// route, within ctx): nil when it does (an answer other than 401 or 403
// from the probe route; 404 from a member older than it), an error
// wrapping ErrRefused (and ErrClockSkew when the clocks are the reason)
// when it refuses it, one wrapping engine.ErrPeerUnreachable when it did
// not answer or answered something else.
func (c *Client) Probe(ctx context.Context, to string) error {
	status, b, err := c.probe(ctx, c.live.hc, to)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %s: %w", engine.ErrPeerUnreachable, to, err)
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return refusalError(to, status, b)
	case status == http.StatusOK || status == http.StatusNotFound:
		return nil
	default:
		return fmt.Errorf("%w: %s answered the probe HTTP %d: %.200s", engine.ErrPeerUnreachable, to, status, b)
	}
}
