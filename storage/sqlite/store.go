// Package sqlite is the embedded storage backend on SQLite
// (modernc.org/sqlite, pure Go), with every role of storage.Backend but
// Ownership (Store.Backend). One database file holds the system tables
// (prefixed sync_, the delete tombstones in sync_tombstones among them)
// and one relational table per synced table, named exactly after it, with
// each row's _sync_version and _sync_column_versions (NULL in rows written
// before it existed; schema.go).
//
// Durability and concurrency: the database runs in WAL mode with
// synchronous=FULL, so a returned Commit has been fsynced. SQLite has a
// single writer, so the Store owns one writer connection guarded by a
// process-wide write lock: every PushTx (of any partition), RotateLogEpoch,
// PutClient, EnsureSchema and partition creation serialize on it, and a
// PushTx holds it from BeginPush to Commit/Rollback (BEGIN IMMEDIATE, so
// other processes on the same file are excluded too, via busy_timeout).
// Consequently a goroutine holding an open PushTx must not call those
// methods itself: they would wait for the lock it holds. Reads
// (ReadPartition, LookupIdempotency, ScanChanges, ScanRows, GetClient) run
// on a separate pool of read-only connections and see the last committed
// state.
//
// Retention (retention.go): PruneBatch, the maintenance lease and partition
// snapshots run under the process write lock in their own transactions;
// Backup copies the database with VACUUM INTO.
//
// Writer fence and checkpoints: see checkpoint.go. System tables use
// partition_id like the rest of this backend's tables. ActivateCheckpoint
// and PruneThrough run under the process write lock and BEGIN IMMEDIATE
// (the lock pushes hold); ReadServeGate reads in one read transaction (one
// WAL snapshot); PushTx.ReadServeGate reads on the writer connection
// inside the push.
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
package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
)

// Options configures Open. The zero value is valid.
type Options struct {
	// Logger receives migration and lifecycle messages; nil means zap.NewNop().
	Logger *zap.Logger
	// ReadConns bounds the read connection pool, and separately the pool
	// of read-only connections that encode bootstrap pages (EncodeRows);
	// <= 0 means 4 each.
	ReadConns int
	// BusyTimeout is how long a connection waits for a lock held by another
	// process before failing with SQLITE_BUSY; <= 0 means 10s.
	BusyTimeout time.Duration
	// WALAutocheckpointPages is how many pages the write-ahead log may
	// hold before a commit copies them back into the database file; 0
	// means DefaultWALAutocheckpointPages, negative means SQLite's own
	// default (1,000).
	WALAutocheckpointPages int
	// PageScanMmapBytes is how much of the database file each EncodeRows
	// connection reads through a memory map (PRAGMA mmap_size) rather than
	// by copying every page it scans into its page cache; 0 means
	// DefaultPageScanMmapBytes, negative turns the map off. It is address
	// space, not heap: the mapped pages are the operating system's file
	// cache. The price of the map is SQLite's: an I/O error on a mapped
	// page (a failing disk, or the file truncated by something other than
	// SQLite) faults the process instead of failing the one scan. Only
	// these page scans map the file; the writer and the database/sql read
	// connections never do.
	PageScanMmapBytes int64
	// MaintenanceLease is how long the maintenance lease
	// (TryLockMaintenance) lasts without renewal: the holder renews it
	// every third of it while it holds it, so a process killed during a
	// maintenance pass keeps others from maintenance for at most this
	// long. <= 0 means DefaultMaintenanceLease.
	MaintenanceLease time.Duration
	// Now is the clock of the maintenance lease; nil means time.Now.
	Now func() time.Time
}

// DefaultMaintenanceLease is the default Options.MaintenanceLease.
const DefaultMaintenanceLease = 60 * time.Second

// DefaultPageScanMmapBytes is the default Options.PageScanMmapBytes:
// 256 MiB per EncodeRows connection. A bootstrap page scan of a table not
// yet in that connection's page cache then costs about 30 % less server
// CPU (bench/RESULTS.md, issue 11); pages beyond the map, and pages still
// in the write-ahead log, are read as before.
const DefaultPageScanMmapBytes = 256 << 20

// pageScanMmap resolves Options.PageScanMmapBytes.
func pageScanMmap(n int64) int64 {
	switch {
	case n == 0:
		return DefaultPageScanMmapBytes
	case n < 0:
		return 0
	}
	return n
}

// rawCacheKiB bounds the page cache of each EncodeRows connection, as for
// every other connection (32 MiB, filled only by pages read). A 4 MiB
// cache was tried: repeated bootstraps of one scope then re-read every
// page from the operating system and cost 10-20 % more server CPU.
const rawCacheKiB = 32768

