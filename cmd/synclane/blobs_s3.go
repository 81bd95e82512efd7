package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/storage/blobstore/s3blob"
)

// openS3 opens an s3://bucket/prefix blob store at --s3-endpoint, with
// credentials from --s3-access-key/--s3-secret-key or AWS_ACCESS_KEY_ID /
// AWS_SECRET_ACCESS_KEY. Blobs over s3blob.MaxBlobBytes are refused
// by configuration.
func openS3(ctx context.Context, b blobConfig) (blobstore.Store, error) {
	if b.maxBytes > s3blob.MaxBlobBytes {
		return nil, fmt.Errorf("--max-blob-bytes %d exceeds the S3 store's %d (one server-side copy)", b.maxBytes, s3blob.MaxBlobBytes)
	}
	bucket, prefix, _ := strings.Cut(strings.TrimPrefix(b.store, "s3://"), "/")
	return s3blob.New(ctx, s3blob.Options{Endpoint: b.s3Endpoint, Bucket: bucket, Prefix: prefix, Region: b.s3Region,
		AccessKey: b.credential(b.s3AccessKey, "AWS_ACCESS_KEY_ID"), SecretKey: b.credential(b.s3Secret, "AWS_SECRET_ACCESS_KEY"),
		Insecure: b.s3Insecure})
}
