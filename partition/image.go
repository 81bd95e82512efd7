package partition

import (
	"context"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage/segstore"
)

// ImageBuilder builds the SQLite segment images (SPEC §5.3) a bootstrap
// serves to clients accepting them (accept bit 2). Building a SQLite file
// needs a SQLite driver, which this package does not link: the host
// passes one in (Config.Images; sqliteimage.Builder is the one in this
// module). Both methods return the image's bytes and its row count, and
// refuse a table with encrypted columns.
type ImageBuilder interface {
	// Build builds the image of table t from the rows scan reads.
	Build(ctx context.Context, t *schema.Table, schemaVersion int32, asOf int64, scopeDigest string, scan segstore.ImageScan) ([]byte, int64, error)
	// BuildCopy builds the same image with the rows written into the
	// file by copyRows (a store copying them itself).
	BuildCopy(ctx context.Context, t *schema.Table, schemaVersion int32, asOf int64, scopeDigest string, copyRows segstore.ImageCopy) ([]byte, int64, error)
}
