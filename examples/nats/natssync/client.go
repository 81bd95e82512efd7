package natssync

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
)

// Client sends encoded SSP2 requests to a Server and reassembles its
// replies. It implements httpsync.RoundTripper, so an httpsync.Client
// with Rounds set to it speaks SSP2 over NATS (Push, Pull, Handshake).
// Safe for concurrent use.
type Client struct {
	// Conn is the NATS connection (required).
	Conn *nats.Conn
	// Subject is the server's request subject (required).
	Subject string
	// Header is added to every request: the credentials (HeaderActor and
	// HeaderPartition for DevAuth, HeaderAuthorization for HTTPAuth).
	Header nats.Header
}

// ErrIncomplete is returned when a reply's messages arrive out of order
// or with a gap (the subscription dropped some: a slow consumer).
var ErrIncomplete = errors.New("natssync: reply incomplete")

// RoundTrip sends one encoded request and returns the encoded response.
// An error reply is returned as *ReplyError (syncerr.CodeOf gives its
// code); a body above the connection's max payload is refused here with
// sync.invalid_request, as the server would refuse it; no server on the
// subject is nats.ErrNoResponders.
func (c *Client) RoundTrip(ctx context.Context, request []byte) ([]byte, error) {
	inbox := c.Conn.NewInbox()
	sub, err := c.Conn.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("natssync: subscribe to the reply inbox: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	m := nats.NewMsg(c.Subject)
	m.Reply = inbox
	for k, v := range c.Header {
		m.Header[k] = append([]string(nil), v...)
	}
	m.Data = request
	if err := c.Conn.PublishMsg(m); err != nil {
		if errors.Is(err, nats.ErrMaxPayload) {
			// NATS refuses a message above the server's max payload
			// before it leaves: answer it with the protocol's code.
			return nil, syncerr.Wrap(syncerr.InvalidRequest, ssp2.ErrTooLarge, "request of %d bytes exceeds the NATS max payload of %d bytes", len(request), c.Conn.MaxPayload())
		}
		return nil, fmt.Errorf("natssync: publish request: %w", err)
	}
	var out []byte
	for seq := 0; ; seq++ {
		r, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, fmt.Errorf("natssync: await reply: %w", err)
		}
		if len(r.Data) == 0 && r.Header.Get("Status") == "503" {
			return nil, nats.ErrNoResponders
		}
		if got := r.Header.Get(HeaderSeq); got != strconv.Itoa(seq) {
			return nil, fmt.Errorf("%w: message %s where %d was due", ErrIncomplete, got, seq)
		}
		if r.Header.Get(HeaderError) != "" {
			return nil, decodeError(r)
		}
		out = append(out, r.Data...)
		if r.Header.Get(HeaderEnd) != "" {
			return out, nil
		}
	}
}
