package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/bodybudget"
	"github.com/synclane/synclane/transport/httpsync"
)

// roundTripper carries one encoded SSP2 request for an identity and returns
// the encoded response body.
type roundTripper interface {
	roundTrip(ctx context.Context, id engine.Identity, body []byte) ([]byte, error)
	// segment downloads a segment by id with the requested scopes.
	segment(ctx context.Context, id engine.Identity, segmentID string, scopes map[string][]string) ([]byte, error)
}

// ResolveSegments downloads every SEGMENT_REF of msg (scopes: the
// section's requested map) and replaces it by the equivalent inline rows
// segment (SQLite images are converted with the schema), so the replica
// applies every lane one way. Downloaded bytes count in BytesIn.
func (c *Client) ResolveSegments(ctx context.Context, msg *ssp2.Message, scopes map[string][]string, sch *schema.Schema) error {
	for i, f := range msg.Frames {
		ref, ok := f.(*ssp2.SegmentRef)
		if !ok {
			continue
		}
		si, err := c.resolveRef(ctx, ref, scopes, sch)
		if err != nil {
			return err
		}
		msg.Frames[i] = si
	}
	return nil
}

// resolveRef downloads ref's segment (converting a SQLite image to rows).
func (c *Client) resolveRef(ctx context.Context, ref *ssp2.SegmentRef, scopes map[string][]string, sch *schema.Schema) (*ssp2.SegmentInline, error) {
	data, err := c.rt.segment(ctx, c.id, ref.SegmentID, scopes)
	if err != nil {
		return nil, err
	}
	c.BytesIn += int64(len(data))
	if ref.MediaType == ssp2.MediaSQLite {
		if data, err = httpsync.ImageToSegment(ctx, sch, ref, data); err != nil {
			return nil, err
		}
	}
	// Not decoded here: on Stream's reader goroutine that would hold up the
	// next download (measured slower); Stream decodes it on a goroutine of
	// its own, Do's callers in the consumer.
	return &ssp2.SegmentInline{Payload: data}, nil
}

// frameStreamer is a roundTripper that hands a response over as a stream
// (HTTP), so a client decodes and applies its frames while the rest is
// still arriving, as a streaming client does.
type frameStreamer interface {
	roundTripStream(ctx context.Context, id engine.Identity, body []byte) (io.ReadCloser, error)
}

