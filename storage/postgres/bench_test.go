package postgres_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/storage/storagetest"
)

// BenchmarkPushTx measures one PushTx applying a batch of 64 commits the
// way the engine does (per commit: Savepoint, GetRow, PutRow, AppendCommit
// with one change, PutIdempotency, ReleaseSavepoint), then Commit.
func BenchmarkPushTx(b *testing.B) { benchPushTx(b, 64, false) }

// BenchmarkPushTxFenced is BenchmarkPushTx with every PushTx fenced with
// the partition's ownership generation (cluster mode): the generation is
// read by BeginPush's lock statement, so it should cost no round trip.
func BenchmarkPushTxFenced(b *testing.B) { benchPushTx(b, 64, true) }

// BenchmarkPushTxSingle pushes one commit per PushTx, unfenced and fenced,
// so BeginPush (where the fence is checked) weighs most.
func BenchmarkPushTxSingle(b *testing.B) {
	b.Run("unfenced", func(b *testing.B) { benchPushTx(b, 1, false) })
	b.Run("fenced", func(b *testing.B) { benchPushTx(b, 1, true) })
}

// BenchmarkPushTxMoveGuard is BenchmarkPushTx without and with the move
// guard (move.go: the trigger every partition-keyed table of a home
// carries when partitions spread over several databases), alternated in
// one run; db-cpu-µs/commit is the CPU (utime+stime) of the pool's
// PostgreSQL backends per commit, read from /proc (the server must run on
// this machine; 0 when it cannot be read).
func BenchmarkPushTxMoveGuard(b *testing.B) {
	for round := range 3 {
		b.Run(fmt.Sprint("none/", round), func(b *testing.B) { benchPushTxOpts(b, 64, false, false) })
		b.Run(fmt.Sprint("guard/", round), func(b *testing.B) { benchPushTxOpts(b, 64, false, true) })
	}
}

func benchPushTx(b *testing.B, batch int, fenced bool) { benchPushTxOpts(b, batch, fenced, false) }

