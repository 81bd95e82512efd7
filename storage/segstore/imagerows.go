package segstore

import (
	"context"

	"github.com/synclane/synclane/storage"
)

// ImageScan reads the snapshot rows after a row id (nil: from the start),
// at most limit of them, in row-id order.
type ImageScan func(ctx context.Context, after *string, limit int) ([]storage.RowRecord, error)

// ImageCopy writes the rows of an image into the data table of the image
// file at imagePath, whose tables exist and are empty, and returns how
// many it wrote. It runs while nothing else has the file open for writing.
type ImageCopy func(ctx context.Context, imagePath string) (int64, error)
