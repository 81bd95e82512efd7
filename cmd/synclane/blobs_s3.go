package main

import (
	"context"
	"errors"

	"github.com/synclane/synclane/storage/blobstore"
)

// openS3 opens an s3:// blob store.
func openS3(ctx context.Context, b blobConfig) (blobstore.Store, error) {
	return nil, errors.New("the S3 blob store is not built yet")
}
