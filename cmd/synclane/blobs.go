package main

import (
	"context"
	"errors"
	"flag"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine/blobs"
	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/storage/blobstore/pgblob"
	"github.com/synclane/synclane/storage/blobstore/s3blob"
)

// blobConfig holds the blob flags of serve.
type blobConfig struct {
	store                 string // parsed by parseBlobStore
	maxBytes              int64
	timeout               time.Duration
	s3UploadBuffers       int
	s3Endpoint, s3Region  string
	s3AccessKey, s3Secret string
	s3Insecure            bool
	lookup                func(string) (string, bool) // the environment (AWS_* credentials)
}

func blobFlags(fs *flag.FlagSet, c *blobConfig) {
	fs.StringVar(&c.store, "blob-store", "", "where blob bytes live: an absolute directory path or file:///absolute/path (default: <data>/blobs), \"postgres\" (the --postgres database; the default with --postgres), \"s3://bucket[/prefix]\" (with --s3-endpoint), or \"off\" (no blob routes; pushes referencing blobs are refused with blob.not_found); anything else (relative paths, other schemes, S3://) is refused")
	fs.DurationVar(&c.timeout, "blob-store-timeout", s3blob.DefaultTimeout, "S3 blob store: bound on connecting, on the wait for each response's head and on each metadata request (the startup bucket check: serve exits 1 naming the endpoint when it is not answered in time)")
	fs.IntVar(&c.s3UploadBuffers, "s3-upload-buffers", s3blob.DefaultUploadBuffers, "S3 blob store: part buffers of 5 MiB held at most (upload memory is at most this times 5 MiB); more concurrent uploads wait for a buffer")
	fs.Int64Var(&c.maxBytes, "max-blob-bytes", blobs.DefaultMaxBytes, "largest blob in bytes: larger uploads and upload grants get 413 blob.too_large before anything is stored")
	fs.StringVar(&c.s3Endpoint, "s3-endpoint", "", "S3-compatible endpoint host[:port] of an s3:// --blob-store (e.g. s3.amazonaws.com, 127.0.0.1:9000)")
	fs.StringVar(&c.s3Region, "s3-region", "us-east-1", "S3 region of an s3:// --blob-store")
	fs.StringVar(&c.s3AccessKey, "s3-access-key", "", "S3 access key (default: AWS_ACCESS_KEY_ID)")
	fs.StringVar(&c.s3Secret, "s3-secret-key", "", "S3 secret key (default: AWS_SECRET_ACCESS_KEY)")
	fs.BoolVar(&c.s3Insecure, "s3-insecure", false, "talk plain HTTP to --s3-endpoint (loopback test servers only)")
}

func (c *blobConfig) validate() error {
	if c.maxBytes <= 0 {
		return errors.New("--max-blob-bytes must be positive")
	}
	if c.timeout <= 0 {
		return errors.New("--blob-store-timeout must be positive")
	}
	if c.s3UploadBuffers < 1 {
		return errors.New("--s3-upload-buffers must be positive")
	}
	loc, err := parseBlobStore(c.store)
	if err != nil {
		return err
	}
	if loc.kind == blobS3 {
		if c.s3Endpoint == "" {
			return errors.New("an s3:// --blob-store needs --s3-endpoint")
		}
	} else if c.s3Endpoint != "" {
		return errors.New("--s3-endpoint needs an s3:// --blob-store")
	}
	return nil
}

// openBlobs returns the blob configuration of the engine (a zero
// blobs.Options when blobs are off).
func openBlobs(ctx context.Context, c serveConfig, st store, log *zap.Logger) (blobs.Options, error) {
	b := c.blobs
	cfg := blobs.Options{MaxBytes: b.maxBytes}
	var err error
	switch loc := b.location(); {
	case loc.kind == blobOff:
		log.Info("blobs are off: no blob routes, and pushes referencing a blob are refused with blob.not_found")
		return blobs.Options{}, nil
	case loc.kind == blobPostgres || (loc.kind == blobDefault && c.postgresURL != ""):
		pg := st.pg
		if pg == nil {
			return cfg, errors.New("--blob-store postgres needs --postgres")
		}
		cfg.Store, err = pgblob.New(ctx, pg.Pool(), pg.SchemaName())
	case loc.kind == blobS3:
		cfg.Store, err = openS3(ctx, b, loc, log)
	default:
		dir := loc.dir
		if loc.kind == blobDefault {
			dir = filepath.Join(c.data, "blobs")
		}
		if c.postgresURL != "" {
			log.Warn("blobs in a local directory next to a PostgreSQL database: other processes on that database cannot serve them; use --blob-store postgres or s3://", zap.String("dir", dir))
		}
		cfg.Store, err = blobstore.NewFS(dir)
	}
	return cfg, err
}

// credential returns the flag's value or the environment variable's.
func (c blobConfig) credential(flagValue, env string) string {
	if flagValue != "" || c.lookup == nil {
		return flagValue
	}
	v, _ := c.lookup(env)
	return v
}