// backendCPU returns the CPU ticks (utime+stime) of the PostgreSQL
// backends serving s's pool (every connection acquired once; 0 when /proc
// cannot be read).
func backendCPU(b *testing.B, s *postgres.Store) int64 {
	ctx := b.Context()
	var conns []*pgxpool.Conn
	var total int64
	for range int(s.Pool().Config().MaxConns) {
		c, err := s.Pool().Acquire(ctx)
		must(b, err)
		conns = append(conns, c)
		var pid int
		must(b, c.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		total += ut + st
	}
	for _, c := range conns {
		c.Release()
	}
	return total
}

func benchPushTxOpts(b *testing.B, batch int, fenced, guard bool) {
	s := pgtest.OpenSchema(b, pgtest.NewSchema(b), postgres.Options{MaxConns: 4})
	sch := mustSchema(b)
	ctx := b.Context()
	if err := s.EnsureSchema(ctx, sch); err != nil {
		b.Fatal(err)
	}
	if guard {
		must(b, s.EnsureMoveGuard(ctx))
	}
	cpu0 := backendCPU(b, s)
	if fenced {
		gen, err := s.ClaimPartition(ctx, "bench", "member", 1)
		must(b, err)
		ctx = storage.WithFence(ctx, gen)
	}
	docs := sch.Table("docs")
	b.ResetTimer()
	start := time.Now()
	for i := 0; b.Loop(); i++ {
		tx, err := s.BeginPush(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		for j := 0; j < batch; j++ {
			id := fmt.Sprintf("r%d", (i*batch+j)%5000)
			must(b, tx.Savepoint(ctx))
			old, err := tx.GetRow(ctx, docs, id)
			must(b, err)
			ver := int64(1)
			if old != nil {
				ver = old.Version + 1
			}
			must(b, tx.PutRow(ctx, docs, storage.RowRecord{RowID: id, Version: ver, Values: ssp2.Row{id, "p1", nil, int64(j)}}))
			seq := tx.Partition().MaxCommitSeq + 1
			key := fmt.Sprintf("c%d", seq)
			must(b, tx.AppendCommit(ctx, storage.CommitRecord{Seq: seq, CreatedAtMs: seq, ActorID: "a", ClientID: "c", ClientCommitID: key,
				Changes: []storage.ChangeRecord{{Table: "docs", RowID: id, Op: ssp2.OpUpsert, RowVersion: ver,
					Scopes: map[string]string{"project": "p1"}, Row: []byte("0123456789abcdef")}}}))
			must(b, tx.PutIdempotency(ctx, storage.IdempotencyRecord{ClientID: "c", ClientCommitID: key, Status: ssp2.CommitApplied, CommitSeq: seq, Result: []byte{1}}))
			must(b, tx.ReleaseSavepoint(ctx))
		}
		must(b, tx.Commit(ctx))
	}
	b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "commits/s")
	if cpu := backendCPU(b, s) - cpu0; cpu > 0 {
		b.ReportMetric(float64(cpu)*1e6/100/float64(b.N*batch), "db-cpu-µs/commit") // USER_HZ = 100
	}
}

func must(b testing.TB, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkStoredRowBytes measures the bytes per stored row of 100,000
// demo todos (storagetest.WriteTodos) as pg_total_relation_size of the
// row table (heap, indexes, TOAST), after the inserts and after updating
// one column of every row, each also after VACUUM FULL (the updated
// table holds the dead versions until a vacuum): with column versions
// ("v3": one byte after the insert, three after the update) and with none
// ("nil": NULL). Run it with -benchtime=1x: one op is the whole workload.
func BenchmarkStoredRowBytes(b *testing.B) {
	const rows = 100_000
	for _, withCV := range []bool{false, true} {
		name := "nil"
		if withCV {
			name = "v3"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				schemaName := pgtest.NewSchema(b)
				s := pgtest.OpenSchema(b, schemaName, postgres.Options{MaxConns: 4})
				sch := schema.MustDemo()
				must(b, s.EnsureSchema(b.Context(), sch))
				table := pgx.Identifier{schemaName, "todos"}.Sanitize()
				size := func(full bool, state string) int64 {
					if full {
						_, err := s.Pool().Exec(b.Context(), `VACUUM FULL `+table)
						must(b, err)
						var heap int64
						must(b, s.Pool().QueryRow(b.Context(), `SELECT pg_relation_size($1::regclass)`, table).Scan(&heap))
						b.ReportMetric(float64(heap)/rows, "B/row-"+state+"-heap-vacuumed")
					}
					var n int64
					must(b, s.Pool().QueryRow(b.Context(), `SELECT pg_total_relation_size($1::regclass)`, table).Scan(&n))
					return n
				}
				storagetest.WriteTodos(b, s.Backend(), sch.Table("todos"), "bytes", rows, 0, withCV)
				b.ReportMetric(float64(size(false, "inserted"))/rows, "B/row-inserted")
				b.ReportMetric(float64(size(true, "inserted"))/rows, "B/row-inserted-vacuumed")
				storagetest.WriteTodos(b, s.Backend(), sch.Table("todos"), "bytes", rows, 1, withCV)
				b.ReportMetric(float64(size(false, "updated"))/rows, "B/row-updated")
				b.ReportMetric(float64(size(true, "updated"))/rows, "B/row-updated-vacuumed")
			}
		})
	}
}

// BenchmarkPushTxPrefetch measures a PushTx of 64 single-row commits the
// way the wire-v3 engine runs one: Prefetch of every commit's
// idempotency key and row, then per commit LookupIdempotency, Savepoint,
// GetRow, for an absent row Tombstone and ClearTombstone (an insert clears
// the row's tombstone), PutRow with column versions, AppendCommit,
// PutIdempotency, ReleaseSavepoint; then Commit. "insert" writes new rows
// only (every Tombstone and ClearTombstone is answered by the prefetch),
// "update" rewrites existing ones, "reinsert" inserts rows deleted
// earlier (their tombstones are cleared: one statement each).
func BenchmarkPushTxPrefetch(b *testing.B) {
	for _, mode := range []string{"insert", "update", "reinsert"} {
		b.Run(mode, func(b *testing.B) { benchPushTxPrefetch(b, mode) })
	}
}

