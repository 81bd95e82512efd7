// Package natssync serves synclane's sync requests over NATS
// request/reply: a custom transport, built only on the engine's public
// API, as docs/transports.md describes.
//
// A request is one NATS message on the request subject: its body the SSP2
// request bytes (uncompressed), its headers the caller's credentials. The
// reply goes to the message's reply subject as one or more messages (each
// at most the connection's max payload, numbered by HeaderSeq, the last
// marked HeaderEnd) whose bodies concatenated are the SSP2 response. An
// error found before the response starts is one message marked
// HeaderError carrying the protocol's JSON error body. Client reads them.
//
// Notifier publishes a small JSON notification (partition, seq) on a
// subject per partition after commits become durable.
package natssync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
)

// Options configure a Server.
type Options struct {
	// Subject is the request subject (required), e.g. "synclane.sync".
	Subject string
	// Queue is the queue group the server subscribes in (default
	// "synclane"): with several servers on the subject, each request
	// goes to one of them. In a synclane cluster every member may serve
	// the subject: the engine forwards a request for a partition another
	// member owns (SyncEncoded), so any member can take any request.
	Queue string
	// Auth authenticates every request (required).
	Auth Authenticator
	// MaxBodyBytes limits the request body (default, and at most, the
	// connection's max payload, which NATS enforces for every message);
	// a larger one is answered sync.invalid_request.
	MaxBodyBytes int
	// MaxConcurrent bounds the requests served at once (default 16); the
	// rest wait in the subscription's pending buffer (NATS drops messages
	// beyond its pending limits: their requesters time out and retry).
	MaxConcurrent int
	// RequestTimeout bounds one request, engine call and reply (default
	// 30s); the requester's own timeout should be at least as long.
	RequestTimeout time.Duration
	// DrainTimeout bounds how long Serve waits, once its context ends,
	// for the requests already received to be answered (default 30s).
	DrainTimeout time.Duration
	// Logger receives request-level logs (default: no-op).
	Logger *zap.Logger

	chunk int // reply message body size (tests); 0: chunkSize
}

// Server answers sync requests arriving on a NATS subject through one
// engine. Serve runs it.
type Server struct {
	nc    *nats.Conn
	eng   *engine.Engine
	opts  Options
	sem   chan struct{}
	wg    sync.WaitGroup
	ready chan struct{}
}

// New returns the server of eng on nc's subject opts.Subject.
func New(nc *nats.Conn, eng *engine.Engine, opts Options) (*Server, error) {
	if opts.Subject == "" || opts.Auth == nil || nc == nil || eng == nil {
		return nil, errors.New("natssync: a connection, an engine, Options.Subject and Options.Auth are required")
	}
	if opts.Queue == "" {
		opts.Queue = "synclane"
	}
	if max := int(nc.MaxPayload()); opts.MaxBodyBytes <= 0 || opts.MaxBodyBytes > max {
		opts.MaxBodyBytes = max
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = 16
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 30 * time.Second
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.chunk <= 0 {
		opts.chunk = chunkSize(nc)
	}
	return &Server{nc: nc, eng: eng, opts: opts, sem: make(chan struct{}, opts.MaxConcurrent), ready: make(chan struct{})}, nil
}

// Serve subscribes and answers requests until ctx ends; then it drains:
// it stops taking requests, answers those already received (each within
// RequestTimeout, all within DrainTimeout) and returns. Every goroutine it
// starts has ended when it returns. The error is the subscription's.
func (s *Server) Serve(ctx context.Context) error {
	base := context.WithoutCancel(ctx) // requests in flight finish during the drain
	sub, err := s.nc.QueueSubscribe(s.opts.Subject, s.opts.Queue, func(m *nats.Msg) {
		s.sem <- struct{}{} // blocks the subscription's delivery: back-pressure
		s.wg.Add(1)
		go func() {
			defer func() { <-s.sem; s.wg.Done() }()
			s.handle(base, m)
		}()
	})
	if err != nil {
		return fmt.Errorf("natssync: subscribe %s: %w", s.opts.Subject, err)
	}
	// Make sure the server has the subscription before reporting ready.
	if err := s.nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("natssync: subscribe %s: %w", s.opts.Subject, err)
	}
	close(s.ready)
	<-ctx.Done()
	closed := sub.StatusChanged(nats.SubscriptionClosed)
	if err := sub.Drain(); err != nil {
		_ = sub.Unsubscribe()
	} else {
		t := time.NewTimer(s.opts.DrainTimeout)
		select {
		case <-closed:
		case <-t.C:
			_ = sub.Unsubscribe()
		}
		t.Stop()
	}
	s.wg.Wait()
	return nil
}

