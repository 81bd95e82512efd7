package sqlite_test

import (
	"strconv"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/storagetest"
)

// BenchmarkPushTx measures durable group commit: each PushTx applies 64
// single-row commits the way the engine does (idempotency check,
// savepoint, GetRow, PutRow upsert, AppendCommit with one change and its
// scope index, PutIdempotency, release) and then commits (fsync). One
// benchmark op is one commit; commits/s is reported.
func BenchmarkPushTx(b *testing.B) {
	const batch = 64
	s := openTemp(b)
	defer s.Close()
	ctx := b.Context()
	sch := storagetest.MustParse(storagetest.SchemaV1)
	if err := s.EnsureSchema(ctx, sch); err != nil {
		b.Fatal(err)
	}
	items := sch.Table("items")
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
