package httpsync

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/httperr"
)

// ErrResetRequired is returned by Client calls whose answer was an
// epoch reset: the client's epoch has been replaced by the server's, and
// its synced state must be dropped and re-bootstrapped (outbox kept).
var ErrResetRequired = errors.New("httpsync: server requires a reset (log epoch changed)")

// ErrSchemaFloor is returned when the server answered the schema-floor
// response: the client's schema version is not served.
var ErrSchemaFloor = errors.New("httpsync: client schema version is not served")

// Client is a small SSP2-over-HTTP client for tests, benchmarks and
// server-side producers. It speaks wire version 3 unless told otherwise
// (WireVersion), acquires the partition's log epoch on first use, and is
// not safe for concurrent use (one Client per logical client; they are
// cheap). Push payloads are the caller's: sparse rows at wire version 3
// (ssp2.RowCodec.AppendSparse), full rows before.
type Client struct {
	// WireVersion is the SSP2 wire version of every request (default
	// ssp2.WireV3; 2 for a server window that still has it, see
	// engine.Config.WireVersions).
	WireVersion uint16
	// URL is the full sync endpoint, e.g. http://127.0.0.1:8787/sync.
	URL string
	// HTTP is the HTTP client (default http.DefaultClient).
	HTTP *http.Client
	// Header is added to every request (authentication headers).
	Header http.Header
	// ClientID identifies this client (required).
	ClientID string
	// SchemaVersion is the client's schema version (default 1).
	SchemaVersion int32
	// Epoch is the partition log epoch; empty means acquire it first.
	Epoch string
	// GzipRequests compresses request bodies.
	GzipRequests bool
	// Rounds, when set, carries every request instead of HTTP (a realtime
	// socket's rounds: realtime.Client implements it).
	Rounds RoundTripper
	// Schema, when set, lets ResolveSegments apply SQLite segment images
	// (it needs the column types); without it they are refused.
	Schema *schema.Schema
}

// RoundTripper carries one encoded SSP2 request and returns the encoded
// response (errors in-band as ERROR frames).
type RoundTripper interface {
	RoundTrip(ctx context.Context, request []byte) ([]byte, error)
}

// Do sends one request made of frames (the REQ_HEADER is added) and returns
// the decoded response. A JSON error answer is returned as *syncerr.Error.
// An epoch reset updates c.Epoch and returns ErrResetRequired; the floor
// response returns ErrSchemaFloor.
func (c *Client) Do(ctx context.Context, frames ...ssp2.Frame) (*ssp2.Message, error) {
	sv := c.SchemaVersion
	if sv == 0 {
		sv = 1
	}
	h := &ssp2.ReqHeader{ClientID: c.ClientID, SchemaVersion: sv}
	if c.Epoch != "" {
		epoch := c.Epoch
		h.LogEpoch = &epoch
	}
	wire := c.WireVersion
	if wire == 0 {
		wire = ssp2.WireV3
	}
	msg := &ssp2.Message{WireVersion: wire, Kind: ssp2.KindRequest, Frames: append([]ssp2.Frame{h}, frames...)}
	body, err := ssp2.Encode(msg)
	if err != nil {
		return nil, fmt.Errorf("httpsync: encode request: %w", err)
	}
	var resp *ssp2.Message
	if c.Rounds != nil {
		resp, err = c.round(ctx, body)
	} else {
		resp, err = c.post(ctx, body)
	}
	if err != nil {
		return nil, err
	}
	hdr, _ := resp.Frames[0].(*ssp2.RespHeader)
	if hdr == nil {
		return nil, errors.New("httpsync: response has no RESP_HEADER")
	}
	if hdr.RequiredSchemaVersion != nil {
		return resp, ErrSchemaFloor
	}
	if hdr.ResetRequired {
		c.Epoch = hdr.LogEpoch
		return resp, ErrResetRequired
	}
	if hdr.LogEpoch != "" {
		c.Epoch = hdr.LogEpoch
	}
	for _, f := range resp.Frames {
		if ef, ok := f.(*ssp2.ErrorFrame); ok {
			return resp, &syncerr.Error{Code: syncerr.Code(ef.Code), Message: ef.Message, Details: ef.Details}
		}
	}
	return resp, nil
}

