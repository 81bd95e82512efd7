package pgblob_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/storage/blobstore/pgblob"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

// This file measures the PostgreSQL blob store (chunked bytea, pgblob.go)
// against a minimal large-object store (pgx LargeObjects), the two layouts
// the blobs issue asked to compare. The large-object store lives here, in
// a test file, because it is a measurement harness, not a product store
// (see bench/RESULTS.md "PostgreSQL blob store: chunked bytea vs large
// objects" for the figures and the decision):
//
//	SYNCLANE_TEST_POSTGRES=... go test -run '^$' -bench BenchmarkPostgresBlobLayouts -benchtime 4x ./storage/blobstore/pgblob/
//
// Each sub-benchmark gets a fresh one-connection pool, so backend_peak_MB
// is the peak RSS (VmHWM) of the one PostgreSQL backend that did the work
// (read from /proc, so only with a server on this machine; 0 otherwise);
// B/op is the client's allocation per blob.

// loStore is a blob store on PostgreSQL large objects: one large object per
// blob, its oid in <schema>.bench_blob_lo. Put writes through a Verifier in
// one transaction (a mismatch rolls the large object back with it); Open
// reads inside a read-only transaction the reader holds until Close.
type loStore struct {
	pool  *pgxpool.Pool
	table string
}

func newLOStore(ctx context.Context, pool *pgxpool.Pool, schema string) (*loStore, error) {
	s := &loStore{pool: pool, table: pgx.Identifier{schema, "bench_blob_lo"}.Sanitize()}
	_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.table+` (blob_id text PRIMARY KEY, lo oid NOT NULL, byte_length bigint NOT NULL)`)
	return s, err
}

func (s *loStore) Put(ctx context.Context, id string, r io.Reader, maxBytes int64) (int64, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	los := tx.LargeObjects()
	oid, err := los.Create(ctx, 0)
	if err != nil {
		return 0, err
	}
	obj, err := los.Open(ctx, oid, pgx.LargeObjectModeWrite)
	if err != nil {
		return 0, err
	}
	v := blobstore.NewVerifier(ctx, r, id, maxBytes)
	if _, err := io.CopyBuffer(obj, v, make([]byte, blobstore.BufferSize)); err != nil {
		return v.N(), err
	}
	if err := v.Check(); err != nil {
		return v.N(), err
	}
	if err := obj.Close(); err != nil {
		return v.N(), err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+s.table+` (blob_id, lo, byte_length) VALUES ($1, $2, $3)`, id, oid, v.N()); err != nil {
		return v.N(), err
	}
	return v.N(), tx.Commit(ctx)
}

type loReader struct {
	tx  pgx.Tx
	obj *pgx.LargeObject
}

func (r *loReader) Read(p []byte) (int, error) { return r.obj.Read(p) }
func (r *loReader) Close() error               { return r.tx.Rollback(context.Background()) }

func (s *loStore) Open(ctx context.Context, id string) (io.ReadCloser, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	var oid uint32
	if err := tx.QueryRow(ctx, `SELECT lo FROM `+s.table+` WHERE blob_id = $1`, id).Scan(&oid); err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	los := tx.LargeObjects()
	obj, err := los.Open(ctx, oid, pgx.LargeObjectModeRead)
	if err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	return &loReader{tx: tx, obj: obj}, nil
}

func (s *loStore) Delete(ctx context.Context, id string) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var oid uint32
	if err := tx.QueryRow(ctx, `DELETE FROM `+s.table+` WHERE blob_id = $1 RETURNING lo`, id).Scan(&oid); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	}
	los := tx.LargeObjects()
	if err := los.Unlink(ctx, oid); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// benchLayout is what the benchmark needs of either layout.
type benchLayout interface {
	Put(ctx context.Context, id string, r io.Reader, maxBytes int64) (int64, error)
	Open(ctx context.Context, id string) (io.ReadCloser, error)
	Delete(ctx context.Context, id string) error
}

// byteaLayout adapts the product store (pgblob.Store).
type byteaLayout struct{ *pgblob.Store }

func (b byteaLayout) Open(ctx context.Context, id string) (io.ReadCloser, error) {
	return b.Store.Open(ctx, id, 0, -1)
}

func BenchmarkPostgresBlobLayouts(b *testing.B) {
	url := pgtest.URL(b)
	schema := pgtest.NewSchema(b)
	ctx := context.Background()
	layouts := []struct {
		name string
		open func(*pgxpool.Pool) (benchLayout, error)
	}{
		{"bytea_chunks", func(p *pgxpool.Pool) (benchLayout, error) {
			s, err := pgblob.New(ctx, p, schema)
			return byteaLayout{s}, err
		}},
		{"large_object", func(p *pgxpool.Pool) (benchLayout, error) { return newLOStore(ctx, p, schema) }},
	}
	for _, size := range []int{1 << 20, 64 << 20} {
		data := make([]byte, size)
		if _, err := rand.Read(data); err != nil { // incompressible, like media
			b.Fatal(err)
		}
		id := blobstore.IDOf(data)
		for _, l := range layouts {
			for _, op := range []string{"put", "get"} {
				b.Run(fmt.Sprintf("%s/%dMiB/%s", l.name, size>>20, op), func(b *testing.B) {
					cfg, err := pgxpool.ParseConfig(url)
					if err != nil {
						b.Fatal(err)
					}
					cfg.MaxConns, cfg.MinConns = 1, 1
					pool, err := pgxpool.NewWithConfig(ctx, cfg)
					if err != nil {
						b.Fatal(err)
					}
					defer pool.Close()
					s, err := l.open(pool)
					if err != nil {
						b.Fatal(err)
					}
					var pid int
					if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
						b.Fatal(err)
					}
					if err := s.Delete(ctx, id); err != nil {
						b.Fatal(err)
					}
					if op == "get" {
						if _, err := s.Put(ctx, id, bytes.NewReader(data), int64(size)); err != nil {
							b.Fatal(err)
						}
					}
					h := sha256.New()
					b.SetBytes(int64(size))
					b.ReportAllocs()
					b.ResetTimer()
					for range b.N {
						switch op {
						case "put":
							if n, err := s.Put(ctx, id, bytes.NewReader(data), int64(size)); err != nil || n != int64(size) {
								b.Fatalf("put: %d, %v", n, err)
							}
							b.StopTimer()
							if err := s.Delete(ctx, id); err != nil {
								b.Fatal(err)
							}
							b.StartTimer()
						case "get":
							r, err := s.Open(ctx, id)
							if err != nil {
								b.Fatal(err)
							}
							h.Reset()
							n, err := io.CopyBuffer(h, r, make([]byte, 32<<10))
							if cerr := r.Close(); err == nil {
								err = cerr
							}
							if err != nil || n != int64(size) || blobstore.IDPrefix+hex.EncodeToString(h.Sum(nil)) != id {
								b.Fatalf("get: %d bytes, %v (or the bytes do not hash to the id)", n, err)
							}
						}
					}
					b.StopTimer()
					b.ReportMetric(backendPeakMB(pid), "backend_peak_MB")
					if err := s.Delete(ctx, id); err != nil {
						b.Fatal(err)
					}
				})
			}
		}
	}
}

// backendPeakMB returns the peak RSS (VmHWM) of PostgreSQL backend pid in
// MB, or 0 when /proc does not show it (server on another machine).
func backendPeakMB(pid int) float64 {
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(st), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			if err != nil {
				return 0
			}
			return kb / 1024
		}
	}
	return 0
}