// Stream sends frames like Do and hands each response frame to fn as it is
// read off the wire (SEGMENT_REFs resolved to their downloaded segments when
// resolve is set). A roundTripper that cannot stream gets Do's whole
// response, frame by frame. The response is checked as Do checks it; an
// ERROR frame reaches fn (the section is dropped) and is returned as the
// error once the response ended.
func (c *Client) Stream(ctx context.Context, scopes map[string][]string, sch *schema.Schema, fn func(ssp2.Frame) error, frames ...ssp2.Frame) error {
	if c.epoch == "" {
		if err := c.Handshake(ctx); err != nil {
			return err
		}
	}
	st, ok := c.rt.(frameStreamer)
	if !ok || c.stripInline {
		msg, err := c.Do(ctx, frames...)
		if err != nil {
			return err
		}
		if err := c.ResolveSegments(ctx, msg, scopes, sch); err != nil {
			return err
		}
		for _, f := range msg.Frames {
			if err := fn(f); err != nil {
				return err
			}
		}
		return nil
	}
	body, err := c.encode(frames)
	if err != nil {
		return err
	}
	rc, err := st.roundTripStream(ctx, c.id, body)
	if err != nil {
		return err
	}
	// A reader goroutine decodes frames off the socket, and downloads the
	// segments of SEGMENT_REFs, ahead of fn (up to streamAhead frames), so
	// the server is never held up by the client applying a page: the two
	// overlap on different cores.
	cr := &countingReader{r: rc}
	dec := ssp2.NewDecoder(cr, ssp2.KindResponse, 0)
	dec.DecodeSegments() // each page decoded once, on the reader goroutine
	// A downloaded segment is decoded on a goroutine of its own (at most
	// streamAhead in flight, handed over in order), so decoding page N
	// overlaps downloading page N+1 and applying page N-1.
	type item struct {
		f     ssp2.Frame
		err   error
		ready chan struct{} // closed once f is decoded (nil: ready)
	}
	ahead := make(chan *item, streamAhead)
	stop := make(chan struct{})
	var decoding sync.WaitGroup
	go func() {
		defer close(ahead)
		for {
			f, err := dec.Next()
			it := &item{f: f, err: err}
			if ref, ok := f.(*ssp2.SegmentRef); ok && err == nil {
				// Download here, ahead of the consumer: page N+1 arrives
				// while page N is decoded.
				var si *ssp2.SegmentInline
				si, err = c.resolveRef(ctx, ref, scopes, sch)
				it.f, it.err = si, err
				if err == nil {
					it.ready = make(chan struct{})
					decoding.Add(1)
					go func() {
						defer decoding.Done()
						defer close(it.ready)
						seg, err := ssp2.DecodeSegment(si.Payload)
						si.Segment, it.err = seg, err
					}()
				}
			}
			select {
			case ahead <- it:
			case <-stop:
				return
			}
			// err is this goroutine's own (the read or the download): a
			// decode failure arrives with its item and ends the consumer.
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		close(stop)
		_ = rc.Close() // unblocks a read in progress
		for range ahead {
		}
		decoding.Wait()
		c.BytesIn += cr.n
	}()
	var inBand error
	for first := true; ; first = false {
		it := <-ahead
		if it == nil {
			return errors.New("bench: response stream ended early")
		}
		if it.ready != nil {
			<-it.ready
		}
		f, err := it.f, it.err
		if errors.Is(err, io.EOF) {
			return inBand
		}
		if err != nil {
			return fmt.Errorf("bench: decode response: %w", err)
		}
		if first {
			hdr, _ := f.(*ssp2.RespHeader)
			if hdr == nil {
				return errors.New("bench: response has no RESP_HEADER")
			}
			if hdr.ResetRequired {
				c.epoch = hdr.LogEpoch
				return errReset
			}
			if hdr.RequiredSchemaVersion != nil {
				return fmt.Errorf("bench: schema version 1 not served (required %d)", *hdr.RequiredSchemaVersion)
			}
			if hdr.LogEpoch != "" {
				c.epoch = hdr.LogEpoch
			}
		}
		switch x := f.(type) {
		case *ssp2.ErrorFrame:
			if inBand == nil {
				inBand = &syncerr.Error{Code: syncerr.Code(x.Code), Message: x.Message}
			}
		}
		if err := fn(f); err != nil {
			return err
		}
	}
}

// streamAhead is how many decoded frames Stream's reader may hold before
// the consumer takes them (a few bootstrap pages).
const streamAhead = 4

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// errReset is returned by Client.Do when the server answered with an
// epoch reset; the client has adopted the new epoch.
var errReset = errors.New("bench: server requires a reset (log epoch acquired or changed)")

// Client is one logical SSP2 client (one clientId in one partition) of the
// benchmark. It speaks wire version 2 and acquires the partition's log
// epoch on first use. It is not safe for concurrent use.
type Client struct {
	rt       roundTripper
	id       engine.Identity
	clientID string
	epoch    string
	// BytesIn counts response bytes received.
	BytesIn int64
	// stripInline drops SEGMENT_INLINE frames from responses before they
	// are decoded, counting them in inlineStripped: the storm's drain
	// clients, whose bytes are compared with one client that decodes all.
	stripInline    bool
	inlineStripped int
	// skipSegments takes a SEGMENT_REF as the answer without downloading
	// it (a client whose segment cache holds that content address): the
	// storm's --skip-segments, which measures the sync requests alone.
	skipSegments bool
}

// stripInlineFrames returns data without its SEGMENT_INLINE frames (a
// malformed message is returned whole, for the decoder to report).
func stripInlineFrames(data []byte) ([]byte, int) {
	out := make([]byte, 0, 4096)
	out = append(out, data[:min(len(data), ssp2.HeaderSize)]...)
	n := 0
	for off := ssp2.HeaderSize; off < len(data); {
		if len(data)-off < 5 {
			return data, 0
		}
		size := int(binary.LittleEndian.Uint32(data[off+1:]))
		if size > len(data)-off-5 {
			return data, 0
		}
		if ssp2.FrameType(data[off]) == ssp2.FrameSegmentInline {
			n++
		} else {
			out = append(out, data[off:off+5+size]...)
		}
		off += 5 + size
	}
	return out, n
}

// inlineStripper is a roundTripper that can drop SEGMENT_INLINE frames
// while reading a response: it returns the rest of the message, the pages
// dropped and the bytes received.
type inlineStripper interface {
	roundTripStripped(ctx context.Context, id engine.Identity, body []byte) (rest []byte, pages int, bytesIn int64, err error)
}

// stripInlineStream reads a response message from r, keeping every frame
// but SEGMENT_INLINE, whose payloads are read through a small buffer and
// counted: the streaming form of stripInlineFrames, so a drain client never
// holds an 8 MB answer.
func stripInlineStream(r io.Reader) (out []byte, pages int, total int64, err error) {
	out = make([]byte, ssp2.HeaderSize, 4096)
	if _, err := io.ReadFull(r, out); err != nil {
		return nil, 0, 0, err
	}
	total = int64(ssp2.HeaderSize)
	var hdr [5]byte
	var scratch [64 << 10]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); errors.Is(err, io.EOF) {
			return out, pages, total, nil
		} else if err != nil {
			return nil, 0, 0, err
		}
		size := int64(binary.LittleEndian.Uint32(hdr[1:]))
		total += 5 + size
		if ssp2.FrameType(hdr[0]) == ssp2.FrameSegmentInline {
			pages++
			for left := size; left > 0; {
				n, err := io.ReadFull(r, scratch[:min(left, int64(len(scratch)))])
				if err != nil {
					return nil, 0, 0, err
				}
				left -= int64(n)
			}
			continue
		}
		out = append(out, hdr[:]...)
		start := len(out)
		out = append(out, make([]byte, size)...)
		if _, err := io.ReadFull(r, out[start:]); err != nil {
			return nil, 0, 0, err
		}
	}
}