// Handshake acquires the partition's log epoch (an epoch-less pull with no
// subscriptions).
func (c *Client) Handshake(ctx context.Context) error {
	c.Epoch = ""
	_, err := c.Do(ctx, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows})
	if errors.Is(err, ErrResetRequired) {
		return nil
	}
	if err == nil {
		return errors.New("httpsync: epoch acquisition was not answered with resetRequired")
	}
	return err
}

func (c *Client) ensureEpoch(ctx context.Context) error {
	if c.Epoch != "" {
		return nil
	}
	return c.Handshake(ctx)
}

// Push sends commits (acquiring the epoch first if needed) and returns one
// PUSH_RESULT per commit.
func (c *Client) Push(ctx context.Context, commits ...*ssp2.PushCommit) ([]*ssp2.PushResult, error) {
	if err := c.ensureEpoch(ctx); err != nil {
		return nil, err
	}
	frames := make([]ssp2.Frame, len(commits))
	for i, cm := range commits {
		frames[i] = cm
	}
	resp, err := c.Do(ctx, frames...)
	if err != nil {
		return nil, err
	}
	return PushResults(resp), nil
}

// Pull sends a pull for subs (acquiring the epoch first if needed) and
// returns the decoded response.
func (c *Client) Pull(ctx context.Context, ph ssp2.PullHeader, subs ...*ssp2.Subscription) (*ssp2.Message, error) {
	if err := c.ensureEpoch(ctx); err != nil {
		return nil, err
	}
	frames := make([]ssp2.Frame, 0, len(subs)+1)
	frames = append(frames, &ph)
	for _, s := range subs {
		frames = append(frames, s)
	}
	return c.Do(ctx, frames...)
}

// PushResults returns the PUSH_RESULT frames of a response.
func PushResults(m *ssp2.Message) []*ssp2.PushResult {
	var out []*ssp2.PushResult
	for _, f := range m.Frames {
		if pr, ok := f.(*ssp2.PushResult); ok {
			out = append(out, pr)
		}
	}
	return out
}

func (c *Client) round(ctx context.Context, body []byte) (*ssp2.Message, error) {
	data, err := c.Rounds.RoundTrip(ctx, body)
	if err != nil {
		return nil, err
	}
	msg, err := ssp2.DecodeResponse(data)
	if err != nil {
		return nil, fmt.Errorf("httpsync: decode response: %w", err)
	}
	if len(msg.Frames) == 0 {
		return nil, errors.New("httpsync: empty response")
	}
	return msg, nil
}

func (c *Client) post(ctx context.Context, body []byte) (*ssp2.Message, error) {
	var rd io.Reader = bytes.NewReader(body)
	if c.GzipRequests {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(body)
		_ = zw.Close()
		rd = &buf
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, rd)
	if err != nil {
		return nil, err
	}
	for k, vs := range c.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", ContentType)
	if c.GzipRequests {
		req.Header.Set("Content-Encoding", "gzip")
	}
	data, err := c.send(req, "response")
	if err != nil {
		return nil, err
	}
	msg, err := ssp2.DecodeResponse(data)
	if err != nil {
		return nil, fmt.Errorf("httpsync: decode response: %w", err)
	}
	if len(msg.Frames) == 0 {
		return nil, errors.New("httpsync: empty response")
	}
	return msg, nil
}

// send performs req with the client's HTTP client and returns the body of a
// 200 answer. Any other status is an error: the protocol's JSON error body
// as *syncerr.Error when there is one, else the status and body text. what
// names the answer in errors.
func (c *Client) send(req *http.Request, what string) ([]byte, error) {
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	res, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, fmt.Errorf("httpsync: read %s: %w", what, err)
	}
	if res.StatusCode != http.StatusOK {
		var eb httperr.Body
		if json.Unmarshal(data, &eb) == nil && eb.Code != "" {
			return nil, &syncerr.Error{Code: syncerr.Code(eb.Code), Message: eb.Message, Details: eb.Details,
				Err: fmt.Errorf("HTTP %d", res.StatusCode)}
		}
		return nil, fmt.Errorf("httpsync: %s HTTP %d: %s", what, res.StatusCode, bytes.TrimSpace(data))
	}
	return data, nil
}
