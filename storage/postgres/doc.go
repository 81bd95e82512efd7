// Package postgres is synclane's PostgreSQL storage backend, built on pgx/v5
// and pgxpool. It implements storage.Store for any number of synclane
// processes sharing one database.
//
// Layout. EnsureSchema creates system tables prefixed sync_ (schema meta,
// partition registry, commits, changes, the inverted change-scope index,
// idempotency records and client records) and one relational table per
// synced table, named after it, keyed by (partition_id, primary key) with
// the primary key column in COLLATE "C" so row order is byte order. All of
// them live in Options.Schema when it is set (names are schema-qualified in
// every statement), else in the connection's search_path.
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
// reported by PutRow.
//
// Notification. Commit sends pg_notify on Options.NotifyChannel (default
// "synclane_commits") with payload "<partition>\t<maxSeq>", delivered when
// the transaction commits. Store.Listen starts a Notifier that reports those
// notifications in other processes.
//
// Errors. Server errors are classified by SQLSTATE only: class 23 (and data
// exceptions on row writes) wrap storage.ErrConstraint; serialization
// failures, deadlocks and connection loss are reported as retryable (see
// IsRetryable); idempotent operations retry them a bounded number of times.
package postgres
