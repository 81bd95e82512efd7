package main

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/storage/blobstore/s3blob"
)

// openS3 opens an s3://bucket/prefix blob store at --s3-endpoint, with
// credentials from --s3-access-key/--s3-secret-key or AWS_ACCESS_KEY_ID /
// AWS_SECRET_ACCESS_KEY. Blobs over s3blob.MaxBlobBytes are refused
// by configuration. It logs before checking the bucket, which is bounded
// by --blob-store-timeout.
func openS3(ctx context.Context, b blobConfig, loc blobLocation, log *zap.Logger) (blobstore.Store, error) {
	if b.maxBytes > s3blob.MaxBlobBytes {
		return nil, fmt.Errorf("--max-blob-bytes %d exceeds the S3 store's %d (one server-side copy)", b.maxBytes, s3blob.MaxBlobBytes)
	}
	log.Info("checking the S3 blob store", zap.String("endpoint", b.s3Endpoint), zap.String("bucket", loc.bucket),
		zap.String("prefix", loc.prefix), zap.Duration("timeout", b.timeout), zap.Int("upload_buffers", b.s3UploadBuffers),
		zap.Int("part_bytes", s3blob.DefaultPartSize))
	s, err := s3blob.New(ctx, s3blob.Options{Endpoint: b.s3Endpoint, Bucket: loc.bucket, Prefix: loc.prefix, Region: b.s3Region,
		AccessKey: b.credential(b.s3AccessKey, "AWS_ACCESS_KEY_ID"), SecretKey: b.credential(b.s3Secret, "AWS_SECRET_ACCESS_KEY"),
		Insecure: b.s3Insecure, Timeout: b.timeout, UploadBuffers: b.s3UploadBuffers})
	if err != nil {
		return nil, fmt.Errorf("S3 blob store %s at %s (--blob-store-timeout %s): %w", b.store, b.s3Endpoint, b.timeout, err)
	}
	return s, nil
}
