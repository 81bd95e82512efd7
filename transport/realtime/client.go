package realtime

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"

	"github.com/coder/websocket"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/httperr"
)

// ErrClosed is returned by Client calls after the socket ended.
var ErrClosed = errors.New("realtime: socket closed")

// Delta is a delta the server sent: one whole SSP2 response.
type Delta struct {
	// Raw is the response's bytes (without the tag).
	Raw []byte
	// Message is the decoded response.
	Message *ssp2.Message
}

// Cursor returns the highest SUB_END nextCursor of the delta (-1 if none).
func (d *Delta) Cursor() int64 {
	c := int64(-1)
	for _, f := range d.Message.Frames {
		if e, ok := f.(*ssp2.SubEnd); ok {
			c = max(c, e.NextCursor)
		}
	}
	return c
}

// DialOptions configure Dial.
type DialOptions struct {
	// Header is sent with the upgrade (authentication headers).
	Header http.Header
	// HTTPClient makes the upgrade request (default http.DefaultClient).
	HTTPClient *http.Client
	// Events is the size of the event buffer (default 256); when it is
	// full the client stops reading, as a slow application would.
	Events int
	// ReadLimit bounds one message from the server (default 64 MiB).
	ReadLimit int64
}

// Client is a realtime socket of one clientId: the Go side of GET
// /realtime. It reads the socket on its own goroutine (stopped by Close),
// hands deltas and control events out through Next, and serves socket
// rounds (Round, which also makes it an httpsync.RoundTripper). Next is
// for one goroutine; Ack, Publish and Round may be called concurrently.
type Client struct {
	conn   *websocket.Conn
	hello  ssp2.Hello
	events chan any
	rounds chan []byte
	roundM sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	err    error // why the socket ended, set before done closes
}

// Dial connects to a realtime endpoint (http(s):// or ws(s):// URL of
// <mount>/realtime) as clientID and returns once the server's hello
// arrived. An upgrade refused by the server returns its *syncerr.Error.
func Dial(ctx context.Context, endpoint, clientID string, opts DialOptions) (*Client, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("clientId", clientID)
	u.RawQuery = q.Encode()
	conn, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPHeader: opts.Header, HTTPClient: opts.HTTPClient})
	if err != nil {
		if resp != nil && resp.Body != nil {
			b, _ := io.ReadAll(resp.Body)
			var eb httperr.Body
			if json.Unmarshal(b, &eb) == nil && eb.Code != "" {
				return nil, &syncerr.Error{Code: syncerr.Code(eb.Code), Message: eb.Message, Details: eb.Details, Err: fmt.Errorf("HTTP %d", resp.StatusCode)}
			}
		}
		return nil, err
	}
	limit := opts.ReadLimit
	if limit <= 0 {
		limit = 64 << 20
	}
	conn.SetReadLimit(limit)
	typ, data, err := conn.Read(ctx)
	if err != nil {
		_ = conn.CloseNow()
		return nil, fmt.Errorf("realtime: no hello: %w", err)
	}
	msg, err := ssp2.ParseServerControl(data)
	hello, ok := msg.(*ssp2.Hello)
	if typ != websocket.MessageText || err != nil || !ok {
		_ = conn.CloseNow()
		return nil, fmt.Errorf("realtime: the first message is not a hello: %q", data)
	}
	n := opts.Events
	if n <= 0 {
		n = 256
	}
	cctx, cancel := context.WithCancel(context.Background())
	c := &Client{conn: conn, hello: *hello, events: make(chan any, n), rounds: make(chan []byte, 1),
		ctx: cctx, cancel: cancel, done: make(chan struct{})}
	go c.readLoop()
	return c, nil
}

// Hello returns the server's hello.
func (c *Client) Hello() ssp2.Hello { return c.hello }

// Close closes the socket and stops the client's reader.
func (c *Client) Close() error {
	err := c.conn.Close(websocket.StatusNormalClosure, "")
	c.cancel()
	<-c.done
	return err
}

// CloseNow drops the socket without a close handshake.
func (c *Client) CloseNow() {
	_ = c.conn.CloseNow()
	c.cancel()
	<-c.done
}

// Done is closed when the socket has ended; Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns why the socket ended (a websocket.CloseError when the server
// closed it with a status), or nil while it is open.
func (c *Client) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// readLoop reads the socket until it ends.
func (c *Client) readLoop() {
	defer close(c.done)
	var round []byte
	for {
		typ, data, err := c.conn.Read(c.ctx)
		if err != nil {
			c.err = err
			return
		}
		var ev any
		switch {
		case typ == websocket.MessageText:
			msg, perr := ssp2.ParseServerControl(data)
			if perr != nil {
				c.err = perr
				_ = c.conn.Close(websocket.StatusInvalidFramePayloadData, "malformed control message")
				return
			}
			ev = msg
		case len(data) > 0 && data[0] == TagDelta:
			m, derr := ssp2.DecodeResponse(data[1:])
			if derr != nil {
				c.err = derr
				_ = c.conn.Close(websocket.StatusInvalidFramePayloadData, "malformed delta")
				return
			}
			ev = &Delta{Raw: data[1:], Message: m}
		case len(data) > 0 && data[0] == TagRound:
			round = append(round, data[1:]...)
			if responseComplete(round) {
				c.rounds <- round
				round = nil
			}
			continue
		default:
			continue
		}
		select {
		case c.events <- ev:
		case <-c.ctx.Done():
			c.err = c.ctx.Err()
			return
		}
	}
}

