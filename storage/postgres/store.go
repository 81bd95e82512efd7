package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/synclane/synclane/storage"
)

// DefaultNotifyChannel is the LISTEN/NOTIFY channel commits are announced on
// unless Options.NotifyChannel says otherwise.
const DefaultNotifyChannel = "synclane_commits"

// NotifyChannelFor is the default notification channel of a store in
// schema: DefaultNotifyChannel for the search_path's schema (""), else
// DefaultNotifyChannel, "_" and the schema name, or, when that would exceed
// PostgreSQL's 63-byte identifier limit, "_" and the first 16 hex digits of
// the name's SHA-256 (channel names are identifiers: longer ones are
// silently truncated, which could merge two schemas' channels).
func NotifyChannelFor(schema string) string {
	if schema == "" {
		return DefaultNotifyChannel
	}
	if ch := DefaultNotifyChannel + "_" + schema; len(ch) <= 63 {
		return ch
	}
	sum := sha256.Sum256([]byte(schema))
	return DefaultNotifyChannel + "_" + hex.EncodeToString(sum[:8])
}

// Options configure a Store. The zero value is usable.
type Options struct {
	// Logger receives operational messages (notifier reconnects). Nil means
	// zap.NewNop().
	Logger *zap.Logger
	// MaxConns bounds the pool Open creates (default 16 when <= 0; at
	// least MinMaxConns, or Open fails). Ignored by OpenPool.
	MaxConns int32
	// StatementTimeout is set as statement_timeout on every connection Open
	// creates (default 30s; negative disables). Ignored by OpenPool, whose
	// owner configures its connections.
	StatementTimeout time.Duration
	// IdleInTransactionTimeout, when positive, is set as
	// idle_in_transaction_session_timeout on every connection Open creates:
	// PostgreSQL ends a session whose transaction sits idle that long,
	// releasing its locks. Cluster mode sets it so that a member paused
	// (or cut off) while it holds a partition's row lock cannot keep the
	// partition's new owner waiting past it. 0: the server's setting.
	// Ignored by OpenPool.
	IdleInTransactionTimeout time.Duration
	// Schema is the PostgreSQL schema (namespace) holding every table of the
	// store. Empty means the connection's search_path. When set, every
	// statement names it explicitly, EnsureSchema creates it if needed, and
	// Open also puts it first on each connection's search_path.
	Schema string
	// NotifyChannel is the channel of commit notifications. The default is
	// DefaultNotifyChannel without a Schema and NotifyChannelFor(Schema)
	// with one, so deployments sharing one database in separate schemas
	// never hear each other's commits; every process serving one schema
	// must use the same channel (the default does).
	NotifyChannel string
	// DisableNotify stops Commit from announcing commits with pg_notify.
	// Cluster mode sets it: a partition's owner tells the members that
	// follow the partition itself, and no member listens. A NOTIFY takes
	// one database-wide lock from its transaction's pre-commit to its end
	// (PostgreSQL's async.c), so notifying transactions of the whole
	// database commit one after another; without it commits of different
	// partitions commit concurrently.
	DisableNotify bool
}

// Store is a storage backend on a PostgreSQL database (its roles:
// Backend). It is safe for concurrent use by any number of goroutines and
// processes.
type Store struct {
	pool     *pgxpool.Pool
	ownsPool bool
	log      *zap.Logger
	channel  string
	notify   bool   // Commit sends pg_notify on channel
	schema   string // raw schema name, "" = search_path
	q        sysSQL

	mu        sync.RWMutex
	ensured   bool
	running   int32                // schema version of the last EnsureSchema, 0 before
	tables    map[string]*tableSQL // by table name, built by EnsureSchema
	closed    bool
	notifiers map[*Notifier]struct{}

	// bumpHook, when set (tests only), runs inside EnsureSchema's bump
	// transaction just before it commits, while it holds the EXCLUSIVE
	// lock on sync_partitions.
	bumpHook func(ctx context.Context)
}

// DefaultConnectTimeout bounds each new connection of a pool Open creates
// (connecting, TLS and authentication) when the connection string sets no
// connect_timeout. pgx creates a connection for an Acquire in the
// background and the attempt holds one of the pool's MaxConns slots until
// it ends, whatever the deadline of the request that started it.
const DefaultConnectTimeout = 5 * time.Second

