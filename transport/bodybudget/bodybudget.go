// Package bodybudget bounds the request-body bytes a server holds at once,
// across every request and every transport that shares one Budget (POST
// /sync and realtime socket rounds in `synclane serve`).
//
// A request takes a Charge and grows it before it holds more bytes: by the
// declared Content-Length up front when there is one, else as it reads (in
// steps of its buffer's growth, decompressed bytes included). A Grow that
// does not fit waits in line (first come, first served) for at most the
// budget's wait, then fails with an error carrying sync.rate_limited
// (retryable, retryLater) and wrapping ErrBusy; the transport answers 503
// with Retry-After (HTTP) or the same error in-band (socket rounds). A
// Charge is released as a whole, once, whatever ended the request.
//
// Two rules keep the budget from refusing what it should serve:
//
//   - The first FreeBytes of every request are charged without waiting, so
//     small pulls and pushes are never held up by large pushes (they may
//     take the budget past its limit by up to FreeBytes each).
//   - A request never charges more than the whole limit: one larger than
//     the budget waits until nothing else is charged and then runs alone
//     (the per-request body limit, not the budget, decides what is too
//     large: 413).
//
// What a request is charged is the memory it holds: DecodedFactor (2)
// bytes for each byte of its decoded body (the body, and the row values
// the engine decodes from it while it applies a push; the decoded
// request's frames alias the body and add little), one byte per byte of a
// compressed copy while it is decoded. A request is charged until the
// engine is done with it. Garbage left by a released request is freed by
// the next garbage collection, so under the default GOGC the heap of a
// process whose budget is full grows to about twice what is live: set
// GOMEMLIMIT to hold it closer (bench/RESULTS.md, issue 27 item 6).
package bodybudget

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/synclane/synclane/protocol/syncerr"
)

// Defaults of Options, and the fixed allowance and retry hint.
const (
	// DefaultLimit is the default budget (512 MiB).
	DefaultLimit int64 = 512 << 20
	// DefaultWait is how long a Grow waits for room by default.
	DefaultWait = 5 * time.Second
	// FreeBytes is what every request may charge without waiting.
	FreeBytes int64 = 64 << 10
	// RetryAfter is the delay a refused client is told to wait
	// (Retry-After, and retryAfterMs in the error's details).
	RetryAfter = time.Second
)

// Per-request body limits shared by the transports: the budget bounds
// what all requests hold together, these bound one request.
const (
	// DefaultMaxBodyBytes is the default limit on a decompressed sync
	// request body, for POST /sync and realtime socket rounds alike (128
	// MiB). It is large because clients cut a push by its operation count,
	// never by its bytes (the official client sends up to 500 operations of
	// any size in one request, and that request also carries its pull): a
	// push refused as too large is resent unchanged forever. Memory is
	// bounded by the in-flight budget instead.
	DefaultMaxBodyBytes = 128 << 20
	// MaxOperationBodyBytes caps a decompressed operation request body (one
	// operation per request; its params are bounded by this too), for POST
	// /operations and operation-watch socket messages alike. A larger body
	// is answered 413 with operation.invalid_request (a larger message
	// closes the socket).
	MaxOperationBodyBytes = 1 << 20
)

// ErrBusy is the cause of the error Grow returns when the budget had no
// room within the wait.
var ErrBusy = errors.New("bodybudget: the server's in-flight request-body budget is exhausted")

// Options configure a Budget.
type Options struct {
	// Limit is the budget in bytes (<= 0: DefaultLimit).
	Limit int64
	// Wait bounds how long a Grow waits for room (<= 0: DefaultWait).
	Wait time.Duration
	// OnWait, when set, is called (on the waiting goroutine, without
	// locks held) each time a Grow starts waiting: tests use it to know
	// a request is queued.
	OnWait func()
}

// Budget is a server-wide count of request-body bytes held at once. Its
// methods are safe for concurrent use; a nil *Budget charges nothing.
type Budget struct {
	limit  int64
	wait   time.Duration
	onWait func()

	mu       sync.Mutex
	inUse    int64
	queue    []*waiter // first come, first served
	waits    uint64
	refusals uint64
}

type waiter struct {
	n       int64
	ready   chan struct{}
	granted bool
}

// New returns a budget configured by o.
func New(o Options) *Budget {
	if o.Limit <= 0 {
		o.Limit = DefaultLimit
	}
	if o.Wait <= 0 {
		o.Wait = DefaultWait
	}
	return &Budget{limit: o.Limit, wait: o.Wait, onWait: o.OnWait}
}

// Limit returns the budget in bytes (0 for a nil Budget).
func (b *Budget) Limit() int64 {
	if b == nil {
		return 0
	}
	return b.limit
}

// Charge is one request's share of a Budget. It is used by one goroutine
// at a time (it may be handed from one to another); Release returns
// everything it holds. The zero Charge belongs to no budget: it never
// waits and holds nothing.
type Charge struct {
	b *Budget
	n int64
}

// Charge returns an empty charge on b (on a nil Budget, a charge that
// never waits and holds nothing).
func (b *Budget) Charge() *Charge { return &Charge{b: b} }

// Held returns the bytes c holds (0 for a nil Charge).
func (c *Charge) Held() int64 {
	if c == nil {
		return 0
	}
	return c.n
}

