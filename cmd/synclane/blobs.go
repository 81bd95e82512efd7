package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine/blobs"
	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/storage/blobstore/pgblob"
)

// blobConfig holds the blob flags of serve.
type blobConfig struct {
	store                 string // "", "off", "postgres", "s3://bucket/prefix" or a directory
	maxBytes              int64
	s3Endpoint, s3Region  string
	s3AccessKey, s3Secret string
	s3Insecure            bool
	lookup                func(string) (string, bool) // the environment (AWS_* credentials)
}

func blobFlags(fs *flag.FlagSet, c *blobConfig) {
	fs.StringVar(&c.store, "blob-store", "", "where blob bytes live: a directory (default: <data>/blobs), \"postgres\" (the --postgres database; the default with --postgres), \"s3://bucket/prefix\" (with --s3-endpoint), or \"off\" (no blob routes; pushes referencing blobs are refused with blob.not_found)")
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
	if strings.HasPrefix(c.store, "s3://") {
		if c.s3Endpoint == "" {
			return errors.New("an s3:// --blob-store needs --s3-endpoint")
		}
		if bucket, _, _ := strings.Cut(strings.TrimPrefix(c.store, "s3://"), "/"); bucket == "" {
			return fmt.Errorf("--blob-store %q names no bucket: want s3://bucket/prefix", c.store)
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
	switch {
	case b.store == "off":
		log.Info("blobs are off: no blob routes, and pushes referencing a blob are refused with blob.not_found")
		return blobs.Options{}, nil
	case b.store == "postgres" || (b.store == "" && c.postgresURL != ""):
		pg := st.pg
		if pg == nil {
			return cfg, errors.New("--blob-store postgres needs --postgres")
		}
		cfg.Store, err = pgblob.New(ctx, pg.Pool(), pg.SchemaName())
	case strings.HasPrefix(b.store, "s3://"):
		cfg.Store, err = openS3(ctx, b)
	default:
		dir := b.store
		if dir == "" {
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
