package postgres_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

const testSchema = `{
  "version": 1,
  "tables": [{
    "name": "docs",
    "columns": [
      {"name": "id", "type": "string"},
      {"name": "project", "type": "string"},
      {"name": "code", "type": "string", "nullable": true},
      {"name": "n", "type": "integer", "nullable": true}
    ],
    "primaryKey": "id",
    "scopes": ["project:{project}"],
    "indexes": [{"name": "docs_code", "columns": ["code"], "unique": true}]
  }]
}`

func mustSchema(t testing.TB) *schema.Schema {
	t.Helper()
	s, err := schema.Parse([]byte(testSchema))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// twoStores opens two stores with separate pools on one fresh schema (two
// "processes" sharing a database), both ensured.
func twoStores(t *testing.T, maxConns int32) (*postgres.Store, *postgres.Store, *schema.Schema) {
	t.Helper()
	name := pgtest.NewSchema(t)
	sch := mustSchema(t)
	a := pgtest.OpenSchema(t, name, postgres.Options{MaxConns: maxConns})
	b := pgtest.OpenSchema(t, name, postgres.Options{MaxConns: maxConns})
	for _, s := range []*postgres.Store{a, b} {
		if err := s.EnsureSchema(t.Context(), sch); err != nil {
			t.Fatalf("EnsureSchema: %v", err)
		}
	}
	return a, b, sch
}

func doc(id, project string, code any) ssp2.Row { return ssp2.Row{id, project, code, nil} }

func commitRec(seq int64, clientCommitID string) storage.CommitRecord {
	return storage.CommitRecord{
		Seq: seq, CreatedAtMs: seq, ActorID: "actor", ClientID: "client", ClientCommitID: clientCommitID,
		Changes: []storage.ChangeRecord{{Table: "docs", RowID: "r" + strconv.FormatInt(seq, 10), Op: ssp2.OpUpsert,
			RowVersion: 1, Scopes: map[string]string{"project": "p1"}, Row: []byte("row")}},
	}
}

// pushOne appends one commit with seq max+1 and its idempotency record in
// its own PushTx and returns the seq.
func pushOne(ctx context.Context, s *postgres.Store, partition, key string) (int64, error) {
	tx, err := s.BeginPush(ctx, partition)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	seq := tx.Partition().MaxCommitSeq + 1
	if err := tx.AppendCommit(ctx, commitRec(seq, key)); err != nil {
		return 0, err
	}
	if err := tx.PutIdempotency(ctx, storage.IdempotencyRecord{ClientID: "client", ClientCommitID: key, Status: ssp2.CommitApplied, CommitSeq: seq}); err != nil {
		return 0, err
	}
	return seq, tx.Commit(ctx)
}
