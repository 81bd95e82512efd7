package s3blob_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/storage/blobstore/blobstoretest"
	"github.com/synclane/synclane/storage/blobstore/s3blob"
)

// startS3 starts an in-process S3 protocol server (gofakes3) on loopback
// with bucket "blobs" and returns a store on it.
func startS3(t *testing.T) *s3blob.Store {
	t.Helper()
	be := s3mem.New()
	if err := be.CreateBucket("blobs"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(be).Server())
	t.Cleanup(srv.Close)
	s, err := s3blob.New(t.Context(), s3blob.Options{Endpoint: strings.TrimPrefix(srv.URL, "http://"), Bucket: "blobs",
		Prefix: "team/a", Region: "us-east-1", AccessKey: "test-key", SecretKey: "test-secret", Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestS3Contract(t *testing.T) {
	blobstoretest.Run(t, func(t *testing.T) blobstore.Store { return startS3(t) })
}

func TestS3MissingBucket(t *testing.T) {
	srv := httptest.NewServer(gofakes3.New(s3mem.New()).Server())
	defer srv.Close()
	_, err := s3blob.New(t.Context(), s3blob.Options{Endpoint: strings.TrimPrefix(srv.URL, "http://"), Bucket: "nope",
		Region: "us-east-1", AccessKey: "k", SecretKey: "s", Insecure: true})
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("NewS3 on a missing bucket: %v", err)
	}
}

// TestS3Presign: a presigned PUT stores the object under its
// content-addressed key and a presigned GET reads it, both without
// credentials; the URLs carry the requested lifetime.
func TestS3Presign(t *testing.T) {
	s := startS3(t)
	ctx := t.Context()
	data := []byte("presigned through S3")
	id := blobstore.IDOf(data)
	put, err := s.PresignPut(ctx, id, int64(len(data)), 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPut, put, bytes.NewReader(data))
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("presigned PUT: %v %v", res, err)
	}
	res.Body.Close()
	if n, err := s.Stat(ctx, id); err != nil || n != int64(len(data)) {
		t.Fatalf("Stat after the presigned PUT: %d, %v", n, err)
	}
	get, err := s.PresignGet(ctx, id, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(get, "X-Amz-Expires=300") || !strings.Contains(put, "X-Amz-Expires=300") || !strings.Contains(get, "/sha256/") {
		t.Errorf("presigned URLs lack the lifetime or the content address: %s %s", put, get)
	}
	res, err = http.Get(get)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !bytes.Equal(b, data) {
		t.Fatalf("presigned GET: %d %q", res.StatusCode, b)
	}
}