// Do sends frames after a REQ_HEADER (acquiring the epoch first when the
// client has none) and returns the decoded response.
func (c *Client) Do(ctx context.Context, frames ...ssp2.Frame) (*ssp2.Message, error) {
	if c.epoch == "" {
		if err := c.Handshake(ctx); err != nil {
			return nil, err
		}
	}
	return c.do(ctx, frames)
}

// Handshake acquires the partition's log epoch with an epoch-less pull.
func (c *Client) Handshake(ctx context.Context) error {
	c.epoch = ""
	_, err := c.do(ctx, []ssp2.Frame{&ssp2.PullHeader{Accept: ssp2.AcceptInlineRows}})
	if errors.Is(err, errReset) {
		return nil
	}
	if err == nil {
		return errors.New("bench: epoch acquisition was not answered with resetRequired")
	}
	return err
}

// encode renders a request: a REQ_HEADER with the client's epoch, then frames.
func (c *Client) encode(frames []ssp2.Frame) ([]byte, error) {
	h := &ssp2.ReqHeader{ClientID: c.clientID, SchemaVersion: 1}
	if c.epoch != "" {
		e := c.epoch
		h.LogEpoch = &e
	}
	all := make([]ssp2.Frame, 0, len(frames)+1)
	all = append(append(all, h), frames...)
	body, err := ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: all})
	if err != nil {
		return nil, fmt.Errorf("bench: encode request: %w", err)
	}
	return body, nil
}