// DefaultWALAutocheckpointPages lets the write-ahead log grow to about 32
// MiB (4 KiB pages) between checkpoints. A push group dirties tens of
// scattered pages (each log table and the idempotency table are keyed by
// partition and client), and a page rewritten by many groups is copied back
// once per checkpoint: at SQLite's default of 1,000 pages, checkpoints ran
// eight times as often and held 1,000 partitions to 0.80-0.86x the commit
// rate of one (bench/RESULTS.md). The cost is a larger WAL file and a
// longer pause for the commit that runs a checkpoint.
const DefaultWALAutocheckpointPages = 8000

// Store is the SQLite storage backend (its roles: Backend). It is safe
// for concurrent use.
type Store struct {
	log    *zap.Logger
	wdb    *sql.DB   // holds exactly one connection: conn
	conn   *sql.Conn // the writer connection; use only while holding wlock
	rdb    *sql.DB   // read-only pool
	wlock  chan struct{}
	closed chan struct{}
	// group is the open cross-partition commit group (under wlock);
	// pushWaiters counts BeginPush calls waiting for wlock (group.go).
	group       *commitGroup
	pushWaiters atomic.Int32
	// groupCommits and groupMembers count COMMITs of push groups and the
	// push transactions they carried.
	groupCommits, groupMembers atomic.Uint64

	mu     sync.RWMutex // guards sch, tables and stmts (replaced by EnsureSchema)
	sch    *schema.Schema
	tables map[string]*tableStmts
	stmts  *sysStmts

	closeOnce sync.Once
	closeErr  error

	gateOnce sync.Once
	gateStmt *sql.Stmt
	gateErr  error
	// txGateStmt is the gate statement on the writer connection (under wlock).
	txGateStmt *sql.Stmt
	// rstmts caches read statements prepared on the read pool, by SQL text
	// (readStmt); nread counts them to bound the cache.
	rstmts sync.Map
	nread  atomic.Int32

	// path is the database file; holder names this store in the
	// maintenance lease; snaps are the captured partitions (retention.go).
	path   string
	holder string
	// leaseTTL and now are Options.MaintenanceLease and Options.Now
	// (maintenance_lease.go).
	leaseTTL time.Duration
	now      func() time.Time
	snapMu   sync.Mutex
	snaps    map[string]bool
	// wstmts caches statements prepared on the writer connection by SQL
	// text (writerStmt; under wlock).
	wstmts map[string]*sql.Stmt
	// flushArgs and flushKeys are flushGroup's scratch buffers (under
	// wlock).
	flushArgs []any
	flushKeys map[string]struct{}
	// writeBacks batches PutClient calls of different partitions
	// (records.go).
	writeBacks clientWriteBack
	// raw holds EncodeRows' read-only C-API connections (encode_rows.go).
	raw *rawPool
}

// Open opens (creating if missing) the database file at path. path names
// the database file itself; its directory must exist (SQLite also creates
// path+"-wal" and path+"-shm" next to it). EnsureSchema must run before
// any other method.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.ReadConns <= 0 {
		opts.ReadConns = 4
	}
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = 10 * time.Second
	}
	if opts.MaintenanceLease <= 0 {
		opts.MaintenanceLease = DefaultMaintenanceLease
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	base := "file:" + (&url.URL{Path: path}).EscapedPath()
	// temp_store=MEMORY keeps the savepoint subjournal off disk; the page
	// cache is raised to 32 MiB per connection.
	common := fmt.Sprintf("_busy_timeout=%d&_journal_mode=WAL&_synchronous=FULL&_foreign_keys=1&_pragma=temp_store(MEMORY)&_pragma=cache_size(-32768)",
		opts.BusyTimeout.Milliseconds())
	switch {
	case opts.WALAutocheckpointPages == 0:
		common += fmt.Sprintf("&_pragma=wal_autocheckpoint(%d)", DefaultWALAutocheckpointPages)
	case opts.WALAutocheckpointPages > 0:
		common += fmt.Sprintf("&_pragma=wal_autocheckpoint(%d)", opts.WALAutocheckpointPages)
	}
	wdb, err := sql.Open("sqlite", base+"?"+common)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	wdb.SetConnMaxIdleTime(0)
	conn, err := wdb.Conn(ctx)
	if err != nil {
		_ = wdb.Close()
		return nil, fmt.Errorf("sqlite: open writer connection to %s: %w", path, err)
	}
	rdb, err := sql.Open("sqlite", base+"?"+common+"&_query_only=1")
	if err != nil {
		_ = conn.Close()
		_ = wdb.Close()
		return nil, fmt.Errorf("sqlite: open %s for reading: %w", path, err)
	}
	rdb.SetMaxOpenConns(opts.ReadConns)
	rdb.SetMaxIdleConns(opts.ReadConns)
	s := &Store{log: opts.Logger, wdb: wdb, conn: conn, rdb: rdb,
		wlock: make(chan struct{}, 1), closed: make(chan struct{}), path: path, holder: storage.NewLogEpoch(),
		leaseTTL: opts.MaintenanceLease, now: opts.Now,
		raw: newRawPool(path, opts.ReadConns, opts.BusyTimeout, rawCacheKiB, pageScanMmap(opts.PageScanMmapBytes))}
	if err := s.createSystemTables(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	s.log.Info("sqlite store opened", zap.String("path", path))
	return s, nil
}

// errClosed reports use of a closed Store.
var errClosed = fmt.Errorf("sqlite: store is closed")

// current returns the ensured schema with its statements.
func (s *Store) current() (*schema.Schema, map[string]*tableStmts, *sysStmts, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.sch == nil {
		return nil, nil, nil, storage.ErrSchemaNotEnsured
	}
	return s.sch, s.tables, s.stmts, nil
}

// Close closes the connections. It does not wait for open PushTx; callers
// finish them first. Calling Close again returns the first result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.mu.Lock()
		closeStmts(s.stmts, s.tables)
		s.stmts, s.tables, s.sch = nil, nil, nil
		s.mu.Unlock()
		var errs []error
		for _, st := range []*sql.Stmt{s.gateStmt, s.txGateStmt} {
			if st != nil {
				_ = st.Close()
			}
		}
		s.rstmts.Range(func(_, v any) bool { _ = v.(*sql.Stmt).Close(); return true })
		// The writer's cached statements (under the write lock, when free):
		// a statement left open keeps its connection, and so the file's
		// locks, open past Close.
		select {
		case s.wlock <- struct{}{}:
			for _, st := range s.wstmts {
				_ = st.Close()
			}
			s.wstmts = nil
			<-s.wlock
		default:
		}
		if err := s.conn.Close(); err != nil {
			errs = append(errs, err)
		}
		if err := s.wdb.Close(); err != nil {
			errs = append(errs, err)
		}
		if err := s.rdb.Close(); err != nil {
			errs = append(errs, err)
		}
		s.raw.close()
		if len(errs) > 0 {
			s.closeErr = fmt.Errorf("sqlite: close: %v", errs)
		}
	})
	return s.closeErr
}

