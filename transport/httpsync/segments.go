package httpsync

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/segments"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/segstore"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httperr"
)

// ScopesHeader carries the requested scope map of a segment download as
// canonical JSON (SPEC §5.5).
const ScopesHeader = "X-Syncular-Scopes"

// SegmentHandler serves GET <mount>/segments/{id} (SPEC §5.5): host auth
// plus ScopesHeader, or a signed URL token (?st=, SPEC §5.4) instead of
// both. A segment is served only under a publication of the caller's
// partition (a token's audience) in that partition's live log epoch:
// scopes are resolved again on every call and the digest of the
// effective map (a token's digest) must be that publication's (403
// sync.forbidden otherwise). Unknown ids, and ids published only in
// another partition or an older epoch, get the same 404 sync.not_found;
// expired ones 404 sync.segment_expired. Answers carry ETag "<id>",
// honour If-None-Match with 304, and are compressed zstd, then gzip, then
// identity: a compressed download sends the segment's form in that
// encoding, built on its first such download and stored beside the
// segment (so a segment is compressed once per encoding, not once per
// download), or compresses it on the fly when the store keeps no forms.
type SegmentHandler struct {
	eng  *engine.Engine
	opts Options
}

// NewSegmentHandler returns the segment download handler for eng. It reads
// the id from the request's path value "id" (mount it with a pattern such
// as "GET /segments/{id}").
func NewSegmentHandler(eng *engine.Engine, opts Options) *SegmentHandler {
	if opts.CompressMinBytes == 0 {
		opts.CompressMinBytes = DefaultCompressMinBytes
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &SegmentHandler{eng: eng, opts: opts}
}

// ServeHTTP implements http.Handler.
func (h *SegmentHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rid := requestID(r)
	w.Header().Set(RequestIDHeader, rid)
	w.Header().Set("Vary", "Authorization, X-Syncular-Scopes, Accept-Encoding")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		httperr.WriteStatus(w, http.StatusMethodNotAllowed, syncerr.New(syncerr.InvalidRequest, "use GET for segments"))
		return
	}
	if st := r.URL.Query().Get("st"); st != "" {
		// A signed URL: no host auth, the token is the authorization.
		seg, err := h.eng.Segments().GetSignedForm(r.Context(), r.PathValue("id"), st, h.formWanted(r))
		h.answer(w, r, rid, "", seg, err)
		return
	}
	id, ok := auth.Authenticate(w, r, h.eng, h.opts.Auth, "httpsync.segments")
	if !ok {
		return
	}
	segID := r.PathValue("id")
	raw := r.Header.Get(ScopesHeader)
	var requested map[string][]string
	if raw == "" || json.Unmarshal([]byte(raw), &requested) != nil {
		httperr.Write(w, syncerr.New(syncerr.InvalidRequest, "%s must hold the requested scope map as JSON", ScopesHeader))
		return
	}
	seg, err := h.eng.Segments().GetForm(r.Context(), id, segID, requested, h.formWanted(r))
	h.answer(w, r, rid, id.Partition, seg, err)
}

// formWanted is the stored form a download may be answered with: the
// encoding its Accept-Encoding picks, for a segment large enough to be
// compressed. The service then authorizes it from the segment's
// publications and hands out the form without reading the segment's
// bytes, when the form is stored.
func (h *SegmentHandler) formWanted(r *http.Request) segments.FormWanted {
	return segments.FormWanted{Encoding: pickEncoding(r.Header.Get("Accept-Encoding")), MinBytes: int64(h.opts.CompressMinBytes)}
}

// answer writes a segment download or its refusal.
func (h *SegmentHandler) answer(w http.ResponseWriter, r *http.Request, rid, partition string, seg *segments.Segment, err error) {
	defer seg.Close()
	if err != nil {
		e := syncerr.As(err)
		if e.Code == syncerr.InternalError {
			h.opts.Logger.Warn("segment download failed", zap.String("request_id", rid), zap.String("partition", partition), zap.Error(err))
		}
		httperr.Write(w, e)
		return
	}
	etag := `"` + seg.Meta.ID + `"`
	hdr := w.Header()
	hdr.Set("ETag", etag)
	hdr.Set("Cache-Control", "private, max-age=0")
	if etagMatches(r.Header.Get("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	hdr.Set("Content-Type", "application/octet-stream")
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	if f := seg.Form; f != nil {
		// The stored form, authorized without the segment's bytes.
		hdr.Set("Content-Encoding", f.Encoding)
		if werr := writeSized(w, f.Size, f.Data, f.File); werr != nil {
			h.opts.Logger.Debug("segment download aborted", zap.String("request_id", rid), zap.Error(werr))
		}
		return
	}
	size := seg.Meta.ByteLength // a file's length was checked when opened
	if seg.File == nil {
		size = int64(len(seg.Data))
	}
	if !compresses(r.Header.Get("Accept-Encoding"), size, h.opts.CompressMinBytes) {
		// Identity: the length is known, so no chunked encoding, and a
		// segment file goes straight to the socket (sendfile), never
		// through a page-sized buffer.
		if werr := writeSized(w, size, seg.Data, seg.File); werr != nil {
			h.opts.Logger.Debug("segment download aborted", zap.String("request_id", rid), zap.Error(werr))
		}
		return
	}
	enc := pickEncoding(r.Header.Get("Accept-Encoding"))
	if form, ferr := h.eng.Segments().Form(r.Context(), seg, enc); ferr == nil {
		// The segment's stored form (built on its first download in enc):
		// sent as it is, with its length, a file through sendfile.
		defer form.Close()
		hdr.Set("Content-Encoding", enc)
		if werr := writeSized(w, form.Size, form.Data, form.File); werr != nil {
			h.opts.Logger.Debug("segment download aborted", zap.String("request_id", rid), zap.Error(werr))
		}
		return
	} else if !errors.Is(ferr, segstore.ErrNoForms) && !errors.Is(ferr, segstore.ErrNotFound) && r.Context().Err() == nil {
		h.opts.Logger.Warn("segment form unavailable; compressing the download", zap.String("request_id", rid), zap.Error(ferr))
	}
	out := newAnswerWriter(w, w, r.Header.Get("Accept-Encoding"), h.opts.CompressMinBytes)
	if seg.File != nil {
		_, err = io.Copy(out, seg.File)
	} else {
		_, err = out.Write(seg.Data)
	}
	if err != nil {
		h.opts.Logger.Debug("segment download aborted", zap.String("request_id", rid), zap.Error(err))
	}
	if err := out.Close(); err != nil {
		h.opts.Logger.Debug("segment download close failed", zap.String("request_id", rid), zap.Error(err))
	}
}

// etagMatches applies If-None-Match (a list of entity tags or "*").
func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == etag || t == "*" {
			return true
		}
	}
	return false
}

// writeSized answers 200 with a body of size bytes: data when file is
// nil, else file, which goes to the socket through ReadFrom (sendfile)
// when the writer has it, never through a page-sized buffer.
func writeSized(w http.ResponseWriter, size int64, data []byte, file *os.File) error {
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	if file == nil {
		_, err := w.Write(data)
		return err
	}
	if rf, ok := w.(io.ReaderFrom); ok {
		_, err := rf.ReadFrom(file)
		return err
	}
	_, err := io.Copy(w, file)
	return err
}
