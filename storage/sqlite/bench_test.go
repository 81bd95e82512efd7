package sqlite_test

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/storage/storagetest"
)

// benchStore opens a store on a temporary file with storagetest's schema
// v1, closed when b ends, and returns it with its items table.
func benchStore(b *testing.B) (*sqlite.Store, *schema.Table) {
	s := openTemp(b)
	b.Cleanup(func() { _ = s.Close() })
	sch := storagetest.MustParse(storagetest.SchemaV1)
	if err := s.EnsureSchema(b.Context(), sch); err != nil {
		b.Fatal(err)
	}
	return s, sch.Table("items")
}

// BenchmarkPushTx measures durable group commit: each PushTx applies 64
// single-row commits the way the engine does (idempotency check,
// savepoint, GetRow, PutRow upsert, AppendCommit with one change and its
// scope index, PutIdempotency, release) and then commits (fsync). One
// benchmark op is one commit; commits/s is reported.
func BenchmarkPushTx(b *testing.B) {
	const batch = 64
	s, items := benchStore(b)
	ctx := b.Context()
	scopes := map[string]string{"project": "p1", "owner": "1"}
	rowBytes := make([]byte, 64)
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for n < b.N {
		tx, err := s.BeginPush(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < batch && n < b.N; i, n = i+1, n+1 {
			id := "row-" + strconv.Itoa(n%10000)
			cid := "cc-" + strconv.Itoa(n)
			if rec, err := tx.LookupIdempotency(ctx, "client", cid); err != nil || rec != nil {
				b.Fatal(rec, err)
			}
			if err := tx.Savepoint(ctx); err != nil {
				b.Fatal(err)
			}
			cur, err := tx.GetRow(ctx, items, id)
			if err != nil {
				b.Fatal(err)
			}
			ver := int64(1)
			if cur != nil {
				ver = cur.Version + 1
			}
			row := ssp2.Row{id, "p1", int64(1), "title " + cid, int64(n), nil, true, nil, nil, nil, nil, nil}
			if err := tx.PutRow(ctx, items, storage.RowRecord{RowID: id, Version: ver, Values: row}); err != nil {
				b.Fatal(err)
			}
			seq := tx.Partition().MaxCommitSeq + 1
			if err := tx.AppendCommit(ctx, storage.CommitRecord{Seq: seq, CreatedAtMs: int64(n), ActorID: "actor", ClientID: "client", ClientCommitID: cid,
				Changes: []storage.ChangeRecord{{Table: "items", RowID: id, Op: ssp2.OpUpsert, RowVersion: ver, Scopes: scopes, Row: rowBytes}}}); err != nil {
				b.Fatal(err)
			}
			if err := tx.PutIdempotency(ctx, storage.IdempotencyRecord{ClientID: "client", ClientCommitID: cid, Status: ssp2.CommitApplied, CommitSeq: seq, Result: []byte{1}}); err != nil {
				b.Fatal(err)
			}
			if err := tx.ReleaseSavepoint(ctx); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}

// BenchmarkPushTxPartitions measures group commit across partitions, the
// way 1,000 partition actors use the store: 48 goroutines, each cycling
// over its share of 1,000 partitions, run one single-commit PushTx at a
// time (the same steps as BenchmarkPushTx), so the store groups the push
// transactions of different partitions into shared COMMITs. One benchmark
// op is one commit; commits/s is reported.
func BenchmarkPushTxPartitions(b *testing.B) {
	const parts, workers = 1000, 48
	s, items := benchStore(b)
	ctx := b.Context()
	rowBytes := make([]byte, 64)
	var next atomic.Int64
	push := func(w int, n int64) error {
		p := "part-" + strconv.Itoa(int(n)%parts)
		tx, err := s.BeginPush(ctx, p)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		id := "row-" + strconv.Itoa(int(n/parts)%20)
		cid := "cc-" + strconv.FormatInt(n, 10)
		client := "client-" + strconv.Itoa(w)
		if rec, err := tx.LookupIdempotency(ctx, client, cid); err != nil || rec != nil {
			return fmt.Errorf("lookup: %v %v", rec, err)
		}
		if err := tx.Savepoint(ctx); err != nil {
			return err
		}
		cur, err := tx.GetRow(ctx, items, id)
		if err != nil {
			return err
		}
		ver := int64(1)
		if cur != nil {
			ver = cur.Version + 1
		}
		row := ssp2.Row{id, "p1", int64(1), "title " + cid, n, nil, true, nil, nil, nil, nil, nil}
		if err := tx.PutRow(ctx, items, storage.RowRecord{RowID: id, Version: ver, Values: row}); err != nil {
			return err
		}
		seq := tx.Partition().MaxCommitSeq + 1
		scopes := map[string]string{"project": "p" + strconv.Itoa(w), "owner": "1"}
		if err := tx.AppendCommit(ctx, storage.CommitRecord{Seq: seq, CreatedAtMs: n, ActorID: "actor", ClientID: client, ClientCommitID: cid,
			Changes: []storage.ChangeRecord{{Table: "items", RowID: id, Op: ssp2.OpUpsert, RowVersion: ver, Scopes: scopes, Row: rowBytes}}}); err != nil {
			return err
		}
		if err := tx.PutIdempotency(ctx, storage.IdempotencyRecord{ClientID: client, ClientCommitID: cid, Status: ssp2.CommitApplied, CommitSeq: seq, Result: []byte{1}}); err != nil {
			return err
		}
		if err := tx.ReleaseSavepoint(ctx); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// worker w pushes to the partitions n with n % workers == w
			for k := int64(w); ; k += workers {
				if next.Add(1) > int64(b.N) {
					return
				}
				if err := push(w, k); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}

// BenchmarkStoredRowBytes measures the bytes per stored row of 100,000
// demo todos (storagetest.WriteTodos) in a single-file store, after the
// inserts and after updating one column of every row: with column
// versions ("v3": one byte after the insert, three after the update) and
// with none ("nil": NULL, what a row from before column versions reads
// as). The file is measured after a WAL checkpoint (TRUNCATE) and again
// after VACUUM. Run it with -benchtime=1x: one op is the whole workload.
func BenchmarkStoredRowBytes(b *testing.B) {
	const rows = 100_000
	for _, withCV := range []bool{false, true} {
		name := "nil"
		if withCV {
			name = "v3"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				path := filepath.Join(b.TempDir(), "sync.db")
				s, err := sqlite.Open(b.Context(), path, sqlite.Options{})
				if err != nil {
					b.Fatal(err)
				}
				sch := schema.MustDemo()
				if err := s.EnsureSchema(b.Context(), sch); err != nil {
					b.Fatal(err)
				}
				size := func() (int64, int64) {
					db, err := sql.Open("sqlite", "file:"+path)
					if err != nil {
						b.Fatal(err)
					}
					defer db.Close()
					if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
						b.Fatal(err)
					}
					st, err := os.Stat(path)
					if err != nil {
						b.Fatal(err)
					}
					vac := path + ".vacuum"
					_ = os.Remove(vac)
					if _, err := db.Exec(`VACUUM INTO ?`, vac); err != nil {
						b.Fatal(err)
					}
					vst, err := os.Stat(vac)
					if err != nil {
						b.Fatal(err)
					}
					return st.Size(), vst.Size()
				}
				storagetest.WriteTodos(b, s.Backend(), sch.Table("todos"), "bytes", rows, 0, withCV)
				ins, insVac := size()
				storagetest.WriteTodos(b, s.Backend(), sch.Table("todos"), "bytes", rows, 1, withCV)
				upd, updVac := size()
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(ins)/rows, "B/row-inserted")
				b.ReportMetric(float64(insVac)/rows, "B/row-inserted-vacuumed")
				b.ReportMetric(float64(upd)/rows, "B/row-updated")
				b.ReportMetric(float64(updVac)/rows, "B/row-updated-vacuumed")
			}
		})
	}
}