// roundTrips counts the round trips of a pool's connections: each query
// sent alone and each batch (a batch's queries share its round trip).
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func benchPushTxPrefetch(b *testing.B, mode string) {
	const batch = 64
	cfg, err := pgxpool.ParseConfig(pgtest.URL(b))
	must(b, err)
	cfg.MaxConns = 4
	rt := &roundTrips{}
	cfg.ConnConfig.Tracer = rt
	pool, err := pgxpool.NewWithConfig(b.Context(), cfg)
	must(b, err)
	b.Cleanup(pool.Close)
	s := postgres.OpenPool(pool, postgres.Options{Schema: pgtest.NewSchema(b)})
	b.Cleanup(func() { _ = s.Close() })
	sch := mustSchema(b)
	ctx := b.Context()
	must(b, s.EnsureSchema(ctx, sch))
	docs := sch.Table("docs")
	const rowPool = 5000
	if mode != "insert" {
		// Rows r0..r4999 exist ("update") or existed and were deleted
		// ("reinsert").
		for start := 0; start < rowPool; start += 500 {
			tx, err := s.BeginPush(ctx, "bench")
			must(b, err)
			for i := start; i < start+500; i++ {
				id := fmt.Sprintf("r%d", i)
				must(b, tx.PutRow(ctx, docs, storage.RowRecord{RowID: id, Version: 1, Values: ssp2.Row{id, "p1", nil, int64(i)}, ColumnVersions: storage.InsertedColumnVersions()}))
				if mode == "reinsert" {
					must(b, tx.DeleteRow(ctx, docs, id, 1))
				}
			}
			must(b, tx.Commit(ctx))
		}
	}
	n := 0
	var trips int64
	for b.Loop() {
		rt.n.Store(0)
		tx, err := s.BeginPush(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		ids := make([]string, batch)
		idem := make([]storage.IdempotencyKey, batch)
		rows := make([]storage.RowKey, batch)
		for j := range ids {
			if mode == "insert" {
				ids[j] = fmt.Sprintf("n%d", n+j)
			} else {
				ids[j] = fmt.Sprintf("r%d", (n+j)%rowPool)
			}
			idem[j] = storage.IdempotencyKey{ClientID: "c", ClientCommitID: fmt.Sprintf("k%d", n+j)}
			rows[j] = storage.RowKey{Table: docs, RowID: ids[j]}
		}
		must(b, tx.Prefetch(ctx, idem, rows))
		for j, id := range ids {
			rec, err := tx.LookupIdempotency(ctx, "c", idem[j].ClientCommitID)
			must(b, err)
			if rec != nil {
				b.Fatal("replayed commit")
			}
			must(b, tx.Savepoint(ctx))
			old, err := tx.GetRow(ctx, docs, id)
			must(b, err)
			ver, cv := int64(1), storage.InsertedColumnVersions()
			if old != nil {
				ver = old.Version + 1
				cv = storage.EncodeColumnVersions([]int64{1, 1, 1, ver}, ver)
			} else {
				if _, err := tx.Tombstone(ctx, docs, id); err != nil {
					b.Fatal(err)
				}
				must(b, tx.ClearTombstone(ctx, docs, id))
			}
			must(b, tx.PutRow(ctx, docs, storage.RowRecord{RowID: id, Version: ver, Values: ssp2.Row{id, "p1", nil, int64(j)}, ColumnVersions: cv}))
			seq := tx.Partition().MaxCommitSeq + 1
			must(b, tx.AppendCommit(ctx, storage.CommitRecord{Seq: seq, CreatedAtMs: seq, ActorID: "a", ClientID: "c", ClientCommitID: idem[j].ClientCommitID,
				Changes: []storage.ChangeRecord{{Table: "docs", RowID: id, Op: ssp2.OpUpsert, RowVersion: ver,
					Scopes: map[string]string{"project": "p1"}, Row: []byte("0123456789abcdef")}}}))
			must(b, tx.PutIdempotency(ctx, storage.IdempotencyRecord{ClientID: "c", ClientCommitID: idem[j].ClientCommitID, Status: ssp2.CommitApplied, CommitSeq: seq, Result: []byte{1}}))
			must(b, tx.ReleaseSavepoint(ctx))
		}
		must(b, tx.Commit(ctx))
		trips += rt.n.Load()
		n += batch
		if mode == "reinsert" {
			// Delete the batch's rows again, so the next pass over them
			// finds tombstones (not timed).
			b.StopTimer()
			tx, err := s.BeginPush(ctx, "bench")
			must(b, err)
			for _, id := range ids {
				must(b, tx.DeleteRow(ctx, docs, id, tx.Partition().MaxCommitSeq+1))
			}
			must(b, tx.Commit(ctx))
			b.StartTimer()
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "commits/s")
	b.ReportMetric(float64(trips)/float64(n), "roundtrips/commit")
}
