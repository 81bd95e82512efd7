package sqlite

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/storagetest"
)

// A database created before idempotency records had a log position gets
// the column (existing records at 0) and the partial index on open.
func TestRetentionMigratesOldIdempotencyTable(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "sync.db")
	old, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.ExecContext(ctx, `CREATE TABLE sync_idempotency (
		partition_id TEXT NOT NULL, client_id TEXT NOT NULL, client_commit_id TEXT NOT NULL,
		status INTEGER NOT NULL, commit_seq INTEGER NOT NULL, result BLOB,
		PRIMARY KEY (partition_id, client_id, client_commit_id)) WITHOUT ROWID`); err != nil {
		t.Fatal(err)
	}
	if _, err := old.ExecContext(ctx, `INSERT INTO sync_idempotency VALUES('p', 'c', 'k', 3, 0, x'00')`); err != nil {
		t.Fatal(err)
	}
	old.Close()
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.EnsureSchema(ctx, storagetest.MustParse(storagetest.SchemaV1)); err != nil {
		t.Fatal(err)
	}
	var pos int64
	if err := s.rdb.QueryRowContext(ctx, `SELECT log_seq FROM sync_idempotency WHERE client_commit_id = 'k'`).Scan(&pos); err != nil || pos != 0 {
		t.Fatalf("log_seq of an old record: %d, %v", pos, err)
	}
	// The old rejected record goes with the first pruning batch.
	tx, err := s.BeginPush(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.AppendCommit(ctx, storage.CommitRecord{Seq: 1, ActorID: "a", ClientID: "c", ClientCommitID: "k1"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := s.ReadPartition(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.PruneBatch(ctx, "p", storage.PruneRequest{LogEpoch: info.LogEpoch, ThroughSeq: 1, MaxCommits: 10})
	if err != nil || r.IdempotencyRecords != 1 || r.Commits != 1 {
		t.Fatalf("first batch: %+v %v, want the old rejected record deleted", r, err)
	}
}

// Every statement of a pruning batch searches an index: the batch costs
// what it deletes, not the size of the partition's log.
func TestPruneStatementsSearchIndexes(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "sync.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.EnsureSchema(ctx, storagetest.MustParse(storagetest.SchemaV1)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		q    string
		args []any
		want string
	}{
		{pruneSQL.scopeKeys, []any{"p", 0, 10}, "SEARCH ch USING PRIMARY KEY (partition_id=? AND commit_seq>? AND commit_seq<?)"},
		{pruneSQL.deleteScopes, []any{"p", "items", "project\x00p1", 0, 10}, "SEARCH sync_change_scopes USING PRIMARY KEY (partition_id=? AND table_name=? AND scope_key=? AND commit_seq>? AND commit_seq<?)"},
		{pruneSQL.commitKeys, []any{"p", 0, 10}, "SEARCH sync_commits USING PRIMARY KEY (partition_id=? AND seq>? AND seq<?)"},
		{pruneSQL.deleteApplied, []any{"p", "c", "k", int64(ssp2.CommitApplied), 3}, "SEARCH sync_idempotency USING PRIMARY KEY (partition_id=? AND client_id=? AND client_commit_id=?)"},
		{pruneSQL.deleteRejected, []any{"p", int64(ssp2.CommitRejected), 10}, "SEARCH sync_idempotency USING INDEX sync_idempotency_rejected (partition_id=? AND log_seq<?)"},
		{pruneSQL.deleteChanges, []any{"p", 0, 10}, "SEARCH sync_changes USING PRIMARY KEY (partition_id=? AND commit_seq>? AND commit_seq<?)"},
		{pruneSQL.deleteCommits, []any{"p", 0, 10}, "SEARCH sync_commits USING PRIMARY KEY (partition_id=? AND seq>? AND seq<?)"},
		{pruneSQL.deleteTombstones, []any{"p", 10}, "SEARCH sync_tombstones USING COVERING INDEX sync_tombstones_by_seq (partition_id=? AND commit_seq<?)"},
		{sysSQL["getTomb"], []any{"p", "items", "r"}, "SEARCH sync_tombstones USING PRIMARY KEY (partition_id=? AND table_name=? AND row_id=?)"},
		{sysSQL["clearTomb"], []any{"p", "items", "r"}, "SEARCH sync_tombstones USING PRIMARY KEY (partition_id=? AND table_name=? AND row_id=?)"},
	} {
		plan := queryPlan(t, s, c.q, c.args...)
		if !strings.Contains(plan, c.want) || strings.Contains(strings.ReplaceAll(plan, "SCAN j VIRTUAL TABLE", ""), "SCAN ") {
			t.Fatalf("%s\nplan: %s\nwant: %s", c.q, plan, c.want)
		}
	}
}
