package httpsync

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/segstore"
)

// SegmentsURL returns the segment download URL of id, derived from the
// client's sync URL (".../sync" → ".../segments/<id>").
func (c *Client) SegmentsURL(id string) string {
	return strings.TrimSuffix(c.URL, "/sync") + "/segments/" + id
}

// FetchSegment downloads a segment a SEGMENT_REF names: from its signed
// URL when it carries one (no host auth, no fallback), otherwise from
// <mount>/segments/{id} with the client's headers and scopes (the
// subscription's requested map) in X-Syncular-Scopes. It and checks that
// the bytes hash to the id and have the announced length. A refusal is
// returned as *syncerr.Error (sync.forbidden, sync.not_found,
// sync.segment_expired: pull again).
func (c *Client) FetchSegment(ctx context.Context, ref *ssp2.SegmentRef, scopes map[string][]string) ([]byte, error) {
	u := c.SegmentsURL(ref.SegmentID)
	if ref.URL != nil {
		u = *ref.URL // signed: fetched directly, without host auth
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if ref.URL == nil {
		for k, vs := range c.Header {
			for _, v := range vs {
				req.Header.Add(k, v)
			}
		}
		req.Header.Set(ScopesHeader, string(ssp2.CanonicalScopesJSON(scopes)))
	}
	data, err := c.send(req, "segment")
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != ref.ByteLength || segstore.ID(data) != ref.SegmentID {
		return nil, fmt.Errorf("httpsync: segment %s: downloaded %d bytes that do not match the reference", ref.SegmentID, len(data))
	}
	return data, nil
}

// ErrUnsupportedSegment is returned by ResolveSegments for a SEGMENT_REF
// whose media type this client does not apply.
var ErrUnsupportedSegment = errors.New("httpsync: unsupported segment media type")

// ResolveSegments follows every SEGMENT_REF of a pull response: each is
// downloaded (with the requested scopes of its section's
// subscription, from subs by id) and replaced in place by a SEGMENT_INLINE
// holding the same rows (a SQLite image, which needs Client.Schema, is
// converted with ImageToSegment), so the caller applies every lane one way. The
// first failed download is returned; the caller then pulls again with the
// section's previous cursor and token.
func (c *Client) ResolveSegments(ctx context.Context, resp *ssp2.Message, subs ...*ssp2.Subscription) error {
	byID := make(map[string]*ssp2.Subscription, len(subs))
	for _, s := range subs {
		byID[s.ID] = s
	}
	var cur *ssp2.Subscription
	for i, f := range resp.Frames {
		switch x := f.(type) {
		case *ssp2.SubStart:
			cur = byID[x.ID]
		case *ssp2.SegmentRef:
			if x.MediaType != ssp2.MediaRows && (x.MediaType != ssp2.MediaSQLite || c.Schema == nil) {
				return fmt.Errorf("%w: %d", ErrUnsupportedSegment, x.MediaType)
			}
			if cur == nil {
				return errors.New("httpsync: SEGMENT_REF outside a known subscription's section")
			}
			data, err := c.FetchSegment(ctx, x, cur.Scopes)
			if err != nil {
				return err
			}
			if x.MediaType == ssp2.MediaSQLite {
				if data, err = ImageToSegment(ctx, c.Schema, x, data); err != nil {
					return err
				}
			}
			resp.Frames[i] = &ssp2.SegmentInline{Payload: data}
		}
	}
	return nil
}
