package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
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

func benchPushTx(b *testing.B, batch int, fenced bool) {
	s := pgtest.OpenSchema(b, pgtest.NewSchema(b), postgres.Options{MaxConns: 4})
	sch := mustSchema(b)
	ctx := b.Context()
	if err := s.EnsureSchema(ctx, sch); err != nil {
		b.Fatal(err)
	}
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
}

func must(b testing.TB, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}
