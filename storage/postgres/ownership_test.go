package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net"
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
)

// claimGen claims partition for owner on s and checks the generation.
func claimGen(t *testing.T, s *postgres.Store, partition, owner string, want int64) {
	t.Helper()
	got, err := s.ClaimPartition(t.Context(), partition, owner, 1000)
	if err != nil || got != want {
		t.Fatalf("ClaimPartition(%q, %q) = %d, %v; want %d", partition, owner, got, err, want)
	}
}

// wantLost checks that err is a stale-fence refusal naming the partition
// and both generations, and is not retryable.
func wantLost(t *testing.T, what string, err error, partition string, held, current int64) {
	t.Helper()
	if !errors.Is(err, storage.ErrOwnershipLost) {
		t.Fatalf("%s: err = %v, want ErrOwnershipLost", what, err)
	}
	if postgres.IsRetryable(err) {
		t.Fatalf("%s: %v is reported retryable", what, err)
	}
	if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("%q", partition)) ||
		!strings.Contains(msg, fmt.Sprintf("fence generation %d held, current generation %d", held, current)) {
		t.Fatalf("%s: %q does not name partition %q, held %d and current %d", what, msg, partition, held, current)
	}
}

// partitionState reads everything a write of partition can change, as one
// comparable string: the registry row, the log tables, client records,
// checkpoints, the writer fence and the partition snapshot.
func partitionState(t *testing.T, s *postgres.Store, schemaName, partition string) string {
	t.Helper()
	q := func(table string) string { return pgx.Identifier{schemaName, table}.Sanitize() }
	var out string
	err := s.Pool().QueryRow(t.Context(), `SELECT concat_ws(' | ',
	(SELECT concat_ws(',', log_epoch, epoch_required, max_commit_seq, horizon_seq, owner, owner_generation) FROM `+q("sync_partitions")+` WHERE partition = $1),
	(SELECT count(*) FROM `+q("sync_commits")+` WHERE partition = $1),
	(SELECT count(*) FROM `+q("sync_changes")+` WHERE partition = $1),
	(SELECT count(*) FROM `+q("sync_change_scopes")+` WHERE partition = $1),
	(SELECT count(*) FROM `+q("sync_idempotency")+` WHERE partition = $1),
	(SELECT string_agg(concat_ws(',', client_id, actor_id, cursor, updated_at_ms), ';' ORDER BY client_id) FROM `+q("sync_clients")+` WHERE partition = $1),
	(SELECT string_agg(concat_ws(',', name, schema_version, state, watermark, owner_epoch), ';' ORDER BY name) FROM `+q("sync_backfill_checkpoints")+` WHERE partition = $1),
	(SELECT required_writer_version FROM `+q("sync_writer_fence")+` WHERE partition = $1),
	(SELECT string_agg(concat_ws(',', id, _sync_version), ';' ORDER BY id) FROM `+q("docs")+` WHERE partition_id = $1),
	(SELECT concat_ws(',', max_commit_seq, horizon_seq) FROM `+q("sync_snapshot__sync_partitions")+` WHERE partition = $1))`, partition).Scan(&out)
	if err != nil {
		t.Fatalf("read partition state: %v", err)
	}
	return out
}

