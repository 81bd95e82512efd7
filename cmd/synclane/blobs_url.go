package main

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
)

// blobKind is where the --blob-store flag puts blob bytes.
type blobKind int

const (
	blobDefault  blobKind = iota // no flag: <data>/blobs, or the database with --postgres
	blobOff                      // "off"
	blobPostgres                 // "postgres"
	blobS3                       // "s3://bucket[/prefix]"
	blobDir                      // "file:///abs/path" or "/abs/path"
)

// blobLocation is a parsed --blob-store value.
type blobLocation struct {
	kind           blobKind
	bucket, prefix string // blobS3
	dir            string // blobDir: absolute and clean
}

// blobStoreForms names the accepted --blob-store values, for messages.
const blobStoreForms = `want s3://bucket[/prefix], file:///absolute/path, an absolute path, "postgres" or "off"`

// parseBlobStore parses a --blob-store value. It accepts "" (the
// default), "off", "postgres", s3://bucket[/prefix] (lower-case scheme,
// non-empty bucket), file:///absolute/path and an absolute path; anything
// else (another scheme or case of one, a relative path, an empty bucket)
// is an error naming the accepted forms. Relative paths are refused
// rather than resolved: a server started from another directory would
// silently use another store.
func parseBlobStore(s string) (blobLocation, error) {
	switch s {
	case "":
		return blobLocation{kind: blobDefault}, nil
	case "off":
		return blobLocation{kind: blobOff}, nil
	case "postgres":
		return blobLocation{kind: blobPostgres}, nil
	}
	if rest, ok := strings.CutPrefix(s, "s3://"); ok {
		bucket, prefix, _ := strings.Cut(rest, "/")
		if bucket == "" {
			return blobLocation{}, fmt.Errorf("--blob-store %q names no bucket: %s", s, blobStoreForms)
		}
		return blobLocation{kind: blobS3, bucket: bucket, prefix: strings.Trim(prefix, "/")}, nil
	}
	if filepath.IsAbs(s) {
		return blobLocation{kind: blobDir, dir: filepath.Clean(s)}, nil
	}
	if scheme, _, ok := strings.Cut(s, ":"); ok && strings.EqualFold(scheme, "file") {
		u, err := url.Parse(s)
		if err != nil || !strings.HasPrefix(s, "file:") || u.Host != "" || u.Opaque != "" || u.RawQuery != "" || u.Fragment != "" || !filepath.IsAbs(u.Path) {
			return blobLocation{}, fmt.Errorf("--blob-store %q is not a file URL of an absolute path (file:///absolute/path): %s", s, blobStoreForms)
		}
		return blobLocation{kind: blobDir, dir: filepath.Clean(u.Path)}, nil
	}
	if scheme, _, ok := strings.Cut(s, "://"); ok {
		return blobLocation{}, fmt.Errorf("--blob-store %q: unknown scheme %q (schemes are lower case): %s", s, scheme, blobStoreForms)
	}
	return blobLocation{}, fmt.Errorf("--blob-store %q is a relative path (relative paths are refused, not resolved): %s", s, blobStoreForms)
}

// location returns the parsed --blob-store (validate refused anything
// that does not parse; an unparsable value reads as the default here).
func (c blobConfig) location() blobLocation {
	l, _ := parseBlobStore(c.store)
	return l
}
