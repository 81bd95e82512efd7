package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/internal/tracing"
	"github.com/synclane/synclane/protocol/opwire"
)

// ClientOptions configure a Client.
type ClientOptions struct {
	// Self is the calling member's ID (advertise URL); Secret signs its
	// calls (both required).
	Self   string
	Secret Secret
	// Timeout bounds each call until the callee's answer starts (its
	// response headers; a forwarded push's answer starts once it is
	// committed) while the callee is alive: default 35 s, past the
	// engine's 30 s storage turn, so a forwarded request is not given up
	// before the owner's storage turn would give up on it. A streamed
	// answer then flows for as long as it needs; its bytes are bounded by
	// HTTP/2 flow control (MaxReceiveBufferPerStream) plus one 32 KiB copy
	// chunk per forwarded reply.
	Timeout time.Duration
	// UnresponsiveTimeout bounds each call until the callee shows it is
	// alive: its answer starts, or it answers a liveness probe sent after
	// half of it (on a connection of its own), within the other half
	// (liveness.go). A callee that does neither fails the call with
	// ErrUnresponsive (engine.ErrPeerUnreachable: retried on the next
	// view, 503 past the move timeout). Default
	// DefaultUnresponsiveTimeout (2 s).
	UnresponsiveTimeout time.Duration
	// MaxReceiveBufferPerStream caps the bytes of one answer buffered from
	// the callee before the caller reads them (default 256 KiB; over the
	// frames transport also the bytes of one call's body in flight, and
	// clamped to 16 KiB … 16 MiB).
	MaxReceiveBufferPerStream int
	// Protocol is how calls travel: ProtocolFrames (the default: one
	// long-lived connection per member carrying every call as binary
	// frames, frames.go; HTTP/1.1 to a member that does not serve it or
	// past maxConnsPerPair busy connections), ProtocolHTTP1 (a pool of
	// keep-alive HTTP/1.1 connections per member, at most
	// MaxConnsPerMember at once) or ProtocolH2 (HTTP/2: h2c for http://
	// advertise URLs, TLS with ALPN for https://, one connection per member
	// carrying every call). All reach the same routes; a member serves all.
	Protocol string
	// MaxConnsPerMember caps the HTTP/1.1 connections to one member
	// (default 512; calls beyond it wait for a free connection).
	MaxConnsPerMember int
	// Logger receives the client's logs (default: no-op).
	Logger *zap.Logger
}

// The member-call protocols (ClientOptions.Protocol).
const (
	ProtocolHTTP1 = "http1"
	ProtocolH2    = "h2"
)

// Client calls the other members (it implements engine.Peers and
// engine.OperationPeers) over the frames transport, HTTP/1.1 keep-alive
// connections or HTTP/2 (ClientOptions.Protocol). The frames transport is
// the default because it costs the least CPU per call: see
// bench/RESULTS.md, "A cheap member hop" (HTTP/1.1 beat HTTP/2 before it,
// 1.49× against 1.67× the CPU of a local round).
type Client struct {
	opts     ClientOptions
	hc       *http.Client
	live     *liveness
	refusals refusalLog
	frames   *framesPool // ProtocolFrames; nil otherwise
}

var (
	_ engine.Peers          = (*Client)(nil)
	_ engine.OperationPeers = (*Client)(nil)
	_ engine.ReleasePeers   = (*Client)(nil)
)

