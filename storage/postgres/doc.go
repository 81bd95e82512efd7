// Package postgres is synclane's PostgreSQL storage backend, built on pgx/v5
// and pgxpool. It has every role of storage.Backend but ImageCopier
// (Store.Backend), for any number of synclane processes sharing one
// database.
//
// Layout. EnsureSchema creates system tables prefixed sync_ (schema meta,
// partition registry, commits, changes, the inverted change-scope index,
// idempotency records, client records and delete tombstones) and one
// relational table per synced table, named after it, keyed by
// (partition_id, primary key) with a text primary key column (string,
// json) in COLLATE "C", so row order is byte order (an integer or boolean
// key orders as its type does, storage/keys.go), holding each row's
// _sync_version and _sync_column_versions (storage.ColumnVersions; NULL
// in rows written before it existed, added to such tables without a
// rewrite). All of
// them live in Options.Schema when it is set (names are schema-qualified in
// every statement), else in the connection's search_path.
//
// Tombstones (tombstones.go). sync_tombstones holds one row per deleted
// row, written by the statement of DeleteRow that deletes the row, so
// savepoints and rollback undo both; Prefetch reads the tombstones of the
// rows it reads in the same round trip, and the transaction answers
// Tombstone and ClearTombstone of a row known to have none without a
// statement.
//
// Serialization. A PushTx is a READ COMMITTED transaction that first takes
// SELECT ... FOR UPDATE on the partition's registry row; every PushTx, and
// RotateLogEpoch, of that partition in any process waits on that row lock,
// so commit sequence numbers stay dense and unique per partition. Because
// every statement after the lock takes a fresh snapshot, reads under the
// lock see everything committed by the previous lock holder.
//
// Group commit. The log writes of a PushTx (commits, changes, scope index,
// idempotency records, the registry's max_commit_seq and the change
// notification) are buffered in the transaction and sent with COMMIT as one
// pipelined batch; row writes run immediately so constraint violations are
// reported by PutRow. Since one value PostgreSQL refuses would fail that
// whole batch, and with it every client commit of the transaction,
// AppendCommit and PutIdempotency check each commit first
// (storage.CheckCommit, storage.CheckIdempotency: no U+0000 or invalid
// UTF-8 in text, identifiers and index keys within storage's limits) and
// refuse a bad one with storage.ErrUnstorable before buffering it; PutRow
// checks rows (storage.CheckRow) before sending them, and reads never send
// keys that are not storage.Storable, so no statement error aborts the
// transaction outside a commit's savepoint.
//
// Client records. PutClient skips the records storage.CheckClient refuses
// and writes the others; it never changes a record's actor_id. BindClient
// is one round trip: INSERT … ON CONFLICT DO NOTHING, then SELECT, so
// concurrent binders in any process agree on the first binding.
//
// Notification. Commit sends pg_notify on Options.NotifyChannel (default
// NotifyChannelFor(Options.Schema): "synclane_commits" plus the schema's
// name when one is set) with payload "<partition>\t<maxSeq>", delivered when
// the transaction commits, unless Options.DisableNotify is set (cluster
// mode). Store.Listen starts a Notifier that reports those notifications
// in other processes.
//
// Errors. Server errors are classified by SQLSTATE only: class 23 (and data
// exceptions on row writes) wrap storage.ErrConstraint (22021 and 54000 on
// row writes also storage.ErrUnstorable); serialization
// failures, deadlocks and connection loss are reported as retryable (see
// IsRetryable); idempotent operations retry them a bounded number of times.
//
// Ownership (ownership.go). The registry row also holds the partition's
// owner and ownership generation (storage.Ownership). ClaimPartition raises
// the generation in one upsert, under the row lock, so it waits for the
// transaction holding it. A write whose context carries a fence
// (storage.WithFence) compares it with the generation its own lock
// statement reads (no extra round trip) and, when they differ, rolls back
// with storage.ErrOwnershipLost before writing; PutClient and
// DeclareCheckpoint, which take no write lock, check it under a share lock
// on the row. A context without a fence is not checked.
//
// Retention (retention.go). PruneBatch holds the partition's row lock for
// one short transaction of two round trips; the maintenance lock is a
// session-level advisory lock on a pooled connection; partition snapshots
// live in tables sync_snapshot__<table> of the store's schema.
//
// Writer fence. sync_commits.writer_version records the store's running
// schema version on every append; the BEFORE INSERT trigger
// sync_commits_writer_fence rejects an append (SQLSTATE SL001, message
// sync.storage.writer_fence_rejected, classified as storage.ErrWriterFenced)
// when sync_writer_fence holds a higher required version for the partition,
// or writer_version is NULL. Log writes go with COMMIT, so pushes see the
// rejection from PushTx.Commit. A schema bump runs in a transaction whose
// first statement is LOCK TABLE sync_partitions IN EXCLUSIVE MODE (see
// EnsureSchema). ActivateCheckpoint takes the partition row lock like
// BeginPush, creating the registry row if needed; ReadServeGate is one
// statement (one snapshot). Upgrading an existing database adds the
// writer_version column and the trigger once (a brief ACCESS EXCLUSIVE lock
// on sync_commits); later EnsureSchema calls check the catalog first and
// take no lock on it.
//
// Backfill checkpoints (RFC 0007), readings chosen where the notes leave
// questions open (the safe answer each time):
//   - EnsureSchema has no memoized fast path: every call, including a
//     same-version restart, re-checks for checkpoints at the running
//     version that are neither activated nor declared by the caller
//     (storage.ErrCheckpointIncomplete, after the schema is made current).
//     The check, like the serve gate's pending list, is database-wide.
//   - Declarations are validated (non-empty partition and name, schema
//     version >= 1) before anything is written, on every EnsureSchema call,
//     so an invalid one fails a bump without touching marker or rows.
//   - A stored marker above the running version is storage.ErrSchemaNewer
//     (a sentinel the engine can map to sync.schema_not_ready, not a plain
//     error).
//   - AdvanceCheckpoint has no state check (as the contract says) and,
//     having no clock argument, stamps updated_at_ms from the wall clock.
//     ClaimCheckpoint overwrites schema_version; a claim above the fence
//     makes activation fail with storage.ErrCheckpointFenceMissing.
//   - After Unverifiable the runner re-activates with a watermark at or
//     above the partition's horizon (the stored history is gone).
//   - Checkpoint calls, ReadServeGate and PruneThrough need EnsureSchema
//     first, like every other call.
package postgres
