package httpsync

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httperr"
)

// Blob routes (SPEC §5.9), served by BlobHandler under <mount>/blobs/{id}:
//
//   - PUT: host auth, or a grant token (?st=) from upload-grant. The body
//     is streamed to the blob store while it is hashed (never buffered
//     whole). 200 with an empty body (also for a blob already stored);
//     400 blob.hash_mismatch; 413 blob.too_large when Content-Length or
//     the body exceeds the cap (--max-blob-bytes; with a grant, at most
//     the granted byteLength); 403 sync.forbidden for a bad or expired
//     grant; 400 sync.invalid_request for a body that ends before its
//     Content-Length or cannot be read, 408 for one that goes
//     Options.ReadTimeout without a byte (as POST /sync answers them;
//     nothing is stored, nothing logged above info); 500 (retryable) only
//     when the orphan sweep is removing that very blob or storage failed.
//   - POST .../upload-grant {"byteLength","mediaType"?}: host auth.
//     {"present":true} when stored, else {"url","urlExpiresAtMs"}: one PUT
//     within 15 minutes; {} when presigned uploads are off
//     (blobs.PresignOff: upload through PUT); 413 over the cap; 400
//     for a bad body (at most 4 KiB).
//   - GET (and HEAD): host auth; allowed iff a row of the caller's
//     partition referencing the blob passes the §3.4 check against the
//     stored row, else 403 blob.forbidden (also when the resolver fails);
//     404 blob.not_found. When downloads are presigned (signed URLs
//     configured, or blobs.PresignOn) the answer is
//     {"url","urlExpiresAtMs"}; the URL (?st=, no host auth) serves the
//     bytes. Bytes carry ETag "<id>", Cache-Control private, max-age=0,
//     Vary: Authorization, Accept-Encoding, honour If-None-Match (304) and
//     a single Range (206; 416 when unsatisfiable; other forms get the
//     whole blob). Blobs are sent as stored, never compressed.

// maxGrantBody caps an upload-grant request body.
const maxGrantBody = 4 << 10

// BlobProgressTimeout is how long a blob download, and an upload when
// Options.ReadTimeout is not set, may go without moving a byte: the
// connection's read (upload) or write (download) deadline is renewed as
// bytes flow, so a large transfer is not cut by the server's
// whole-request timeouts while a stalled one is.
const BlobProgressTimeout = 30 * time.Second

// progressDeadline renews a deadline of timeout from now while bytes
// flow, at most every quarter of it (and every second).
type progressDeadline struct {
	set     func(time.Time) error
	timeout time.Duration
	last    time.Time
}

func (p *progressDeadline) renew() {
	if now := time.Now(); now.Sub(p.last) >= min(time.Second, p.timeout/4) {
		p.last = now
		_ = p.set(now.Add(p.timeout)) // unsupported writers keep the server's deadlines
	}
}

type progressReader struct {
	r io.Reader
	progressDeadline
}

func (p *progressReader) Read(b []byte) (int, error) {
	p.renew()
	return p.r.Read(b)
}

type progressWriter struct {
	w io.Writer
	progressDeadline
}

func (p *progressWriter) Write(b []byte) (int, error) {
	p.renew()
	return p.w.Write(b)
}

// BlobHandler serves the blob routes of SPEC §5.9 under a mount:
// GET/PUT <mount>/blobs/{id} (download, upload) and POST
// <mount>/blobs/{id}/upload-grant (a presigned upload URL), authenticated
// with Options.Auth and authorized by eng.Blobs(). The Mux mounts it when
// the engine has a blob store (engine.Config.Blobs.Store).
type BlobHandler struct {
	eng   *engine.Engine
	opts  Options
	mount string
}

// NewBlobHandler returns the blob handler for eng; mount is the sync
// mount (used to build upload URLs when the engine has no PublicURL). It
// reads the id from the path value "id".
func NewBlobHandler(eng *engine.Engine, opts Options, mount string) *BlobHandler {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &BlobHandler{eng: eng, opts: opts, mount: strings.TrimRight(mount, "/")}
}

// ServeHTTP implements http.Handler.
func (h *BlobHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rid := requestID(r)
	w.Header().Set(RequestIDHeader, rid)
	id := r.PathValue("id")
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/upload-grant"):
		h.grant(w, r, rid, id)
	case r.Method == http.MethodPut:
		h.put(w, r, rid, id)
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		h.get(w, r, rid, id)
	default:
		w.Header().Set("Allow", "GET, HEAD, PUT")
		httperr.WriteStatus(w, http.StatusMethodNotAllowed, syncerr.New(syncerr.InvalidRequest, "use GET or PUT for blobs, POST for upload grants"))
	}
}