// NewClient returns a client for the member opts.Self; it refuses an
// unknown Protocol.
func NewClient(opts ClientOptions) (*Client, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = 35 * time.Second
	}
	if opts.MaxReceiveBufferPerStream <= 0 {
		opts.MaxReceiveBufferPerStream = 256 << 10
	}
	if opts.MaxConnsPerMember <= 0 {
		opts.MaxConnsPerMember = 512
	}
	if opts.Protocol == "" {
		opts.Protocol = ProtocolFrames
	}
	if opts.UnresponsiveTimeout <= 0 {
		opts.UnresponsiveTimeout = DefaultUnresponsiveTimeout
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	protos := new(http.Protocols)
	tr := &http.Transport{
		Protocols:             protos,
		ResponseHeaderTimeout: opts.Timeout,
		IdleConnTimeout:       90 * time.Second,
	}
	switch opts.Protocol {
	case ProtocolHTTP1, ProtocolFrames:
		protos.SetHTTP1(true)
		tr.MaxIdleConnsPerHost = opts.MaxConnsPerMember
		tr.MaxConnsPerHost = opts.MaxConnsPerMember
	case ProtocolH2:
		protos.SetHTTP2(true)
		protos.SetUnencryptedHTTP2(true)
		tr.HTTP2 = &http.HTTP2Config{
			MaxReceiveBufferPerStream:     opts.MaxReceiveBufferPerStream,
			MaxReceiveBufferPerConnection: 16 << 20,
			PingTimeout:                   5 * time.Second,
			SendPingTimeout:               10 * time.Second,
		}
	default:
		return nil, fmt.Errorf("peer: unknown member-call protocol %q (want %s, %s or %s)", opts.Protocol, ProtocolFrames, ProtocolHTTP1, ProtocolH2)
	}
	c := &Client{opts: opts, hc: &http.Client{Transport: tr}, refusals: refusalLog{log: opts.Logger}}
	c.live = newLiveness(c, opts.UnresponsiveTimeout)
	if opts.Protocol == ProtocolFrames {
		c.frames = newFramesPool(c)
	}
	return c, nil
}

// HTTPClient returns the client's HTTP client (for other member routes,
// such as the realtime follow link; requests must be signed with Sign).
// With ProtocolFrames it speaks HTTP/1.1.
func (c *Client) HTTPClient() *http.Client { return c.hc }

// Sign signs r as a call of this member.
func (c *Client) Sign(r *http.Request) { c.opts.Secret.Sign(r, c.opts.Self, time.Now()) }

// Close ends the liveness probes in flight and closes the connections
// (the calls still on a frames connection fail).
func (c *Client) Close() {
	c.live.close()
	if c.frames != nil {
		c.frames.close()
	}
	c.hc.CloseIdleConnections()
}

