package main

import (
	"flag"
	"fmt"

	"github.com/synclane/synclane/engine/segments"
	"github.com/synclane/synclane/storage/segstore"
)

// segQuotaConfig holds the segment store quota flags of serve
// (segments.Options.StoreMaxBytes, StoreMaxFiles).
type segQuotaConfig struct {
	maxBytes int64
	maxFiles int
}

func segQuotaFlags(fs *flag.FlagSet, q *segQuotaConfig) {
	fs.Int64Var(&q.maxBytes, "segment-store-max-bytes", segstore.DefaultMaxStoreBytes, "bytes the segment store may hold (each segment once); over it the least recently used segments not handed out in the last 5 minutes are evicted (-1: unbounded)")
	fs.IntVar(&q.maxFiles, "segment-store-max-files", segstore.DefaultMaxStoreFiles, "segments (files in segments.db-data) the segment store may hold; evicted as for --segment-store-max-bytes (-1: unbounded)")
}

// validate refuses 0 (which would read as "default" to the engine) and
// values below -1.
func (q segQuotaConfig) validate() error {
	if q.maxBytes == 0 || q.maxBytes < -1 {
		return fmt.Errorf("--segment-store-max-bytes must be positive or -1 (unbounded), got %d", q.maxBytes)
	}
	if q.maxFiles == 0 || q.maxFiles < -1 {
		return fmt.Errorf("--segment-store-max-files must be positive or -1 (unbounded), got %d", q.maxFiles)
	}
	return nil
}

// apply sets the quota in o.
func (q segQuotaConfig) apply(o *segments.Options) {
	o.StoreMaxBytes, o.StoreMaxFiles = q.maxBytes, q.maxFiles
}