// fencedPush pushes one commit with a row write under ctx.
func fencedPush(ctx context.Context, s *postgres.Store, partition, key string) error {
	tx, err := s.BeginPush(ctx, partition)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	seq := tx.Partition().MaxCommitSeq + 1
	if err := tx.PutRow(ctx, docsTable, storage.RowRecord{RowID: key, Version: 1, Values: doc(key, "p1", nil)}); err != nil {
		return err
	}
	if err := tx.AppendCommit(ctx, commitRec(seq, key)); err != nil {
		return err
	}
	if err := tx.PutIdempotency(ctx, storage.IdempotencyRecord{ClientID: "client", ClientCommitID: key, Status: ssp2.CommitApplied, CommitSeq: seq}); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// docsTable is the docs table of testSchema.
var docsTable = func() *schema.Table {
	s, err := schema.Parse([]byte(testSchema))
	if err != nil {
		panic(err)
	}
	return s.Table("docs")
}()

// Claims count 1, 2, 3 per partition, PartitionOwner reports them, and a
// registry created before the ownership columns gets them from EnsureSchema
// (every existing entry unclaimed), after which claims and fences work.
func TestClaimPartitionAndMigration(t *testing.T) {
	ctx := t.Context()
	name := pgtest.NewSchema(t)
	sch := mustSchema(t)
	s := pgtest.OpenSchema(t, name, postgres.Options{MaxConns: 4})
	if err := s.EnsureSchema(ctx, sch); err != nil {
		t.Fatal(err)
	}
	if o, g, err := s.PartitionOwner(ctx, "p"); err != nil || o != "" || g != 0 {
		t.Fatalf("PartitionOwner of an absent partition = %q, %d, %v", o, g, err)
	}
	claimGen(t, s, "p", "m1", 1)
	claimGen(t, s, "p", "m2", 2)
	claimGen(t, s, "p", "m1", 3)
	if o, g, err := s.PartitionOwner(ctx, "p"); err != nil || o != "m1" || g != 3 {
		t.Fatalf("PartitionOwner = %q, %d, %v; want m1, 3", o, g, err)
	}
	if _, err := pushOne(ctx, s, "old", "k1"); err != nil { // an entry that exists before the migration
		t.Fatal(err)
	}
	if err := s.CapturePartition(ctx, "old"); err != nil { // a snapshot of the registry row, too
		t.Fatal(err)
	}

	// An older layout: the registry (and its snapshot copy) without the
	// ownership columns.
	reg := pgx.Identifier{name, "sync_partitions"}.Sanitize()
	for _, table := range []string{reg, pgx.Identifier{name, "sync_snapshot__sync_partitions"}.Sanitize()} {
		if _, err := s.Pool().Exec(ctx, `ALTER TABLE `+table+` DROP COLUMN owner, DROP COLUMN owner_generation`); err != nil {
			t.Fatal(err)
		}
	}
	// A process of the new version starts on it.
	s2 := pgtest.OpenSchema(t, name, postgres.Options{MaxConns: 4})
	if err := s2.EnsureSchema(ctx, sch); err != nil {
		t.Fatalf("EnsureSchema on a registry without ownership columns: %v", err)
	}
	rows, err := s2.Pool().Query(ctx, `SELECT attname::text, attnotnull, pg_get_expr(d.adbin, d.adrelid) FROM pg_attribute a
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = to_regclass($1) AND attname IN ('owner', 'owner_generation') AND NOT attisdropped ORDER BY attname`, reg)
	if err != nil {
		t.Fatal(err)
	}
	type col struct {
		name    string
		notNull bool
		def     string
	}
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (col, error) {
		var c col
		err := r.Scan(&c.name, &c.notNull, &c.def)
		return c, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(cols) != 2 || cols[0] != (col{"owner", true, "''::text"}) || cols[1] != (col{"owner_generation", true, "0"}) {
		t.Fatalf("migrated columns = %+v, want owner text NOT NULL DEFAULT '' and owner_generation NOT NULL DEFAULT 0", cols)
	}
	if err := s2.EnsureSchema(ctx, sch); err != nil { // and again: a no-op
		t.Fatalf("second EnsureSchema: %v", err)
	}
	for _, p := range []string{"p", "old"} {
		if o, g, err := s2.PartitionOwner(ctx, p); err != nil || o != "" || g != 0 {
			t.Fatalf("PartitionOwner(%q) after the migration = %q, %d, %v; want unclaimed", p, o, g, err)
		}
	}
	if info, err := s2.ReadPartition(ctx, "old"); err != nil || info.MaxCommitSeq != 1 {
		t.Fatalf("migrated entry = %+v, %v; want its log kept", info, err)
	}
	claimGen(t, s2, "old", "m1", 1)
	if err := fencedPush(storage.WithFence(ctx, 1), s2, "old", "k2"); err != nil {
		t.Fatalf("fenced push after the migration: %v", err)
	}
	if err := s2.CapturePartition(storage.WithFence(ctx, 1), "old"); err != nil {
		t.Fatalf("capture into the snapshot table of the older layout: %v", err)
	}
	claimGen(t, s2, "old", "m2", 2)
	wantLost(t, "stale push after the migration", fencedPush(storage.WithFence(ctx, 1), s2, "old", "k3"), "old", 1, 2)
}

// Every write path that takes the partition's lock, and PutClient and
// DeclareCheckpoint, refuses a stale fence with ErrOwnershipLost and
// changes nothing, while the same write with the current fence changes the
// partition (so the unchanged state is the refusal's doing).
func TestStaleFenceWritesNothing(t *testing.T) {
	const part = "p"
	cases := []struct {
		name  string
		write func(ctx context.Context, s *postgres.Store) error
	}{
		{"push", func(ctx context.Context, s *postgres.Store) error { return fencedPush(ctx, s, part, "new") }},
		{"push with checkpoint advance", func(ctx context.Context, s *postgres.Store) error {
			tx, err := s.BeginPush(ctx, part)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if ok, err := tx.AdvanceCheckpoint(ctx, "cp", 1, 2, 7); err != nil || !ok {
				return fmt.Errorf("AdvanceCheckpoint = %v, %v", ok, err)
			}
			return tx.Commit(ctx)
		}},
		{"prune batch", func(ctx context.Context, s *postgres.Store) error {
			info, err := s.ReadPartition(ctx, part)
			if err != nil {
				return err
			}
			res, err := s.PruneBatch(ctx, part, storage.PruneRequest{LogEpoch: info.LogEpoch, ThroughSeq: 2, MaxCommits: 10})
			if err == nil && res.HorizonSeq != 2 {
				return fmt.Errorf("PruneBatch pruned through %d, want 2", res.HorizonSeq)
			}
			return err
		}},
		{"prune through", func(ctx context.Context, s *postgres.Store) error { return s.PruneThrough(ctx, part, 2) }},
		{"rotate", func(ctx context.Context, s *postgres.Store) error {
			_, err := s.RotateLogEpoch(ctx, part, 2000)
			return err
		}},
		{"activate checkpoint", func(ctx context.Context, s *postgres.Store) error {
			out, err := s.ActivateCheckpoint(ctx, part, "cp", 1, 3, nil, 2000)
			if err == nil && out != storage.Activated {
				return fmt.Errorf("ActivateCheckpoint = %s, want activated", out)
			}
			return err
		}},
		{"declare checkpoint", func(ctx context.Context, s *postgres.Store) error {
			_, err := s.DeclareCheckpoint(ctx, storage.CheckpointDeclaration{Partition: part, Name: "cp2", SchemaVersion: 1}, 2000)
			return err
		}},
		{"put client", func(ctx context.Context, s *postgres.Store) error {
			return s.PutClient(ctx, part, storage.ClientRecord{ClientID: "c1", ActorID: "actor", Cursor: 3, UpdatedAtMs: 2000},
				storage.ClientRecord{ClientID: "c2", ActorID: "actor", Cursor: 1, UpdatedAtMs: 2000})
		}},
		{"capture", func(ctx context.Context, s *postgres.Store) error { return s.CapturePartition(ctx, part) }},
		{"restore", func(ctx context.Context, s *postgres.Store) error {
			_, err := s.RestorePartition(ctx, part, 2000)
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			name := pgtest.NewSchema(t)
			old := pgtest.OpenSchema(t, name, postgres.Options{MaxConns: 4}) // the deposed member
			cur := pgtest.OpenSchema(t, name, postgres.Options{MaxConns: 4}) // the new owner
			for _, s := range []*postgres.Store{old, cur} {
				if err := s.EnsureSchema(ctx, mustSchema(t)); err != nil {
					t.Fatal(err)
				}
			}
			// The old owner's history: three commits, a client record, a
			// claimed checkpoint and a capture taken after two commits.
			claimGen(t, old, part, "m1", 1)
			f1 := storage.WithFence(ctx, 1)
			for i := range 3 {
				if err := fencedPush(f1, old, part, fmt.Sprintf("k%d", i)); err != nil {
					t.Fatal(err)
				}
				if i == 1 {
					if err := old.CapturePartition(f1, part); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := old.PutClient(f1, part, storage.ClientRecord{ClientID: "c1", ActorID: "actor", Cursor: 1, UpdatedAtMs: 1000}); err != nil {
				t.Fatal(err)
			}
			if _, err := old.DeclareCheckpoint(f1, storage.CheckpointDeclaration{Partition: part, Name: "cp", SchemaVersion: 1}, 1000); err != nil {
				t.Fatal(err)
			}
			if cp, err := old.ClaimCheckpoint(ctx, storage.CheckpointDeclaration{Partition: part, Name: "cp", SchemaVersion: 1}, 1000); err != nil || cp.OwnerEpoch != 1 {
				t.Fatalf("ClaimCheckpoint = %+v, %v", cp, err)
			}

			claimGen(t, cur, part, "m2", 2)
			before := partitionState(t, cur, name, part)
			wantLost(t, c.name+" with the old fence", c.write(f1, old), part, 1, 2)
			if after := partitionState(t, cur, name, part); after != before {
				t.Fatalf("a refused %s changed the partition:\nbefore %s\nafter  %s", c.name, before, after)
			}
			if err := c.write(storage.WithFence(ctx, 2), cur); err != nil {
				t.Fatalf("%s with the current fence: %v", c.name, err)
			}
			if after := partitionState(t, cur, name, part); after == before {
				t.Fatalf("%s with the current fence changed nothing (%s): the refusal test proves nothing", c.name, after)
			}
		})
	}
}

// A claim waits for the push holding the partition's lock with the older
// generation: while the push is open (and keeps working) the claim does
// not return; the push commits, then the claim returns the next
// generation, and a push with the old fence is refused from then on.
// Unfenced pushes are not checked at all.
func TestClaimWaitsForFencedPush(t *testing.T) {
	ctx := t.Context()
	a, b, sch := twoStores(t, 4)
	docs := sch.Table("docs")
	claimGen(t, a, "p", "m1", 1)
	f1 := storage.WithFence(ctx, 1)
	tx, err := a.BeginPush(f1, "p")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	must(t, tx.PutRow(ctx, docs, storage.RowRecord{RowID: "r1", Version: 1, Values: doc("r1", "p1", nil)}))
	must(t, tx.AppendCommit(ctx, commitRec(1, "k1")))

	type claimed struct {
		gen int64
		err error
	}
	claim := make(chan claimed, 1)
	go func() {
		g, err := b.ClaimPartition(ctx, "p", "m2", 2000)
		claim <- claimed{g, err}
	}()
	pid := postgres.PushTxPID(tx)
	waitBlocked(t, b, pid)

	// The push goes on working under its lock; the claim still waits.
	must(t, tx.PutRow(ctx, docs, storage.RowRecord{RowID: "r2", Version: 1, Values: doc("r2", "p1", nil)}))
	must(t, tx.AppendCommit(ctx, commitRec(2, "k2")))
	if _, err := tx.GetRow(ctx, docs, "r1"); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-claim:
		t.Fatalf("ClaimPartition returned (%d, %v) while a push with the older generation was open", c.gen, c.err)
	default:
	}
	if n := blockedBy(t, b, pid); n != 1 {
		t.Fatalf("%d sessions wait for the open push, want the claim (1)", n)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("the open push's Commit: %v", err)
	}
	select {
	case c := <-claim:
		if c.err != nil || c.gen != 2 {
			t.Fatalf("ClaimPartition after the push = %d, %v; want 2", c.gen, c.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ClaimPartition did not return after the push committed")
	}
	if info, err := b.ReadPartition(ctx, "p"); err != nil || info.MaxCommitSeq != 2 {
		t.Fatalf("partition after the push = %+v, %v; want both commits", info, err)
	}
	wantLost(t, "push with the old fence after the claim", fencedPush(f1, a, "p", "k3"), "p", 1, 2)
	if err := fencedPush(storage.WithFence(ctx, 2), b, "p", "k3"); err != nil {
		t.Fatalf("push with the new fence: %v", err)
	}
	// Unfenced pushes, on either store, are not checked.
	for i, s := range []*postgres.Store{a, b} {
		if err := fencedPush(ctx, s, "p", fmt.Sprintf("u%d", i)); err != nil {
			t.Fatalf("unfenced push %d: %v", i, err)
		}
	}
	if info, err := b.ReadPartition(ctx, "p"); err != nil || info.MaxCommitSeq != 5 {
		t.Fatalf("partition at the end = %+v, %v; want 5 commits", info, err)
	}
}

// blockedBy returns how many sessions wait for a lock held by pid.
func blockedBy(t *testing.T, s *postgres.Store, pid uint32) int {
	t.Helper()
	var n int
	if err := s.Pool().QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND $1::integer = ANY(pg_blocking_pids(pid))`, int32(pid)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitBlocked polls, with a deadline, until a session waits for a lock
// held by pid.
func waitBlocked(t *testing.T, s *postgres.Store, pid uint32) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for blockedBy(t, s, pid) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no session came to wait for the open push's lock")
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronization
	}
}

// countingConn counts the writes on a connection: each round trip starts
// with one (pgx sends a statement or a whole pipelined batch in one write).
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// A fenced push sends exactly as many round trips as an unfenced one: the
// generation comes with the lock statement of BeginPush's batch.
func TestFencedPushNoExtraRoundTrip(t *testing.T) {
	ctx := t.Context()
	name := pgtest.NewSchema(t)
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	cfg.MaxConns = 1 // one connection: its statement cache is warm for both
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, &writes}, nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := postgres.OpenPool(pool, postgres.Options{Schema: name})
	defer s.Close()
	if err := s.EnsureSchema(ctx, mustSchema(t)); err != nil {
		t.Fatal(err)
	}
	claimGen(t, s, "p", "m1", 1)
	fenced := storage.WithFence(ctx, 1)
	roundTrips := func(ctx context.Context, key string) int64 {
		t.Helper()
		n := writes.Load()
		if err := fencedPush(ctx, s, "p", key); err != nil {
			t.Fatalf("push %s: %v", key, err)
		}
		return writes.Load() - n
	}
	// Warm the statement cache with both kinds, then measure.
	roundTrips(ctx, "w1")
	roundTrips(fenced, "w2")
	unfenced, withFence := roundTrips(ctx, "m1"), roundTrips(fenced, "m2")
	if unfenced < 3 || withFence != unfenced {
		t.Fatalf("round trips of one push: unfenced %d, fenced %d; want equal (at least 3: begin batch, row write, commit)", unfenced, withFence)
	}
	t.Logf("round trips of one push (begin batch, PutRow, commit batch): unfenced %d, fenced %d", unfenced, withFence)
}
