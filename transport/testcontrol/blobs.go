package testcontrol

import (
	"net/http"
	"strings"
	"time"

	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/segstore"
)

// blobPresign has two body forms:
//
//   - {"enabled":bool} → {}: the runtime presign switch
//     (blobs.Service.SetPresign). Off: upload grants answer {} (no grant: the
//     client uploads through PUT /blobs/{id}) and downloads stream the
//     bytes; on: grants answer {"url","urlExpiresAtMs"} (or
//     {"present":true}) and downloads answer {"url","urlExpiresAtMs"}.
//     URLs issued earlier stay valid until they expire. Accepted also
//     when the server stores no blobs (it then has no effect).
//   - {"blobId","method":"GET"|"PUT","byteLength"?,"ttlSeconds"} →
//     {"url","urlExpiresAtMs"}: a signed blob URL issued without host auth
//     or an authorization check, for conformance tests of presigned
//     transfers and their expiry (0 <= ttlSeconds <= 900; 0 issues a URL
//     already expired beyond the 60 s skew). The partition is
//     x-partition's. 409 when the server serves no blobs.
//
// A body mixing the forms, or neither, is 400 and changes nothing.
func (c Controls) blobPresign(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Enabled    *bool  `json:"enabled"`
		BlobID     string `json:"blobId"`
		Method     string `json:"method"`
		ByteLength int64  `json:"byteLength"`
		TTLSeconds *int64 `json:"ttlSeconds"`
	}
	if !readJSON(w, r, &body) {
		return
	}
	signForm := body.BlobID != "" || body.Method != "" || body.ByteLength != 0 || body.TTLSeconds != nil
	if body.Enabled != nil {
		if signForm {
			writeError(w, http.StatusBadRequest, syncerr.New(syncerr.InvalidRequest, `body is either {"enabled":bool} or {"blobId","method","byteLength"?,"ttlSeconds"}, not both`))
			return
		}
		c.Engine.Blobs().SetPresign(*body.Enabled)
		writeJSON(w, struct{}{})
		return
	}
	if !c.Engine.Blobs().Enabled() {
		writeError(w, http.StatusConflict, syncerr.New(syncerr.InvalidRequest, "this server stores no blobs"))
		return
	}
	op := map[string]string{"GET": segstore.BlobOpGet, "PUT": segstore.BlobOpPut}
	o, ok := op[strings.ToUpper(body.Method)]
	if !ok || body.BlobID == "" || body.ByteLength < 0 || body.TTLSeconds == nil || *body.TTLSeconds < 0 || *body.TTLSeconds > int64(segstore.MaxSignedURLTTL/time.Second) {
		writeError(w, http.StatusBadRequest, syncerr.New(syncerr.InvalidRequest, `body must be {"enabled":bool}, or {"blobId":id,"method":"GET"|"PUT","byteLength"?:n,"ttlSeconds":0..900}`))
		return
	}
	tok, exp := c.Engine.Blobs().SignURL(partitionOf(r), body.BlobID, o, body.ByteLength, time.Duration(*body.TTLSeconds)*time.Second)
	writeJSON(w, struct {
		URL            string `json:"url"`
		URLExpiresAtMs int64  `json:"urlExpiresAtMs"`
	}{strings.TrimRight(c.Engine.Blobs().PublicURL(), "/") + "/blobs/" + body.BlobID + "?st=" + tok, exp})
}