// maxReadStmts bounds the read statement cache; queries past it (rare
// shapes of dynamic IN lists) run unprepared.
const maxReadStmts = 256

// readQuery runs a read on the read pool through a cached prepared
// statement (SQLite re-parses unprepared SQL on every call).
func (s *Store) readQuery(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if st := s.readStmt(ctx, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return s.rdb.QueryContext(ctx, q, args...)
}

// readQueryRow is readQuery for one row.
func (s *Store) readQueryRow(ctx context.Context, q string, args ...any) *sql.Row {
	if st := s.readStmt(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return s.rdb.QueryRowContext(ctx, q, args...)
}

// readStmt returns the cached read statement for q, preparing it on first
// use, or nil when the cache is full or q does not prepare.
func (s *Store) readStmt(ctx context.Context, q string) *sql.Stmt {
	if st, ok := s.rstmts.Load(q); ok {
		return st.(*sql.Stmt)
	}
	if s.nread.Load() >= maxReadStmts {
		return nil
	}
	st, err := s.rdb.PrepareContext(ctx, q)
	if err != nil {
		return nil // the unprepared path reports the error
	}
	if prev, loaded := s.rstmts.LoadOrStore(q, st); loaded {
		_ = st.Close()
		return prev.(*sql.Stmt)
	}
	s.nread.Add(1)
	return st
}

// inWriteTx runs fn inside BEGIN IMMEDIATE ... COMMIT on the writer
// connection; the caller holds the write lock.
// Only BEGIN honours ctx's cancellation: interrupting a write inside the
// transaction would silently roll it back and leave later statements in
// autocommit mode.
func (s *Store) inWriteTx(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	if _, err := s.conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("sqlite: %s: begin: %w", what, err)
	}
	ctx = context.WithoutCancel(ctx)
	if err := fn(ctx); err != nil {
		s.rollbackQuietly()
		return fmt.Errorf("sqlite: %s: %w", what, err)
	}
	if _, err := s.conn.ExecContext(ctx, "COMMIT"); err != nil {
		s.rollbackQuietly()
		return fmt.Errorf("sqlite: %s: commit: %w", what, err)
	}
	return nil
}

// rollbackQuietly ends the writer's transaction, if any, ignoring ctx so
// a cancelled caller still leaves the connection clean.
func (s *Store) rollbackQuietly() {
	if _, err := s.conn.ExecContext(context.Background(), "ROLLBACK"); err != nil && !strings.Contains(err.Error(), "no transaction is active") {
		s.log.Warn("sqlite rollback failed", zap.Error(err))
	}
}

// rowScanner is what *sql.Row and *sql.Rows share.
type rowScanner interface{ Scan(dest ...any) error }

// execer is what *sql.Conn and *sql.Tx share.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}