// MinMaxConns is the smallest pool Open accepts: a maintenance pass holds
// one connection for its lock while it reads and prunes on another.
const MinMaxConns = 2

// Open connects a new pool to connString (a pgx URL or DSN) and returns a
// Store using it. The Store owns the pool and closes it on Close. Open
// verifies connectivity with a ping; it does not run EnsureSchema. A
// pool smaller than MinMaxConns is refused. Each new connection is
// bounded by the string's connect_timeout, DefaultConnectTimeout without
// one.
func Open(ctx context.Context, connString string, opts Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse connection string: %w", err)
	}
	cfg.MaxConns = opts.MaxConns
	switch {
	case cfg.MaxConns <= 0:
		cfg.MaxConns = 16
	case cfg.MaxConns < MinMaxConns:
		return nil, fmt.Errorf("postgres: a pool of %d connection is too small: MaxConns must be at least %d (a maintenance pass holds one for its lock while it reads and prunes on another)", cfg.MaxConns, MinMaxConns)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		// A connection attempt holds its pool slot until it ends: without
		// a bound, attempts stalled by a database that went away (packets
		// dropped, not refused) would keep the pool full long after the
		// database is back.
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	timeout := opts.StatementTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	rp := cfg.ConnConfig.RuntimeParams
	if timeout > 0 {
		rp["statement_timeout"] = fmt.Sprintf("%d", timeout.Milliseconds())
	}
	if opts.IdleInTransactionTimeout > 0 {
		rp["idle_in_transaction_session_timeout"] = fmt.Sprintf("%d", opts.IdleInTransactionTimeout.Milliseconds())
	}
	if opts.Schema != "" {
		rp["search_path"] = pgx.Identifier{opts.Schema}.Sanitize() + ", public"
	}
	if _, ok := rp["application_name"]; !ok {
		rp["application_name"] = "synclane"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: create pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, classify("ping", err)
	}
	s := OpenPool(pool, opts)
	s.ownsPool = true
	return s, nil
}

// OpenPool returns a Store on a pool the caller owns: Close does not close
// it. Options.MaxConns and StatementTimeout are ignored (configure the pool
// instead); Schema is honoured by qualifying every table name.
func OpenPool(pool *pgxpool.Pool, opts Options) *Store {
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	ch := opts.NotifyChannel
	if ch == "" {
		ch = NotifyChannelFor(opts.Schema)
	}
	return &Store{
		pool:      pool,
		log:       log,
		channel:   ch,
		notify:    !opts.DisableNotify,
		schema:    opts.Schema,
		q:         newSysSQL(opts.Schema),
		tables:    map[string]*tableSQL{},
		notifiers: map[*Notifier]struct{}{},
	}
}

// Pool returns the store's connection pool, for hosts that run their own
// queries next to the store.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Close stops every Notifier started by Listen, then closes the pool if
// Open created it. Close is idempotent. Open PushTx must be finished first.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ns := make([]*Notifier, 0, len(s.notifiers))
	for n := range s.notifiers {
		ns = append(ns, n)
	}
	s.mu.Unlock()
	for _, n := range ns {
		n.Close()
	}
	if s.ownsPool {
		s.pool.Close()
	}
	return nil
}

// errClosed reports use of a closed Store.
var errClosed = errors.New("postgres: store is closed")

// ready fails with ErrSchemaNotEnsured before EnsureSchema and with an error
// after Close.
func (s *Store) ready() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return errClosed
	}
	if !s.ensured {
		return fmt.Errorf("postgres: %w", storage.ErrSchemaNotEnsured)
	}
	return nil
}

// table returns the statements of the row table name as of the last
// EnsureSchema.
func (s *Store) table(name string) (*tableSQL, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if !s.ensured {
		return nil, fmt.Errorf("postgres: %w", storage.ErrSchemaNotEnsured)
	}
	t, ok := s.tables[name]
	if !ok {
		return nil, fmt.Errorf("postgres: table %q is not in the ensured schema", name)
	}
	return t, nil
}

// queryer is what pgx.Tx, *pgxpool.Conn and *pgxpool.Pool share.
type queryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}