func (c *Client) do(ctx context.Context, frames []ssp2.Frame) (*ssp2.Message, error) {
	body, err := c.encode(frames)
	if err != nil {
		return nil, err
	}
	var data []byte
	if st, ok := c.rt.(inlineStripper); ok && c.stripInline {
		var pages int
		var n int64
		if data, pages, n, err = st.roundTripStripped(ctx, c.id, body); err != nil {
			return nil, err
		}
		c.BytesIn += n
		c.inlineStripped += pages
	} else {
		if data, err = c.rt.roundTrip(ctx, c.id, body); err != nil {
			return nil, err
		}
		c.BytesIn += int64(len(data))
		if c.stripInline {
			var n int
			data, n = stripInlineFrames(data)
			c.inlineStripped += n
		}
	}
	msg, err := ssp2.DecodeResponse(data)
	if err != nil {
		return nil, fmt.Errorf("bench: decode response: %w", err)
	}
	hdr, _ := firstFrame(msg).(*ssp2.RespHeader)
	if hdr == nil {
		return nil, errors.New("bench: response has no RESP_HEADER")
	}
	if hdr.ResetRequired {
		c.epoch = hdr.LogEpoch
		return msg, errReset
	}
	if hdr.RequiredSchemaVersion != nil {
		return msg, fmt.Errorf("bench: schema version 1 not served (required %d)", *hdr.RequiredSchemaVersion)
	}
	if hdr.LogEpoch != "" {
		c.epoch = hdr.LogEpoch
	}
	for _, f := range msg.Frames {
		if ef, ok := f.(*ssp2.ErrorFrame); ok {
			return msg, &syncerr.Error{Code: syncerr.Code(ef.Code), Message: ef.Message}
		}
	}
	return msg, nil
}

func firstFrame(m *ssp2.Message) ssp2.Frame {
	if len(m.Frames) == 0 {
		return nil
	}
	return m.Frames[0]
}

// inprocRT drives Engine.Sync directly. The request is decoded from its
// encoded form and the reply encoded, as a transport would, so in-process
// figures include the SSP2 codec but no network or HTTP.
type inprocRT struct{ eng *engine.Engine }

func (r inprocRT) roundTrip(ctx context.Context, id engine.Identity, body []byte) ([]byte, error) {
	msg, err := ssp2.ReadRequest(bytes.NewReader(body), bodybudget.DefaultMaxBodyBytes)
	if err != nil {
		return nil, err
	}
	rep, err := r.eng.Sync(ctx, id, msg)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := rep.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (r inprocRT) segment(ctx context.Context, id engine.Identity, segmentID string, scopes map[string][]string) ([]byte, error) {
	seg, err := r.eng.Segments().Get(ctx, id, segmentID, scopes)
	if err != nil {
		return nil, err
	}
	return seg.Bytes()
}

// httpRT posts requests to an SSP2 HTTP endpoint with the development
// authentication headers.
type httpRT struct {
	url string
	hc  *http.Client
}

func newHTTPClient() *http.Client {
	tr := &http.Transport{
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 4096,
		MaxConnsPerHost:     0,
		DisableCompression:  true, // identity responses; see RESULTS.md
		ForceAttemptHTTP2:   false,
	}
	return &http.Client{Transport: tr}
}

func (r httpRT) post(ctx context.Context, id engine.Identity, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", httpsync.ContentType)
	req.Header.Set("x-actor", id.ActorID)
	req.Header.Set("x-partition", id.Partition)
	return r.hc.Do(req)
}

// roundTripStripped implements inlineStripper: SEGMENT_INLINE payloads are
// counted and discarded as they arrive, never held.
func (r httpRT) roundTripStripped(ctx context.Context, id engine.Identity, body []byte) ([]byte, int, int64, error) {
	res, err := r.post(ctx, id, body)
	if err != nil {
		return nil, 0, 0, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		data, _ := readBody(res)
		return nil, 0, 0, newStatusError(res, data)
	}
	out, pages, n, err := stripInlineStream(res.Body)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("bench: read response: %w", err)
	}
	return out, pages, n, nil
}

func (r httpRT) roundTripStream(ctx context.Context, id engine.Identity, body []byte) (io.ReadCloser, error) {
	res, err := r.post(ctx, id, body)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		defer res.Body.Close()
		data, _ := readBody(res)
		return nil, fmt.Errorf("bench: HTTP %d: %s", res.StatusCode, bytes.TrimSpace(data))
	}
	return res.Body, nil
}