// call sends a signed POST to member to and returns the response when it
// is a 200; errors follow engine.Peers' contract.
func (c *Client) call(ctx context.Context, to, path string, body []byte, hdr map[string]string) (*http.Response, error) {
	url := strings.TrimRight(to, "/") + path
	h := make(http.Header, len(hdr)+2)
	for k, v := range hdr {
		h.Set(k, v)
	}
	tracing.Inject(ctx, h) // the caller's trace continues at the member (W3C traceparent)
	var res *http.Response
	var err error
	if c.frames != nil {
		res, err = c.do(ctx, to, func(ctx context.Context) (*http.Response, error) {
			return c.frames.roundTrip(ctx, to, path, h, body)
		})
		if errors.Is(err, errNoFrames) || errors.Is(err, errFramesBusy) {
			c.frames.fallbacks.Add(1)
			res, err = nil, nil
		}
	}
	if res == nil && err == nil {
		req, rerr := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if rerr != nil {
			return nil, fmt.Errorf("peer: %s: %w", url, rerr)
		}
		req.Header = h
		c.Sign(req)
		res, err = c.do(ctx, to, func(ctx context.Context) (*http.Response, error) { return c.hc.Do(req.WithContext(ctx)) })
	}
	if errors.Is(err, ErrUnresponsive) {
		return nil, err
	}
	if errors.Is(err, ErrRefused) { // the frames upgrade was refused
		c.refusals.note(to, err)
		return nil, routedRefusal(err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", engine.ErrPeerUnreachable, url, err)
	}
	if res.StatusCode == http.StatusOK {
		return res, nil
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	switch res.StatusCode {
	case http.StatusMisdirectedRequest:
		return nil, fmt.Errorf("%w: %s answered it is not the owner", engine.ErrNotOwner, to)
	case http.StatusUnauthorized, http.StatusForbidden:
		// A refusal between members is never the client's: its
		// sync.auth_required (refreshAuth) would log the user out.
		err := refusalError(to, res.StatusCode, b)
		c.refusals.note(to, err)
		return nil, routedRefusal(err)
	}
	var eb errorBody
	if json.Unmarshal(b, &eb) != nil || eb.Code == "" {
		return nil, fmt.Errorf("%w: %s answered HTTP %d: %.200s", engine.ErrPeerUnreachable, to, res.StatusCode, b)
	}
	return nil, eb.toError(res.StatusCode)
}

// Sync implements engine.Peers.
func (c *Client) Sync(ctx context.Context, to string, id engine.Identity, request []byte) (io.ReadCloser, error) {
	ih, err := encodeIdentity(id)
	if err != nil {
		return nil, err
	}
	res, err := c.call(ctx, to, pathSync, request, map[string]string{IdentityHeader: ih, "Content-Type": "application/vnd.syncular.sync.v2"})
	if err != nil {
		return nil, err
	}
	return &answerBody{ReadCloser: res.Body, size: res.ContentLength}, nil
}

// answerBody is a forwarded sync answer: its Size is the owner's
// Content-Length (-1 for a streamed answer), see engine.Peers.
type answerBody struct {
	io.ReadCloser
	size int64
}

// Size returns the answer's length, -1 when it streams.
func (b *answerBody) Size() int64 { return b.size }

// callJSON posts in as JSON and decodes the answer into out.
func (c *Client) callJSON(ctx context.Context, to, path string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	res, err := c.call(ctx, to, path, b, map[string]string{"Content-Type": "application/json"})
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(out); err != nil {
		return fmt.Errorf("%w: %s: unreadable answer: %w", engine.ErrPeerUnreachable, to, err)
	}
	return nil
}

// ClientState implements engine.Peers.
func (c *Client) ClientState(ctx context.Context, to string, id engine.Identity, clientID string) (engine.ClientState, error) {
	var st engine.ClientState
	err := c.callJSON(ctx, to, pathClientState, clientStateCall{
		Identity: wireIdentity{ActorID: id.ActorID, Partition: id.Partition, Grants: id.Grants}, ClientID: clientID}, &st)
	return st, err
}

// BuildDeltas implements engine.Peers.
func (c *Client) BuildDeltas(ctx context.Context, to string, partition string, req engine.DeltaRequest) (*engine.DeltaResult, error) {
	var a deltasAnswer
	if err := c.callJSON(ctx, to, pathDeltas, deltasCall{Partition: partition, Request: req}, &a); err != nil {
		return nil, err
	}
	return decodeDeltas(&a)
}

// Ack implements engine.Peers.
func (c *Client) Ack(ctx context.Context, to string, partition string, acks []engine.Ack) error {
	var out struct{}
	return c.callJSON(ctx, to, pathAck, ackCall{Partition: partition, Acks: acks}, &out)
}

// Operation implements engine.OperationPeers.
func (c *Client) Operation(ctx context.Context, to string, id engine.Identity, request []byte) ([]byte, error) {
	ih, err := encodeIdentity(id)
	if err != nil {
		return nil, err
	}
	res, err := c.call(ctx, to, pathOperation, request, map[string]string{IdentityHeader: ih, "Content-Type": opwire.ContentType})
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxOperationResult+1))
	if err == nil && len(b) > maxOperationResult {
		err = fmt.Errorf("result over %d bytes", maxOperationResult)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: unreadable operation result: %w", engine.ErrPeerUnreachable, to, err)
	}
	return b, nil
}

// maxOperationResult caps a forwarded operation's result (a command's
// result is small: its outcome and the commit's details).
const maxOperationResult = 16 << 20

// Release implements engine.ReleasePeers.
func (c *Client) Release(ctx context.Context, to, partition string) error {
	var out struct{}
	return c.callJSON(ctx, to, pathRelease, releaseCall{Partition: partition}, &out)
}

// maxEventsPerCall caps the events one events call returns.
const maxEventsPerCall = 1000

// eventsCall is the body of an events call.
type eventsCall struct {
	After uint64 `json:"after"`
	Limit int    `json:"limit"`
}

// Events returns up to limit (at most 1,000) of member to's most recent
// server events after seq after (its event ring; none when it runs
// without one).
func (c *Client) Events(ctx context.Context, to string, after uint64, limit int) ([]events.Event, error) {
	var evs []events.Event
	err := c.callJSON(ctx, to, pathEvents, eventsCall{After: after, Limit: limit}, &evs)
	return evs, err
}

// Member returns the cluster counters of member to (its /_cluster/v1/member).
func (c *Client) Member(ctx context.Context, to string) (engine.ClusterStats, error) {
	var st engine.ClusterStats
	err := c.callJSON(ctx, to, pathMember, struct{}{}, &st)
	return st, err
}