// Grow adds n bytes to c, waiting (at most the budget's wait, or until ctx
// ends) for room. It fails with an error carrying sync.rate_limited and
// wrapping ErrBusy when no room came within the wait, or with ctx's error;
// c then holds what it held before.
func (c *Charge) Grow(ctx context.Context, n int64) error {
	b := c.b
	if b == nil || n <= 0 {
		return nil
	}
	n = min(n, b.limit-c.n) // never more than the whole budget
	if n <= 0 {
		return nil
	}
	b.mu.Lock()
	if c.n+n <= FreeBytes || len(b.queue) == 0 && b.inUse+n <= b.limit {
		b.inUse += n
		b.mu.Unlock()
		c.n += n
		return nil
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	b.queue = append(b.queue, w)
	b.waits++
	b.mu.Unlock()
	if b.onWait != nil {
		b.onWait()
	}
	t := time.NewTimer(b.wait)
	defer t.Stop()
	var err error
	select {
	case <-w.ready:
		c.n += n
		return nil
	case <-t.C:
		err = busyError()
	case <-ctx.Done():
		err = ctx.Err()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.granted { // room came as the wait ended: take it
		c.n += n
		return nil
	}
	for i, x := range b.queue {
		if x == w {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			break
		}
	}
	if errors.Is(err, ErrBusy) {
		b.refusals++
	}
	b.dispatch() // w may have held up smaller charges behind it
	return err
}

// Return gives back n of the bytes c holds (those it no longer
// references), at most what it holds. On a nil Charge it does nothing.
func (c *Charge) Return(n int64) {
	if c == nil {
		return
	}
	n = min(n, c.n)
	if c.b == nil || n <= 0 {
		return
	}
	c.n -= n
	c.b.release(n)
}

// Release gives back everything c holds; calling it again (or on a nil
// Charge) does nothing.
func (c *Charge) Release() {
	if c != nil {
		c.Return(c.n)
	}
}

// First capacity of a body buffer (a socket round of one pull is a few
// hundred bytes), and the capacity from which it grows
// by a quarter instead of doubling (a 100 MiB body then costs about 20
// copies and at most a quarter of unused capacity).
const (
	firstBuffer = 4 << 10
	doubleBelow = 1 << 20
)

// DecodedFactor is what a request is charged for each byte of its
// decoded body: the byte itself, and as much again for the values the
// engine decodes from the body while it serves the request (a pushed
// row's strings are copies; measured in bench/RESULTS.md, issue 27 item
// 6). A compressed copy of a body is charged one byte per byte.
const DecodedFactor = 2

// GrowBuffer returns b with room for at least one more byte, charging c
// perByte bytes for each byte of added capacity first: the capacity
// doubles from 4 KiB up to 1 MiB, then grows by a quarter, never past
// limit. A full b already at limit comes back unchanged (the caller's body
// is too large); b itself comes back unchanged with Grow's error when the
// budget had no room. The old array is not charged once copied (it is
// garbage).
func (c *Charge) GrowBuffer(ctx context.Context, b []byte, limit int, perByte int64) ([]byte, error) {
	if len(b) < cap(b) || cap(b) >= limit {
		return b, nil
	}
	n := firstBuffer
	switch {
	case cap(b) >= doubleBelow:
		n = cap(b) + cap(b)/4
	case cap(b) > 0:
		n = 2 * cap(b)
	}
	n = min(n, limit)
	if err := c.Grow(ctx, perByte*int64(n-cap(b))); err != nil {
		return b, err
	}
	nb := make([]byte, len(b), n)
	copy(nb, b)
	return nb, nil
}

func (b *Budget) release(n int64) {
	b.mu.Lock()
	b.inUse -= n
	b.dispatch()
	b.mu.Unlock()
}

// dispatch grants waiting charges, in order, while the first one fits
// (with b.mu held).
func (b *Budget) dispatch() {
	for len(b.queue) > 0 && b.inUse+b.queue[0].n <= b.limit {
		w := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		b.inUse += w.n
		w.granted = true
		close(w.ready)
	}
	if len(b.queue) == 0 {
		b.queue = nil
	}
}

// busyError is the refusal of a Grow that found no room within the wait.
func busyError() error {
	sec := int64(math.Ceil(RetryAfter.Seconds()))
	return syncerr.Wrap(syncerr.RateLimited, ErrBusy, "the server is holding as many request bodies as its memory budget allows; retry in %d s", sec).
		WithDetails(map[string]int64{"retryAfterMs": RetryAfter.Milliseconds(), "retryAfterSec": sec})
}

// Stats is a snapshot of a Budget.
type Stats struct {
	// Limit and InUse are the budget and the bytes charged now.
	Limit, InUse int64
	// Waiting is the number of charges waiting for room now.
	Waiting int
	// Waits counts the Grows that had to wait; Refusals those that failed
	// because no room came within the wait.
	Waits, Refusals uint64
}

// Stats returns b's current figures (zero for a nil Budget).
func (b *Budget) Stats() Stats {
	if b == nil {
		return Stats{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return Stats{Limit: b.limit, InUse: b.inUse, Waiting: len(b.queue), Waits: b.waits, Refusals: b.refusals}
}
