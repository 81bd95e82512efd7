package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/storage/blobstore/blobstoretest"
)

func TestBlobFlagsValidate(t *testing.T) {
	ok := func(b blobConfig) blobConfig {
		b.maxBytes, b.timeout, b.s3UploadBuffers = 1, time.Second, 1
		return b
	}
	for _, c := range []struct {
		name string
		cfg  blobConfig
		want string // "" for valid
	}{
		{"default", ok(blobConfig{}), ""},
		{"directory", ok(blobConfig{store: "/tmp/blobs"}), ""},
		{"s3", ok(blobConfig{store: "s3://bucket/prefix", s3Endpoint: "127.0.0.1:9000"}), ""},
		{"zero cap", blobConfig{timeout: time.Second, s3UploadBuffers: 1}, "--max-blob-bytes must be positive"},
		{"zero timeout", blobConfig{maxBytes: 1, s3UploadBuffers: 1}, "--blob-store-timeout must be positive"},
		{"zero upload buffers", blobConfig{maxBytes: 1, timeout: time.Second}, "--s3-upload-buffers must be positive"},
		{"s3 without endpoint", ok(blobConfig{store: "s3://bucket"}), "needs --s3-endpoint"},
		{"s3 without bucket", ok(blobConfig{store: "s3:///x", s3Endpoint: "h"}), "names no bucket"},
		{"upper-case scheme", ok(blobConfig{store: "S3://bucket/prefix", s3Endpoint: "h"}), "unknown scheme"},
		{"relative path", ok(blobConfig{store: "blobs"}), "relative path"},
		{"endpoint without s3", ok(blobConfig{s3Endpoint: "h"}), "needs an s3:// --blob-store"},
	} {
		err := c.cfg.validate()
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: validate() = %v, want %q", c.name, err, c.want)
		}
	}
}

// TestParseBlobStore: the accepted --blob-store forms parse to their
// store; everything else is refused with a message naming the accepted
// forms.
func TestParseBlobStore(t *testing.T) {
	for _, c := range []struct {
		in   string
		want blobLocation
		err  string // "" when accepted
	}{
		{"", blobLocation{kind: blobDefault}, ""},
		{"off", blobLocation{kind: blobOff}, ""},
		{"postgres", blobLocation{kind: blobPostgres}, ""},
		{"s3://bucket", blobLocation{kind: blobS3, bucket: "bucket"}, ""},
		{"s3://bucket/", blobLocation{kind: blobS3, bucket: "bucket"}, ""},
		{"s3://bucket/team/a", blobLocation{kind: blobS3, bucket: "bucket", prefix: "team/a"}, ""},
		{"/var/lib/blobs", blobLocation{kind: blobDir, dir: "/var/lib/blobs"}, ""},
		{"/var/lib/../blobs/", blobLocation{kind: blobDir, dir: "/var/blobs"}, ""},
		{"file:///var/lib/blobs", blobLocation{kind: blobDir, dir: "/var/lib/blobs"}, ""},
		{"S3://bucket/prefix", blobLocation{}, "unknown scheme"},
		{"s3:/bucket", blobLocation{}, "relative path"},
		{"s3://", blobLocation{}, "names no bucket"},
		{"s3:///prefix", blobLocation{}, "names no bucket"},
		{"gs://bucket", blobLocation{}, "unknown scheme"},
		{"http://host/x", blobLocation{}, "unknown scheme"},
		{"blobs", blobLocation{}, "relative path"},
		{"./blobs", blobLocation{}, "relative path"},
		{"../x/blobs", blobLocation{}, "relative path"},
		{"Off", blobLocation{}, "relative path"},
		{"file://host/var/blobs", blobLocation{}, "file:///absolute/path"},
		{"file:relative", blobLocation{}, "file:///absolute/path"},
		{"file://", blobLocation{}, "file:///absolute/path"},
		{"FILE:///var/blobs", blobLocation{}, "file:///absolute/path"},
		{"file:///var/blobs?x=1", blobLocation{}, "file:///absolute/path"},
	} {
		got, err := parseBlobStore(c.in)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("parseBlobStore(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), blobStoreForms)):
			t.Errorf("parseBlobStore(%q) = %+v, %v; want an error with %q naming the accepted forms", c.in, got, err, c.err)
		}
	}
}

// TestServeRefusesBadBlobStore: serve, prune, backup and restore exit 2
// on a --blob-store that does not parse, saying the accepted forms, and
// create nothing for it.
func TestServeRefusesBadBlobStore(t *testing.T) {
	for _, cmd := range []string{"serve", "prune", "backup", "restore"} {
		for _, bad := range []string{"S3://bucket/prefix", "relative/blobs", "gs://bucket"} {
			dir := t.TempDir()
			t.Chdir(dir)
			args := []string{cmd, "--data", filepath.Join(dir, "data"), "--blob-store", bad}
			switch cmd {
			case "serve":
				args = append(args, "--listen", "127.0.0.1:0")
			case "backup":
				args = append(args, "--to", filepath.Join(dir, "backup"))
			case "restore":
				args = append(args, "--from", filepath.Join(dir, "backup"))
			}
			code, _, stderr := runCmdEnv(t, nil, args...)
			if code != 2 || !strings.Contains(stderr, blobStoreForms) {
				t.Errorf("%s --blob-store %s: exit %d, stderr %q; want 2 naming the accepted forms", cmd, bad, code, stderr)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("%s --blob-store %s created %d entries in the working directory (first %s)", cmd, bad, len(entries), entries[0].Name())
			}
		}
	}
}

// TestServeSilentS3Endpoint: serve with an S3 endpoint that accepts
// connections and never answers logs the check, then exits 1 within
// --blob-store-timeout with an error naming the endpoint and the timeout.
func TestServeSilentS3Endpoint(t *testing.T) {
	addr := blobstoretest.SilentListener(t)
	code, _, stderr := runCmdEnv(t, nil, "serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--blob-store", "s3://blobs/x",
		"--s3-endpoint", addr, "--s3-insecure", "--s3-access-key", "k", "--s3-secret-key", "s", "--blob-store-timeout", "300ms")
	check := strings.Index(stderr, "checking the S3 blob store")
	fail := strings.Index(stderr, "did not answer in time")
	if code != 1 || check < 0 || fail < check || !strings.Contains(stderr[fail:], addr) || !strings.Contains(stderr[fail:], "300ms") {
		t.Fatalf("serve on a silent S3 endpoint: exit %d, stderr:\n%s\nwant exit 1, a log line before the check and an error naming %s and 300ms", code, stderr, addr)
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