// authenticate runs host auth; on failure it has answered (the refusal is
// counted and sampled into the event ring like every route's).
func (h *BlobHandler) authenticate(w http.ResponseWriter, r *http.Request) (engine.Identity, bool) {
	return auth.Authenticate(w, r, h.eng, h.opts.Auth, "httpsync.blobs")
}

func (h *BlobHandler) fail(w http.ResponseWriter, rid, what string, err error) {
	e := syncerr.As(err)
	if e.Code == syncerr.InternalError {
		h.opts.Logger.Warn("blob "+what+" failed", zap.String("request_id", rid), zap.Error(err))
	}
	httperr.Write(w, e)
}

func (h *BlobHandler) put(w http.ResponseWriter, r *http.Request, rid, id string) {
	// A signed grant caps the body at its granted length, 0 included
	// (blobs.Service.Upload reads a cap <= 0 as the server's, so a grant for
	// the empty blob is checked here); host auth at the server's cap.
	var maxBytes int64
	if st := r.URL.Query().Get("st"); st != "" {
		n, err := h.eng.Blobs().VerifyUploadGrant(id, st)
		if err != nil {
			h.fail(w, rid, "upload", err)
			return
		}
		if n == 0 {
			var one [1]byte
			if r.ContentLength > 0 {
				w.Header().Set("Connection", "close") // do not read the body
				h.fail(w, rid, "upload", syncerr.New(syncerr.BlobTooLarge, "blob of %d bytes exceeds the granted 0 bytes", r.ContentLength))
				return
			}
			if k, _ := io.ReadFull(r.Body, one[:]); k > 0 {
				w.Header().Set("Connection", "close")
				h.fail(w, rid, "upload", syncerr.New(syncerr.BlobTooLarge, "the body exceeds the granted 0 bytes"))
				return
			}
			r.Body = http.NoBody
		}
		maxBytes = n
	} else if _, ok := h.authenticate(w, r); !ok {
		return
	}
	if enc := r.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		httperr.WriteStatus(w, http.StatusUnsupportedMediaType, syncerr.New(syncerr.InvalidRequest, "blob bodies are sent as stored, without Content-Encoding"))
		return
	}
	rc := http.NewResponseController(w)
	idle := h.opts.ReadTimeout
	if idle <= 0 {
		idle = BlobProgressTimeout
	}
	body := &progressReader{r: r.Body, progressDeadline: progressDeadline{set: rc.SetReadDeadline, timeout: idle}}
	err := h.eng.Blobs().Upload(r.Context(), id, r.Header.Get("Content-Type"), r.ContentLength, maxBytes, body)
	// The answer's write deadline starts now: http.Server.WriteTimeout
	// counts from the request's start, which a long upload has passed.
	_ = rc.SetWriteDeadline(time.Now().Add(BlobProgressTimeout))
	if err != nil {
		if syncerr.As(err).Code == syncerr.BlobTooLarge {
			w.Header().Set("Connection", "close") // do not read the rest of a huge body
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			httperr.WriteStatus(w, http.StatusRequestTimeout, err) // as POST /sync answers a late body
			return
		}
		h.fail(w, rid, "upload", err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// grantRequest is the upload-grant body.
type grantRequest struct {
	ByteLength *int64 `json:"byteLength"`
	MediaType  string `json:"mediaType,omitempty"`
}

// grantAnswer is the upload-grant (and signed download) answer.
type grantAnswer struct {
	Present        bool   `json:"present,omitempty"`
	URL            string `json:"url,omitempty"`
	URLExpiresAtMs int64  `json:"urlExpiresAtMs,omitempty"`
}

func (h *BlobHandler) grant(w http.ResponseWriter, r *http.Request, rid, id string) {
	ident, ok := h.authenticate(w, r)
	if !ok {
		return
	}
	var req grantRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, maxGrantBody+1))
	if err != nil || len(body) > maxGrantBody || json.Unmarshal(body, &req) != nil || req.ByteLength == nil {
		httperr.Write(w, syncerr.New(syncerr.InvalidRequest, `upload-grant takes {"byteLength":<int>,"mediaType"?:<string>} (at most %d bytes)`, maxGrantBody))
		return
	}
	g, err := h.eng.Blobs().UploadGrant(r.Context(), ident, id, *req.ByteLength)
	if err != nil {
		h.fail(w, rid, "upload grant", err)
		return
	}
	if g.Present || g.Token == "" { // stored, or presigned uploads off: {} (upload through PUT)
		writeJSON(w, grantAnswer{Present: g.Present})
		return
	}
	writeJSON(w, grantAnswer{URL: h.blobURL(r, id, g.Token), URLExpiresAtMs: g.ExpiresAtMs})
}

// blobURL is the absolute URL of blob id with token st.
func (h *BlobHandler) blobURL(r *http.Request, id, st string) string {
	base := h.eng.Blobs().PublicURL()
	if base == "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + r.Host + h.mount
	}
	return strings.TrimRight(base, "/") + "/blobs/" + id + "?st=" + st
}

