package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/transport/httperr"
)

// The blob presign switch changes both the upload grant and the download
// answer; off is the start in test mode unless --signed-url-ttl is given.
func TestTestControlBlobPresignSwitch(t *testing.T) {
	base := startTestControl(t)
	control(t, "PUT", base+"/_test/allowed-scopes/ada", `{"project_id":["p1"]}`, nil)
	c := newThingsClient(base, "ada", "c-ada")
	ctx := context.Background()
	data := []byte("attachment bytes")
	id := blobstore.IDOf(data)
	fresh := blobstore.IDOf([]byte("never uploaded"))
	if err := c.UploadBlob(ctx, id, "text/plain", strings.NewReader(string(data)), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	ref := `{"blobId":"` + id + `","byteLength":16}`
	if pr := pushRow(t, c, ssp2.Row{"b1", "p1", nil, nil, nil, nil, nil, ref, nil}, "b1"); pr.Status != ssp2.CommitApplied {
		t.Fatalf("push the referencing row: %+v", pr)
	}
	grant := func(blob string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, c.BlobURL(blob)+"/upload-grant", strings.NewReader(`{"byteLength":16}`))
		req.Header.Set("X-Actor", "ada")
		return doBody(t, req, http.StatusOK)
	}
	download := func() (contentType, body string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, c.BlobURL(id), nil)
		req.Header.Set("X-Actor", "ada")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET blob: %d %s", res.StatusCode, b)
		}
		return res.Header.Get("Content-Type"), string(b)
	}
	presigned := func(base, answer string) string {
		t.Helper()
		var g map[string]any
		if err := json.Unmarshal([]byte(answer), &g); err != nil || len(g) != 2 || g["urlExpiresAtMs"] == nil {
			t.Fatalf("answer %s is not {\"url\",\"urlExpiresAtMs\"}", answer)
		}
		u, _ := g["url"].(string)
		if !strings.HasPrefix(u, base+"/blobs/") || !strings.Contains(u, "?st=") {
			t.Fatalf("answer url %q", u)
		}
		return u
	}
	setPresign := func(body string) {
		t.Helper()
		var ans map[string]any
		if code := control(t, "POST", base+"/_test/blob-presign", body, &ans); code != http.StatusOK || len(ans) != 0 {
			t.Fatalf("blob-presign %s: %d %v", body, code, ans)
		}
	}

	off := func(when string) {
		t.Helper()
		for _, b := range []string{fresh, id} {
			if g := grant(b); strings.TrimSpace(g) != `{}` {
				t.Fatalf("%s: grant for %s = %s, want {} (no presigned upload)", when, b, g)
			}
		}
		if ct, body := download(); ct != "text/plain" || body != string(data) {
			t.Fatalf("%s: download = %s %q, want the bytes", when, ct, body)
		}
	}
	off("at start")

	setPresign(`{"enabled":true}`)
	put := presigned(base, grant(fresh))
	req, _ := http.NewRequest(http.MethodPut, put, strings.NewReader("never uploaded"))
	doBody(t, req, http.StatusOK) // the presigned PUT needs no host auth
	if g := grant(id); strings.TrimSpace(g) != `{"present":true}` {
		t.Fatalf("grant for a stored blob, presign on: %s", g)
	}
	ct, body := download()
	if !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("download with presign on: %s %q, want a URL", ct, body)
	}
	req, _ = http.NewRequest(http.MethodGet, presigned(base, body), nil)
	if got := doBody(t, req, http.StatusOK); got != string(data) {
		t.Fatalf("presigned GET: %q", got)
	}

	setPresign(`{"enabled":false}`)
	off("switched off")

	for _, bad := range []string{`{"enabled":"yes"}`, `{"enabled":true,"blobId":"` + id + `"}`, `{"enabled":true,"ttlSeconds":5}`, `{"enabled":true,"other":1}`} {
		var e httperr.Body
		if code := control(t, "POST", base+"/_test/blob-presign", bad, &e); code != http.StatusBadRequest || e.Code != "sync.invalid_request" {
			t.Fatalf("blob-presign %s: %d %+v, want 400", bad, code, e)
		}
	}
	off("after refused bodies")

	// With --signed-url-ttl the host configured presigned transfers: on
	// at start.
	base2 := startTestControl(t, "--signed-url-ttl", "60s")
	c2 := newThingsClient(base2, "ada", "c-ada")
	req, _ = http.NewRequest(http.MethodPost, c2.BlobURL(fresh)+"/upload-grant", strings.NewReader(`{"byteLength":16}`))
	req.Header.Set("X-Actor", "ada")
	presigned(base2, doBody(t, req, http.StatusOK))
}

// doBody sends req and returns the body, requiring status.
func doBody(t *testing.T, req *http.Request, status int) string {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != status {
		t.Fatalf("%s %s: %d %s, want %d", req.Method, req.URL, res.StatusCode, b, status)
	}
	return string(b)
}
