package postgres_test

import (
	"testing"
	"time"

	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

// BenchmarkReadServeGate measures one serve-gate read of a partition
// that holds a commit (the statement every pull runs, twice with its
// verify read), alone on an idle pool: the cost of the gate statement
// and its round trip. It was written to compare the gate before and
// after it read the partition's owner_generation (bench/RESULTS.md,
// issue 45) and compiles against both.
func BenchmarkReadServeGate(b *testing.B) {
	s := pgtest.OpenSchema(b, pgtest.NewSchema(b), postgres.Options{MaxConns: 4})
	sch := mustSchema(b)
	ctx := b.Context()
	if err := s.EnsureSchema(ctx, sch); err != nil {
		b.Fatal(err)
	}
	tx, err := s.BeginPush(ctx, "bench")
	must(b, err)
	seq := tx.Partition().MaxCommitSeq + 1
	must(b, tx.AppendCommit(ctx, storage.CommitRecord{Seq: seq, CreatedAtMs: seq, ActorID: "a", ClientID: "c", ClientCommitID: "c1"}))
	must(b, tx.Commit(ctx))
	for b.Loop() {
		g, err := s.ReadServeGate(ctx, "bench", int32(sch.Version))
		if err != nil {
			b.Fatal(err)
		}
		if g.LogEpoch == "" {
			b.Fatal("gate read no epoch for a partition that holds a commit")
		}
	}
}

// BenchmarkServeGateOwnerColumn runs the gate statement with and without
// its owner_generation column alternately in one loop (the same moment
// of a shared machine and database for both) and reports each one's
// mean time per read: the cost of the column alone.
func BenchmarkServeGateOwnerColumn(b *testing.B) {
	s := pgtest.OpenSchema(b, pgtest.NewSchema(b), postgres.Options{MaxConns: 4})
	sch := mustSchema(b)
	ctx := b.Context()
	if err := s.EnsureSchema(ctx, sch); err != nil {
		b.Fatal(err)
	}
	tx, err := s.BeginPush(ctx, "bench")
	must(b, err)
	seq := tx.Partition().MaxCommitSeq + 1
	must(b, tx.AppendCommit(ctx, storage.CommitRecord{Seq: seq, CreatedAtMs: seq, ActorID: "a", ClientID: "c", ClientCommitID: "c1"}))
	must(b, tx.Commit(ctx))
	var with, without time.Duration
	for i := 0; b.Loop(); i++ {
		first := i%2 == 0 // alternate which variant goes first
		for _, w := range []bool{first, !first} {
			t0 := time.Now()
			must(b, postgres.ReadGateSQL(ctx, s, "bench", int32(sch.Version), w))
			if w {
				with += time.Since(t0)
			} else {
				without += time.Since(t0)
			}
		}
	}
	b.ReportMetric(float64(with.Nanoseconds())/float64(b.N), "ns/with")
	b.ReportMetric(float64(without.Nanoseconds())/float64(b.N), "ns/without")
	b.ReportMetric(float64(with-without)/float64(without), "extra")
}