func (r httpRT) roundTrip(ctx context.Context, id engine.Identity, body []byte) ([]byte, error) {
	res, err := r.post(ctx, id, body)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	data, err := readBody(res)
	if err != nil {
		return nil, fmt.Errorf("bench: read response: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		return nil, newStatusError(res, data)
	}
	return data, nil
}

// statusError is an answer whose HTTP status was not 200: its status,
// the protocol code of its JSON body (if any) and its Retry-After.
type statusError struct {
	Status     int
	Code       string
	RetryAfter time.Duration // -1: no Retry-After header
	body       []byte
}

func newStatusError(res *http.Response, data []byte) *statusError {
	e := &statusError{Status: res.StatusCode, RetryAfter: -1, body: bytes.TrimSpace(data)}
	var b struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(e.body, &b) == nil {
		e.Code = b.Code
	}
	if sec, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && sec >= 0 {
		e.RetryAfter = time.Duration(sec) * time.Second
	}
	return e
}

func (e *statusError) Error() string { return fmt.Sprintf("bench: HTTP %d: %s", e.Status, e.body) }

func (r httpRT) segment(ctx context.Context, id engine.Identity, segmentID string, scopes map[string][]string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(r.url, "/sync")+"/segments/"+segmentID, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("x-actor", id.ActorID)
	req.Header.Set("x-partition", id.Partition)
	req.Header.Set(httpsync.ScopesHeader, string(ssp2.CanonicalScopesJSON(scopes)))
	res, err := r.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	data, err := readBody(res)
	if err != nil {
		return nil, fmt.Errorf("bench: read segment: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench: segment HTTP %d: %s", res.StatusCode, bytes.TrimSpace(data))
	}
	return data, nil
}

// segmentSize downloads a segment like segment but keeps none of it: it
// returns the bytes read (storm drain clients check only the length, so
// they cost the harness no page-sized buffer per download).
func (r httpRT) segmentSize(ctx context.Context, id engine.Identity, segmentID string, scopes map[string][]string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(r.url, "/sync")+"/segments/"+segmentID, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("x-actor", id.ActorID)
	req.Header.Set("x-partition", id.Partition)
	req.Header.Set(httpsync.ScopesHeader, string(ssp2.CanonicalScopesJSON(scopes)))
	res, err := r.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		data, _ := readBody(res)
		return 0, fmt.Errorf("bench: segment HTTP %d: %s", res.StatusCode, bytes.TrimSpace(data))
	}
	buf := discardBufs.Get().(*[]byte)
	defer discardBufs.Put(buf)
	n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{res.Body}, *buf)
	if err != nil {
		return n, fmt.Errorf("bench: read segment: %w", err)
	}
	return n, nil
}

// discardBufs are segmentSize's read buffers.
var discardBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// segmentSizer is a roundTripper that can download a segment without
// keeping it (httpRT).
type segmentSizer interface {
	segmentSize(ctx context.Context, id engine.Identity, segmentID string, scopes map[string][]string) (int64, error)
}

// readBody reads a response body with one allocation of its final size
// when the length is known, and otherwise in chunks joined once at the end:
// io.ReadAll regrows (and copies) its buffer from 512 bytes, which for a
// storm of 50 clients reading 8 MB answers made the harness, not the
// server, the bottleneck.
func readBody(res *http.Response) ([]byte, error) {
	if n := res.ContentLength; n >= 0 && n <= 1<<30 {
		b := make([]byte, n)
		if _, err := io.ReadFull(res.Body, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	var chunks [][]byte
	total, size := 0, 32<<10
	for {
		c := make([]byte, size)
		n, err := io.ReadFull(res.Body, c)
		chunks, total = append(chunks, c[:n]), total+n
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		size = min(size*2, 4<<20)
	}
	if len(chunks) == 1 {
		return chunks[0], nil
	}
	out := make([]byte, 0, total)
	for _, c := range chunks {
		out = append(out, c...)
	}
	return out, nil
}