// responseComplete reports whether buf holds a whole SSP2 response (up to
// and including its END frame).
func responseComplete(buf []byte) bool {
	off := envelopeLen
	for off+5 <= len(buf) {
		n := int(binary.LittleEndian.Uint32(buf[off+1 : off+5]))
		if off+5+n > len(buf) {
			return false
		}
		if buf[off] == 0 {
			return true
		}
		off += 5 + n
	}
	return false
}

// Next returns the next event: *Delta, *ssp2.Wake, *ssp2.Heartbeat,
// *ssp2.PresenceFanout, *ssp2.PresenceError or *ssp2.UnknownControl.
func (c *Client) Next(ctx context.Context) (any, error) {
	select {
	case ev := <-c.events:
		return ev, nil
	default:
	}
	select {
	case ev := <-c.events:
		return ev, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.done:
		select {
		case ev := <-c.events:
			return ev, nil
		default:
		}
		return nil, fmt.Errorf("%w: %v", ErrClosed, c.err)
	}
}

// Ack acknowledges everything up to cursor.
func (c *Client) Ack(ctx context.Context, cursor int64) error {
	b, err := ssp2.MarshalControl(&ssp2.Ack{Cursor: cursor})
	if err != nil {
		return err
	}
	return c.conn.Write(ctx, websocket.MessageText, b)
}

// Publish publishes this client's presence document on a scope key (nil:
// leave).
func (c *Client) Publish(ctx context.Context, scopeKey string, doc json.RawMessage) error {
	b, err := ssp2.MarshalControl(&ssp2.PresencePublish{ScopeKey: scopeKey, Doc: doc})
	if err != nil {
		return err
	}
	return c.conn.Write(ctx, websocket.MessageText, b)
}

// Round runs one socket round: request is an encoded SSP2 request, the
// answer the encoded response (the same bytes POST /sync would answer).
// Rounds are serialized. A round abandoned through ctx closes the socket
// (its answer could not be told apart from the next round's).
func (c *Client) Round(ctx context.Context, request []byte) ([]byte, error) {
	c.roundM.Lock()
	defer c.roundM.Unlock()
	for off := 0; off < len(request) || off == 0; off += maxChunk {
		end := min(off+maxChunk, len(request))
		msg := make([]byte, 1+end-off)
		msg[0] = TagRound
		copy(msg[1:], request[off:end])
		if err := c.conn.Write(ctx, websocket.MessageBinary, msg); err != nil {
			return nil, err
		}
		if end == len(request) {
			break
		}
	}
	select {
	case b := <-c.rounds:
		return b, nil
	case <-ctx.Done():
		// The answer may still come: the socket cannot carry another round.
		_ = c.conn.CloseNow()
		return nil, ctx.Err()
	case <-c.done:
		return nil, fmt.Errorf("%w: %v", ErrClosed, c.err)
	}
}

// RoundTrip implements httpsync.RoundTripper: httpsync.Client sends its
// requests as socket rounds when its Rounds field is set to c.
func (c *Client) RoundTrip(ctx context.Context, request []byte) ([]byte, error) {
	return c.Round(ctx, request)
}

// Follower is the client state Follow keeps up to date: it applies deltas,
// pulls (over HTTP or socket rounds) when told to, and says which cursor
// to acknowledge. httpsynctest.Replica implements it.
type Follower interface {
	// ApplyDelta applies a delta (a whole SSP2 response).
	ApplyDelta(msg *ssp2.Message) error
	// CatchUp pulls until nothing is left to pull.
	CatchUp(ctx context.Context) error
	// Cursor is the cursor to acknowledge: the lowest cursor of the
	// client's synced subscriptions.
	Cursor() int64
	// ResetEpoch drops the synced state after the log epoch changed
	// (the next CatchUp re-acquires the epoch and bootstraps).
	ResetEpoch(ctx context.Context) error
}

// Follow keeps f in sync through the socket until ctx ends or the socket
// does: a hello that requires sync (or whose latestCursor is past f's
// cursor), and every wake-up, make it pull; every delta is applied; each
// is acknowledged. onEvent, when not nil, sees
// every event first.
func (c *Client) Follow(ctx context.Context, f Follower, onEvent func(any)) error {
	catchUp := func() error {
		if err := f.CatchUp(ctx); err != nil {
			return err
		}
		return c.Ack(ctx, f.Cursor())
	}
	// The stored cursor can be ahead of what this client applied (a pull
	// answered but lost): its own cursor decides too.
	if c.hello.RequiresSync || f.Cursor() < c.hello.LatestCursor {
		if err := catchUp(); err != nil {
			return err
		}
	}
	for {
		ev, err := c.Next(ctx)
		if err != nil {
			return err
		}
		if onEvent != nil {
			onEvent(ev)
		}
		switch e := ev.(type) {
		case *Delta:
			if err := f.ApplyDelta(e.Message); err != nil {
				return err
			}
			if err := c.Ack(ctx, f.Cursor()); err != nil {
				return err
			}
		case *ssp2.Wake:
			if e.Reason == ssp2.WakeResetRequired {
				if err := f.ResetEpoch(ctx); err != nil {
					return err
				}
			}
			if err := catchUp(); err != nil {
				return err
			}
		}
	}
}