// Ready is closed once Serve's subscription is in place on the NATS
// server: requests published from then on are answered.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// handle answers one request message. It mirrors httpsync's POST /sync:
// span, authentication, body limit, SyncEncoded, then the reply streamed
// with WriteTo (or released with Close when it is not written).
func (s *Server) handle(base context.Context, m *nats.Msg) {
	if m.Reply == "" {
		return // a publish, not a request: nobody to answer
	}
	ctx, cancel := context.WithTimeout(base, s.opts.RequestTimeout)
	defer cancel()
	var span trace.Span
	if t := s.eng.Tracer(); t != nil {
		// The caller's trace continues from its traceparent header.
		ctx = propagation.TraceContext{}.Extract(ctx, headerCarrier(m.Header))
		ctx, span = t.Start(ctx, "synclane.sync", trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", m.Subject)))
		defer span.End()
	}
	fail := func(err error) {
		code := syncerr.CodeOf(err)
		if span != nil {
			span.SetAttributes(attribute.String("synclane.error.code", string(code)))
			span.SetStatus(codes.Error, string(code))
		}
		if err := s.nc.PublishMsg(errorMsg(m.Reply, 0, err)); err != nil {
			s.opts.Logger.Debug("nats error reply not sent", zap.Error(err))
		}
	}

	id, err := s.opts.Auth.Authenticate(ctx, m)
	if err != nil {
		e := syncerr.As(err)
		if e.Code == syncerr.InternalError && !errors.Is(e, syncerr.ErrUnavailable) {
			e = syncerr.Wrap(syncerr.AuthRequired, err, "authentication failed")
		}
		// Counted in synclane_auth_failures_total (route "other") and
		// sampled into the event ring. NATS does not tell who published
		// a message, so every failure shares one source bucket.
		reason := string(e.Code)
		if !syncerr.Known(e.Code) {
			reason = "other" // the reason labels a metric: keep the set fixed
		}
		s.eng.ReportAuthFailure("other", reason, "nats", eventFor(m, e))
		fail(e)
		return
	}
	if len(m.Data) > s.opts.MaxBodyBytes {
		fail(syncerr.Wrap(syncerr.InvalidRequest, ssp2.ErrTooLarge, "request body of %d bytes exceeds the %d byte limit", len(m.Data), s.opts.MaxBodyBytes))
		return
	}
	// The one entry point: decoded and served here, or (cluster mode)
	// forwarded undecoded to the partition's owner.
	rep, _, err := s.eng.SyncEncoded(ctx, id, m.Data)
	if err != nil {
		e := syncerr.As(err)
		if e.Code == syncerr.InternalError {
			s.opts.Logger.Warn("sync request failed", zap.String("partition", id.Partition), zap.String("actor", id.ActorID), zap.Error(err))
		}
		fail(e)
		return
	}
	if span != nil {
		span.SetAttributes(attribute.String("synclane.partition", id.Partition), attribute.Bool("synclane.forwarded", rep.Forwarded()))
	}
	defer rep.Close() // a forwarded reply's body is released even if WriteTo never ran to its end
	w := &chunkWriter{nc: s.nc, subject: m.Reply, max: s.opts.chunk}
	if _, err := rep.WriteTo(w); err != nil {
		// A forwarded answer broke off (or publishing failed): end the
		// reply with an error, so the client drops what it received, as
		// httpsync aborts the HTTP response.
		s.opts.Logger.Debug("nats reply aborted", zap.String("partition", id.Partition), zap.Error(err))
		if w.err == nil {
			_ = s.nc.PublishMsg(errorMsg(m.Reply, w.seq, syncerr.Unavailable("reply_aborted", err, "the reply broke off: retry")))
		}
		return
	}
	if err := w.end(); err != nil {
		s.opts.Logger.Debug("nats reply not sent", zap.Error(err))
	}
}

// eventFor is the auth.failed event of a refused message (never its
// credentials).
func eventFor(m *nats.Msg, e *syncerr.Error) events.Event {
	return events.Event{Source: "nats", Code: string(e.Code), Message: e.Message + " (NATS " + m.Subject + ")"}
}

// chunkSize is the body size of one reply message: the max payload less
// room for the headers (NATS counts them in the payload).
func chunkSize(nc *nats.Conn) int {
	return max(int(nc.MaxPayload())-1024, 1024)
}

// chunkWriter publishes a reply as messages of at most max bytes, numbered
// from 0. Reply.WriteTo calls Flush after each bootstrap page it streams,
// so the requester gets a page while the next is built.
type chunkWriter struct {
	nc      *nats.Conn
	subject string
	max     int
	buf     []byte
	seq     int
	err     error // the first publish error
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if w.err != nil {
			return n, w.err
		}
		c := min(len(p), w.max-len(w.buf))
		w.buf = append(w.buf, p[:c]...)
		p, n = p[c:], n+c
		if len(w.buf) == w.max {
			w.publish(false)
		}
	}
	return n, w.err
}

// Flush publishes what is buffered.
func (w *chunkWriter) Flush() error {
	if len(w.buf) > 0 {
		w.publish(false)
	}
	return w.err
}

// end publishes the last message (possibly empty), marked HeaderEnd.
func (w *chunkWriter) end() error {
	w.publish(true)
	return w.err
}

func (w *chunkWriter) publish(last bool) {
	if w.err != nil {
		return
	}
	m := nats.NewMsg(w.subject)
	m.Header.Set(HeaderSeq, strconv.Itoa(w.seq))
	if last {
		m.Header.Set(HeaderEnd, "1")
	}
	m.Data = w.buf
	w.err = w.nc.PublishMsg(m)
	w.seq++
	w.buf = nil // the published slice belongs to the message now
}

// headerCarrier reads and writes W3C trace context in NATS headers
// (case-sensitive: traceparent, tracestate as the spec spells them).
type headerCarrier nats.Header

func (h headerCarrier) Get(key string) string { return nats.Header(h).Get(key) }
func (h headerCarrier) Set(key, value string) { nats.Header(h).Set(key, value) }
func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}
