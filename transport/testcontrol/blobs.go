package testcontrol

import (
	"net/http"
	"strings"
	"time"

	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/segstore"
)

// blobPresign issues a signed blob URL without host auth or an
// authorization check, for conformance tests of presigned transfers and
// their expiry: body {"blobId","method":"GET"|"PUT","byteLength"?,
// "ttlSeconds"} (0 <= ttlSeconds <= 900; 0 issues a URL already expired
// beyond the 60 s skew) → {"url","urlExpiresAtMs"}. The partition is
// x-partition's. 409 when the server serves no blobs.
func (c Controls) blobPresign(w http.ResponseWriter, r *http.Request) {
	if !c.Engine.BlobsEnabled() {
		writeError(w, http.StatusConflict, syncerr.New(syncerr.InvalidRequest, "this server stores no blobs"))
		return
	}
	var body struct {
		BlobID     string `json:"blobId"`
		Method     string `json:"method"`
		ByteLength int64  `json:"byteLength"`
		TTLSeconds *int64 `json:"ttlSeconds"`
	}
	if !readJSON(w, r, &body) {
		return
	}
	op := map[string]string{"GET": segstore.BlobOpGet, "PUT": segstore.BlobOpPut}
	o, ok := op[strings.ToUpper(body.Method)]
	if !ok || body.BlobID == "" || body.ByteLength < 0 || body.TTLSeconds == nil || *body.TTLSeconds < 0 || *body.TTLSeconds > int64(segstore.MaxSignedURLTTL/time.Second) {
		writeError(w, http.StatusBadRequest, syncerr.New(syncerr.InvalidRequest, `body must be {"blobId":id,"method":"GET"|"PUT","byteLength"?:n,"ttlSeconds":0..900}`))
		return
	}
	tok, exp := c.Engine.SignBlobURL(partitionOf(r), body.BlobID, o, body.ByteLength, time.Duration(*body.TTLSeconds)*time.Second)
	writeJSON(w, struct {
		URL            string `json:"url"`
		URLExpiresAtMs int64  `json:"urlExpiresAtMs"`
	}{strings.TrimRight(c.Engine.PublicURL(), "/") + "/blobs/" + body.BlobID + "?st=" + tok, exp})
}
