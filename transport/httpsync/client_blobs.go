package httpsync

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strings"

	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/httperr"
)

// BlobURL returns <mount>/blobs/<id>, derived from the client's sync URL.
func (c *Client) BlobURL(id string) string {
	return strings.TrimSuffix(c.URL, "/sync") + "/blobs/" + id
}

func (c *Client) hc() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

func (c *Client) withHeader(req *http.Request) *http.Request {
	for k, vs := range c.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	return req
}

// blobError turns a non-2xx answer into *syncerr.Error when it carries the
// JSON error body.
func blobError(res *http.Response, what string) error {
	data, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	var eb httperr.Body
	if json.Unmarshal(data, &eb) == nil && eb.Code != "" {
		return &syncerr.Error{Code: syncerr.Code(eb.Code), Message: eb.Message, Details: eb.Details, Err: fmt.Errorf("HTTP %d", res.StatusCode)}
	}
	return fmt.Errorf("httpsync: %s HTTP %d: %s", what, res.StatusCode, bytes.TrimSpace(data))
}

// UploadBlob streams size bytes from body as blob id to PUT <mount>/blobs/<id>
// with the client's headers (size < 0: unknown length, chunked). The body
// is not buffered. Refusals are *syncerr.Error (blob.hash_mismatch,
// blob.too_large, ...).
func (c *Client) UploadBlob(ctx context.Context, id, mediaType string, body io.Reader, size int64) error {
	return c.putBlob(ctx, c.BlobURL(id), true, mediaType, body, size)
}

// UploadBlobURL uploads to a URL from UploadGrant (no host auth).
func (c *Client) UploadBlobURL(ctx context.Context, url, mediaType string, body io.Reader, size int64) error {
	return c.putBlob(ctx, url, false, mediaType, body, size)
}

func (c *Client) putBlob(ctx context.Context, url string, auth bool, mediaType string, body io.Reader, size int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, io.NopCloser(body))
	if err != nil {
		return err
	}
	req.ContentLength = size
	if size == 0 {
		req.Body = http.NoBody
	}
	if mediaType != "" {
		req.Header.Set("Content-Type", mediaType)
	}
	if auth {
		c.withHeader(req)
	}
	res, err := c.hc().Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode/100 != 2 {
		return blobError(res, "blob upload")
	}
	_, _ = io.Copy(io.Discard, res.Body)
	return nil
}

// BlobGrant is an upload-grant or signed download answer.
type BlobGrant struct {
	Present        bool   `json:"present,omitempty"`
	URL            string `json:"url,omitempty"`
	URLExpiresAtMs int64  `json:"urlExpiresAtMs,omitempty"`
}

// UploadGrant asks for an upload URL for blob id of byteLength bytes.
func (c *Client) UploadGrant(ctx context.Context, id string, byteLength int64, mediaType string) (BlobGrant, error) {
	b, _ := json.Marshal(map[string]any{"byteLength": byteLength, "mediaType": mediaType})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BlobURL(id)+"/upload-grant", bytes.NewReader(b))
	if err != nil {
		return BlobGrant{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	data, err := c.send(c.withHeader(req), "upload grant")
	if err != nil {
		return BlobGrant{}, err
	}
	var g BlobGrant
	if err := json.Unmarshal(data, &g); err != nil {
		return BlobGrant{}, fmt.Errorf("httpsync: upload grant answer: %w", err)
	}
	return g, nil
}

// DownloadBlob fetches blob id and writes it to w: with host auth from
// <mount>/blobs/<id>, following a signed-URL answer ({"url"}) without
// credentials. The bytes are streamed and checked against the id
// (SHA-256) as they arrive; a mismatch is an error after the write. It
// returns the bytes written.
func (c *Client) DownloadBlob(ctx context.Context, id string, w io.Writer) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BlobURL(id), nil)
	if err != nil {
		return 0, err
	}
	res, err := c.hc().Do(c.withHeader(req))
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return 0, blobError(res, "blob download")
	}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") && res.Header.Get("ETag") == "" {
		var g BlobGrant
		if err := json.NewDecoder(io.LimitReader(res.Body, 64<<10)).Decode(&g); err != nil || g.URL == "" {
			return 0, fmt.Errorf("httpsync: blob download: bad signed-URL answer: %v", err)
		}
		return c.DownloadBlobURL(ctx, id, g.URL, w)
	}
	return copyVerified(res.Body, id, w)
}

// DownloadBlobURL fetches blob id from a signed URL (no host auth).
func (c *Client) DownloadBlobURL(ctx context.Context, id, url string, w io.Writer) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	res, err := c.hc().Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return 0, blobError(res, "blob download")
	}
	return copyVerified(res.Body, id, w)
}

func copyVerified(r io.Reader, id string, w io.Writer) (int64, error) {
	v := newHashingReader(r)
	n, err := io.CopyBuffer(w, v, make([]byte, 256<<10))
	if err != nil {
		return n, err
	}
	if got := v.id(); got != id {
		return n, fmt.Errorf("httpsync: blob download: the bytes hash to %s, not %s", got, id)
	}
	return n, nil
}

type hashingReader struct {
	r io.Reader
	h hash.Hash
}

func newHashingReader(r io.Reader) *hashingReader { return &hashingReader{r: r, h: sha256.New()} }

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	return n, err
}

func (h *hashingReader) id() string { return "sha256:" + hex.EncodeToString(h.h.Sum(nil)) }
