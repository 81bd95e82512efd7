package main

import (
	"strings"
	"testing"
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