func writeJSON(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(b, '\n'))
}

func (h *BlobHandler) get(w http.ResponseWriter, r *http.Request, rid, id string) {
	w.Header().Set("Vary", "Authorization, Accept-Encoding")
	if st := r.URL.Query().Get("st"); st != "" {
		info, err := h.eng.Blobs().AuthorizeSigned(r.Context(), id, st)
		if err != nil {
			h.fail(w, rid, "download", err)
			return
		}
		h.serveBytes(w, r, rid, id, info.ByteLength, info.MediaType)
		return
	}
	ident, ok := h.authenticate(w, r)
	if !ok {
		return
	}
	d, err := h.eng.Blobs().Authorize(r.Context(), ident, id)
	if err != nil {
		h.fail(w, rid, "download", err)
		return
	}
	if d.Token != "" {
		writeJSON(w, grantAnswer{URL: h.blobURL(r, id, d.Token), URLExpiresAtMs: d.ExpiresAtMs})
		return
	}
	h.serveBytes(w, r, rid, id, d.Info.ByteLength, d.Info.MediaType)
}

// serveBytes answers an authorized download: ETag/304, Range, the bytes.
func (h *BlobHandler) serveBytes(w http.ResponseWriter, r *http.Request, rid, id string, size int64, mediaType string) {
	etag := `"` + id + `"`
	hdr := w.Header()
	hdr.Set("ETag", etag)
	hdr.Set("Cache-Control", "private, max-age=0")
	hdr.Set("Accept-Ranges", "bytes")
	if etagMatches(r.Header.Get("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if mediaType == "" {
		mediaType = "application/octet-stream"
	}
	hdr.Set("Content-Type", mediaType)
	hdr.Set("X-Content-Type-Options", "nosniff")
	off, n, status := int64(0), size, http.StatusOK
	if rg := r.Header.Get("Range"); rg != "" && (r.Header.Get("If-Range") == "" || r.Header.Get("If-Range") == etag) {
		o, l, ok, satisfiable := parseRange(rg, size)
		switch {
		case !satisfiable:
			hdr.Set("Content-Range", fmt.Sprintf("bytes */%d", size))
			httperr.WriteStatus(w, http.StatusRequestedRangeNotSatisfiable, syncerr.New(syncerr.InvalidRequest, "range %s is outside the blob's %d bytes", syncerr.Quote(rg), size))
			return
		case ok:
			off, n, status = o, l, http.StatusPartialContent
			hdr.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", o, o+l-1, size))
		}
	}
	hdr.Set("Content-Length", strconv.FormatInt(n, 10))
	if r.Method == http.MethodHead {
		w.WriteHeader(status)
		return
	}
	rc, err := h.eng.Blobs().Open(r.Context(), id, off, n)
	if err != nil {
		hdr.Del("Content-Length")
		hdr.Del("Content-Range")
		h.fail(w, rid, "download", err)
		return
	}
	defer rc.Close()
	w.WriteHeader(status)
	out := &progressWriter{w: w, progressDeadline: progressDeadline{set: http.NewResponseController(w).SetWriteDeadline, timeout: BlobProgressTimeout}}
	if _, err := io.CopyBuffer(out, rc, make([]byte, 256<<10)); err != nil {
		h.opts.Logger.Debug("blob download aborted", zap.String("request_id", rid), zap.Error(err))
	}
}

// parseRange reads a single "bytes=" range against size: ok when it
// selects a sub-range, satisfiable false when it lies wholly outside the
// blob. Multiple ranges and malformed headers are ignored (ok false,
// satisfiable true): the whole blob is sent.
func parseRange(h string, size int64) (off, n int64, ok, satisfiable bool) {
	spec, found := strings.CutPrefix(h, "bytes=")
	if !found || strings.Contains(spec, ",") {
		return 0, 0, false, true
	}
	a, b, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return 0, 0, false, true
	}
	if a == "" { // suffix: the last b bytes
		k, err := strconv.ParseInt(b, 10, 64)
		if err != nil || k < 0 {
			return 0, 0, false, true
		}
		if k == 0 || size == 0 {
			return 0, 0, false, false
		}
		k = min(k, size)
		return size - k, k, true, true
	}
	start, err := strconv.ParseInt(a, 10, 64)
	if err != nil || start < 0 {
		return 0, 0, false, true
	}
	if start >= size {
		return 0, 0, false, false
	}
	end := size - 1
	if b != "" {
		e, err := strconv.ParseInt(b, 10, 64)
		if err != nil || e < start {
			return 0, 0, false, true
		}
		end = min(e, size-1)
	}
	return start, end - start + 1, true, true
}
