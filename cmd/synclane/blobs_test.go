package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/synclane/synclane/storage/blobstore"
)

func TestBlobFlagsValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  blobConfig
		want string // "" for valid
	}{
		{"default", blobConfig{maxBytes: 1}, ""},
		{"directory", blobConfig{store: "/tmp/blobs", maxBytes: 1}, ""},
		{"s3", blobConfig{store: "s3://bucket/prefix", s3Endpoint: "127.0.0.1:9000", maxBytes: 1}, ""},
		{"zero cap", blobConfig{maxBytes: 0}, "--max-blob-bytes must be positive"},
		{"s3 without endpoint", blobConfig{store: "s3://bucket", maxBytes: 1}, "needs --s3-endpoint"},
		{"s3 without bucket", blobConfig{store: "s3:///x", s3Endpoint: "h", maxBytes: 1}, "names no bucket"},
		{"endpoint without s3", blobConfig{s3Endpoint: "h", maxBytes: 1}, "needs an s3:// --blob-store"},
	} {
		err := c.cfg.validate()
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: validate() = %v, want %q", c.name, err, c.want)
		}
	}
}

// TestServeS3BlobStore: serve with an s3:// blob store on an in-process
// S3 server (gofakes3 on loopback) stores an upload there and serves it.
func TestServeS3BlobStore(t *testing.T) {
	be := s3mem.New()
	if err := be.CreateBucket("blobs"); err != nil {
		t.Fatal(err)
	}
	s3srv := httptest.NewServer(gofakes3.New(be).Server())
	defer s3srv.Close()
	base := startTestControl(t, "--blob-store", "s3://blobs/synclane", "--s3-endpoint", strings.TrimPrefix(s3srv.URL, "http://"),
		"--s3-insecure", "--s3-access-key", "k", "--s3-secret-key", "s")
	data := []byte("bytes kept in S3")
	id := blobstore.IDOf(data)
	c := newThingsClient(base, "ada", "c-ada")
	if err := c.UploadBlob(context.Background(), id, "text/plain", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("upload: %v", err)
	}
	obj, err := be.HeadObject("blobs", "synclane/sha256/"+strings.TrimPrefix(id, "sha256:"))
	if err != nil || obj.Size != int64(len(data)) {
		t.Fatalf("the object in S3: %+v, %v", obj, err)
	}
	_, get := presignBlob(t, base, `{"blobId":"`+id+`","method":"GET","ttlSeconds":60}`)
	res, err := http.Get(get["url"].(string))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !bytes.Equal(b, data) {
		t.Fatalf("GET through synclane from S3: %d %q", res.StatusCode, b)
	}
}

func presignBlob(t *testing.T, base, body string) (int, map[string]any) {
	var out map[string]any
	code := control(t, "POST", base+"/_test/blob-presign", body, &out)
	return code, out
}
