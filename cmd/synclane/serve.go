package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/segments"
	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/yjs"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/datadir"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/homes"
	"github.com/synclane/synclane/storage/segstore"
	"github.com/synclane/synclane/storage/segstore/pgseg"
	"github.com/synclane/synclane/storage/segstore/sqlitefile"
	"github.com/synclane/synclane/storage/segstore/sqliteimage"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/bodybudget"
	"github.com/synclane/synclane/transport/demo"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/peer"
	"github.com/synclane/synclane/transport/realtime"
	"github.com/synclane/synclane/transport/testcontrol"
)

// checkpointFlags collects repeatable --checkpoint PARTITION/NAME flags.
type checkpointFlags []storage.CheckpointRef

func (c *checkpointFlags) String() string { return fmt.Sprint(*c) }

// Set adds one PARTITION/NAME, or several separated by commas (the form
// SYNCLANE_CHECKPOINT takes).
func (c *checkpointFlags) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		ref, err := parseCheckpointRef(strings.TrimSpace(part))
		if err != nil {
			return err
		}
		*c = append(*c, ref)
	}
	return nil
}

func parseCheckpointRef(v string) (storage.CheckpointRef, error) {
	p, n, ok := strings.Cut(v, "/")
	if !ok || p == "" || n == "" {
		return storage.CheckpointRef{}, fmt.Errorf("checkpoint %q: want PARTITION/NAME", v)
	}
	return storage.CheckpointRef{Partition: p, Name: n}, nil
}

type serveConfig struct {
	checkpoints                                                       checkpointFlags
	listen, data, schemaFile, mount, jwtSecret, postgresURL, logLevel string
	maxBody, maxInflightBody                                          int64
	pgMaxConns                                                        int
	maintenanceLease                                                  time.Duration
	// homes is --postgres-databases: the PostgreSQL databases partitions
	// are spread over next to --postgres (homes.go).
	homes homesFlag
	// sqliteFiles is --sqlite-files: K, the database files of a new data
	// directory (sqlitefiles.go).
	sqliteFiles                                      sqliteFilesFlag
	pgStatementTimeout, shutdownTimeout, idleTimeout time.Duration
	maxOps                                           int
	maxCascadeOps                                    int
	// wireVersions is --wire-versions: the SSP2 wire versions served.
	wireVersions wireVersionsFlag

	// Authentication: --jwt-secret, or development headers (--dev-auth, or
	// no auth flag at all) on a loopback address unless overridden.
	devAuth, devAuthNonLoopback, jwtAllowNoExp bool

	// HTTP connection limits and the drain on SIGTERM.
	readTimeout, writeTimeout, httpIdleTimeout, drainDelay time.Duration

	// debugListen serves net/http/pprof (loopback only; off when empty).
	debugListen string

	// blobs are the blob flags (blobs.go).
	blobs blobConfig

	// Retention: pruning policy and the maintenance loop.
	retention retentionConfig
	// Durable reactions (reactions.go).
	reactions reactionConfig
	// Segment store quota (segquota.go).
	segQuota segQuotaConfig

	// Test-control surface (--test-control) and its start options.
	testControl bool
	// demo serves the demo app at / (transport/demo) with development
	// authentication on the built-in schema; see demoEnabled.
	demo    bool
	clockMs int64
	// Realtime (GET <mount>/realtime) limits.
	maxDeltaBytes, maxPresenceBytes int64
	maxWebsockets                   int
	// Connection caps: --max-connections, per-client and per-actor sockets (connlimits.go).
	conn connLimitConfig
	// tracing holds --otlp-endpoint (tracing.go).
	tracing tracingConfig

	// Segments (inline limit, TTL, signed URLs), and options of features
	// that are not implemented yet: accepted and validated so a harness can
	// pass them, without effect (logged).
	inlineSegmentMaxBytes              int64
	segmentTTL, signedURLTTL, leaseTTL time.Duration
	leaseKey                           string // lease.go
	signedURLKey, publicURL            string

	// Admin API and console (--admin-listen, --admin-token), event ring.
	admin adminConfig
	// Cluster mode (cluster.go).
	cluster clusterConfig
	// CORS for browser pages on other origins (cors.go).
	cors corsConfig
	// JWT authentication against a JWKS (jwks.go).
	jwks jwksConfig
	// Log format and the access log (logging.go).
	logging logConfig
}

// minJWTSecret is the shortest HS256 secret serve accepts (256 bits, the
// hash's size).
const minJWTSecret = 32

// storeFlags are the flags naming the database and its schema, shared by
// serve and the checkpoint commands.
func storeFlags(fs *flag.FlagSet, c *serveConfig) {
	fs.StringVar(&c.data, "data", "./synclane-data", "data directory of the embedded SQLite database")
	fs.StringVar(&c.schemaFile, "schema", "", "schema JSON file (default: the built-in demo schema, table todos)")
	fs.StringVar(&c.postgresURL, "postgres", "", "PostgreSQL URL: store data in PostgreSQL instead of embedded SQLite")
	fs.Var(&c.homes, "postgres-databases", "with --postgres: more PostgreSQL databases to spread partitions over, as NAME=URL[,NAME=URL...] (names: 1-32 of a-z 0-9 _ -; the --postgres database is home \"main\" and holds the directory of which database holds each partition); every process of the deployment needs the same list")
	fs.IntVar(&c.pgMaxConns, "pg-max-conns", 16, "PostgreSQL connection pool size (per database with --postgres-databases)")
	fs.DurationVar(&c.pgStatementTimeout, "pg-statement-timeout", 30*time.Second, "PostgreSQL statement timeout")
	c.sqliteFiles.n = sqlite.DefaultDirFiles
	fs.Var(&c.sqliteFiles, "sqlite-files", fmt.Sprintf("embedded SQLite: the number of database files (1-%d) a new data directory spreads its partitions over, each with its own writer; an existing directory keeps its own (change it with `synclane respread`)", sqlite.MaxDirFiles))
	fs.DurationVar(&c.maintenanceLease, "maintenance-lease", sqlite.DefaultMaintenanceLease, "embedded SQLite: how long the maintenance lease (one prune or maintenance pass at a time) lasts without renewal; a killed holder's lease lapses after it (renewed every third of it)")
}

func serveFlags(fs *flag.FlagSet, c *serveConfig) {
	storeFlags(fs, c)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8787", "address to listen on")
	fs.StringVar(&c.mount, "mount", "/", "path prefix of the protocol routes (sync, operations, realtime, segments, blobs); /healthz, /readyz and /metrics stay at the root")
	fs.StringVar(&c.jwtSecret, "jwt-secret", "", fmt.Sprintf("HS256 secret of at least %d bytes: authenticate with JWTs (sub, partition, scopes, exp claims) instead of development headers; given but empty is an error", minJWTSecret))
	fs.BoolVar(&c.jwtAllowNoExp, "jwt-allow-no-exp", false, "with --jwt-secret: accept tokens without an exp claim (by default they are refused with 401 sync.auth_required)")
	jwksFlags(fs, &c.jwks) // jwks.go
	fs.BoolVar(&c.devAuth, "dev-auth", false, "development authentication: the actor from header x-actor, every scope allowed (the default when no --jwt-secret is given); loopback --listen only")
	fs.BoolVar(&c.devAuthNonLoopback, "dev-auth-non-loopback", false, "allow development authentication on a non-loopback --listen address (anyone who reaches the port is any actor)")
	fs.Int64Var(&c.maxBody, "max-body", bodybudget.DefaultMaxBodyBytes, "maximum decompressed request body in bytes, for POST /sync and realtime socket rounds (larger: 413, or the socket closed with 1009)")
	fs.Int64Var(&c.maxInflightBody, "max-inflight-body-bytes", bodybudget.DefaultLimit, fmt.Sprintf("request-body bytes held at once by all POST /sync requests and socket rounds; beyond it a request waits up to %s, then gets 503 sync.rate_limited (retryable)", bodybudget.DefaultWait))
	fs.IntVar(&c.maxOps, "max-operations", 500, "maximum push operations per request")
	fs.IntVar(&c.maxCascadeOps, "max-cascade-operations", partition.DefaultMaxCascadeOperations, "maximum operations one commit's declared references may append (ON DELETE CASCADE / SET NULL); beyond it the commit is refused with sync.reference_violation (cascade_limit)")
	fs.Var(&c.wireVersions, "wire-versions", "SSP2 wire versions served, a comma-separated `LIST`: 3 (the default, as the reference server), or 2,3 / 1,2,3 to keep clients that have not upgraded working during a migration (their requests run under version 3's write rules); a request in another version gets 400 sync.invalid_request")
	fs.DurationVar(&c.idleTimeout, "idle-timeout", 2*time.Minute, "passivate partition actors idle this long")
	fs.DurationVar(&c.readTimeout, "read-timeout", 30*time.Second, "time to read a whole request, headers and body; a slower client's connection is closed (408 when the body is late)")
	fs.DurationVar(&c.writeTimeout, "write-timeout", 60*time.Second, "a response must make progress within this long (renewed as bytes flow); a client that stops reading is disconnected")
	fs.DurationVar(&c.httpIdleTimeout, "http-idle-timeout", 2*time.Minute, "close keep-alive connections idle this long")
	fs.StringVar(&c.debugListen, "debug-listen", "", "serve net/http/pprof (/debug/pprof/) on this loopback address, e.g. 127.0.0.1:6060 (off when empty)")
	fs.DurationVar(&c.drainDelay, "drain-delay", 5*time.Second, "on SIGTERM, answer /readyz 503 but keep serving this long before closing the listener (skipped when no connection is open at SIGTERM)")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 30*time.Second, "after the drain delay, how long in-flight requests get to finish before their connections are closed")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	logFlags(fs, &c.logging) // logging.go
	adminListenFlags(fs, &c.admin)
	clusterFlags(fs, &c.cluster)
	retentionFlags(fs, &c.retention, true)
	reactionFlags(fs, &c.reactions)
	segQuotaFlags(fs, &c.segQuota)
	blobFlags(fs, &c.blobs)
	corsFlags(fs, &c.cors) // cors.go
	fs.Var(&c.checkpoints, "checkpoint", "PARTITION/NAME of a backfill checkpoint this process declares at its schema version (repeatable, or comma-separated)")
	fs.BoolVar(&c.demo, "demo", true, "serve the demo app (a todo list page and its small sync client, an example) at / with development authentication and the built-in demo schema; never with --jwt-secret, --jwks-url, --schema or --test-control")
	fs.BoolVar(&c.testControl, "test-control", false, "serve the test-only control surface under /_test/ (only with development auth on a loopback address)")
	fs.Int64Var(&c.clockMs, "clock-ms", -1, "with --test-control: run on a virtual clock starting at this Unix time in ms, moved only by POST /_test/clock/advance")
	fs.Int64Var(&c.inlineSegmentMaxBytes, "inline-segment-max-bytes", 256<<10, "largest first bootstrap page sent inline to clients that accept both inline rows and segment refs; larger tables go by SEGMENT_REF (0: always by ref when accepted)")
	fs.Int64Var(&c.maxDeltaBytes, "max-delta-bytes", realtime.DefaultMaxDeltaBytes, "largest realtime delta in bytes; a larger one is sent as a delta-too-large wake-up (0: the default)")
	fs.Int64Var(&c.maxPresenceBytes, "max-presence-bytes", realtime.DefaultMaxPresenceBytes, "largest realtime presence document in bytes; a larger one is refused with presence.too_large (0: the default)")
	fs.IntVar(&c.maxWebsockets, "max-websockets", realtime.DefaultMaxConnections, "most realtime sockets this process holds; more upgrades get 429 sync.websocket_connection_limit")
	connLimitFlags(fs, &c.conn)
	tracingFlags(fs, &c.tracing)
	fs.DurationVar(&c.segmentTTL, "segment-ttl", 24*time.Hour, "how long a segment is downloadable after it is built (then 404 sync.segment_expired)")
	fs.DurationVar(&c.signedURLTTL, "signed-url-ttl", 0, "enable signed segment URLs (issued to clients accepting them) with this lifetime, at most 15m (off when 0)")
	fs.StringVar(&c.signedURLKey, "signed-url-key", "", "HMAC key of signed segment URLs, at least 32 bytes; processes sharing a database need the same key (default: random per process)")
	fs.StringVar(&c.publicURL, "public-url", "", "base URL clients reach this server's mount at, for signed segment URLs, e.g. https://sync.example.com/api (default: http://<listen address><mount>)")
	fs.DurationVar(&c.leaseTTL, "lease-ttl", 0, "enable auth leases (SPEC §7.3) with this lifetime, at most 720h: LEASE frames, outage authorization (off when 0)")
	fs.StringVar(&c.leaseKey, "lease-key", "", "HMAC key signing lease records, at least 32 bytes; required with --postgres (every process needs the same key); default with SQLite: generated once in <data>/lease.key")
}

// demoEnabled reports whether serve answers the demo app at /: --demo (the
// default) with development authentication (no --jwt-secret or
// --jwks-url), the built-in demo schema (no --schema: the page knows only
// table todos) and no --test-control (which grants no scope by default).
func (c *serveConfig) demoEnabled() bool {
	return c.demo && c.devAuth && c.schemaFile == "" && !c.testControl
}

// useDevAuth reports whether the server authenticates with development
// headers: chosen with --dev-auth, or no authentication flag given at all.
func (c *serveConfig) useDevAuth(given map[string]bool) bool {
	return c.devAuth || !tokenAuthGiven(given) && !given["dev-auth"]
}

// validate checks the configuration before anything touches storage; given
// holds the flags set on the command line or through the environment
// (set but empty counts).
func (c *serveConfig) validate(given map[string]bool) error {
	if c.listen == "" {
		return errors.New("--listen is empty: want host:port")
	}
	if err := c.admin.validate(); err != nil {
		return err
	}
	if err := c.tracing.validate(); err != nil {
		return err
	}
	if c.debugListen != "" && !loopback(c.debugListen) {
		return fmt.Errorf("--debug-listen must be a loopback address (it exposes profiles and goroutine dumps), got %q", c.debugListen)
	}
	if err := c.jwks.validate(given, c.devAuth, c.jwtAllowNoExp); err != nil {
		return err
	}
	switch {
	case given["jwt-secret"] && c.devAuth:
		return errors.New("--dev-auth and --jwt-secret exclude each other")
	case given["jwt-secret"] && c.jwtSecret == "":
		return errors.New("--jwt-secret (or SYNCLANE_JWT_SECRET) is set but empty: refusing to start without authentication; pass a secret of at least 32 bytes, or --dev-auth for development")
	case given["jwt-secret"] && len(c.jwtSecret) < minJWTSecret:
		return fmt.Errorf("--jwt-secret is %d bytes: an HS256 secret needs at least %d (e.g. openssl rand -hex 32)", len(c.jwtSecret), minJWTSecret)
	case !c.useDevAuth(given):
		if !tokenAuthGiven(given) {
			return errors.New("no authentication: --dev-auth=false needs --jwt-secret or --jwks-url")
		}
		if c.devAuthNonLoopback {
			return errors.New("--dev-auth-non-loopback applies only to development authentication, not with --jwt-secret")
		}
	case c.jwtAllowNoExp:
		return errors.New("--jwt-allow-no-exp needs --jwt-secret")
	case !loopback(c.listen) && !c.devAuthNonLoopback && !c.testControl:
		return fmt.Errorf("development authentication (anyone is any actor with every scope) listens only on a loopback address (127.0.0.1, [::1] or localhost), got --listen %q: pass --jwt-secret, or --dev-auth-non-loopback to accept the risk", c.listen)
	}
	if c.testControl {
		if tokenAuthGiven(given) {
			return errors.New("--test-control needs development authentication: it cannot be combined with --jwt-secret or --jwks-url")
		}
		if !loopback(c.listen) {
			return fmt.Errorf("--test-control needs a loopback --listen address (127.0.0.1, [::1] or localhost), got %q", c.listen)
		}
	} else if c.clockMs >= 0 {
		return errors.New("--clock-ms needs --test-control")
	}
	if err := c.retention.validate(); err != nil {
		return err
	}
	if err := c.cluster.validate(given, c.postgresURL); err != nil {
		return err
	}
	if err := c.validateHomes(); err != nil { // homes.go
		return err
	}
	if err := c.segQuota.validate(); err != nil {
		return err
	}
	if err := c.reactions.validate(c.testControl); err != nil {
		return err
	}
	if err := c.blobs.validate(); err != nil {
		return err
	}
	if err := c.cors.validate(given); err != nil { // cors.go
		return err
	}
	for name, v := range map[string]int64{"inline-segment-max-bytes": c.inlineSegmentMaxBytes, "max-delta-bytes": c.maxDeltaBytes, "max-presence-bytes": c.maxPresenceBytes} {
		if v < 0 {
			return fmt.Errorf("--%s must not be negative", name)
		}
	}
	if c.maxWebsockets < 1 {
		return errors.New("--max-websockets must be positive")
	}
	if c.maxCascadeOps < 1 {
		return errors.New("--max-cascade-operations must be positive")
	}
	if err := c.conn.validate(given, &c.maxWebsockets); err != nil { // connlimits.go; may clamp the default --max-websockets
		return err
	}
	if c.maxBody < 1 || c.maxInflightBody < 1 {
		return errors.New("--max-body and --max-inflight-body-bytes must be positive")
	}
	if c.pgMaxConns < postgres.MinMaxConns || c.pgMaxConns > math.MaxInt32 {
		return fmt.Errorf("--pg-max-conns must be between %d and %d (a maintenance pass holds one connection while it works on another), got %d", postgres.MinMaxConns, math.MaxInt32, c.pgMaxConns)
	}
	if c.idleTimeout <= 0 {
		return errors.New("--idle-timeout must be positive (idle partition actors are passivated after it)")
	}
	for name, v := range map[string]time.Duration{"segment-ttl": c.segmentTTL, "signed-url-ttl": c.signedURLTTL, "lease-ttl": c.leaseTTL,
		"drain-delay": c.drainDelay, "shutdown-timeout": c.shutdownTimeout} {
		if v < 0 {
			return fmt.Errorf("--%s must not be negative", name)
		}
	}
	if c.signedURLTTL > segstore.MaxSignedURLTTL {
		return fmt.Errorf("--signed-url-ttl must be at most %s", segstore.MaxSignedURLTTL)
	}
	if c.signedURLKey != "" && len(c.signedURLKey) < 32 {
		return errors.New("--signed-url-key must be at least 32 bytes")
	}
	if err := c.validateLeases(); err != nil { // lease.go
		return err
	}
	for name, v := range map[string]time.Duration{"read-timeout": c.readTimeout, "write-timeout": c.writeTimeout, "http-idle-timeout": c.httpIdleTimeout} {
		if v <= 0 {
			return fmt.Errorf("--%s must be positive", name)
		}
	}
	return nil
}

// loopback reports whether a listen address binds only a loopback
// interface.
func loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// envName is the environment variable of a flag: SYNCLANE_<NAME>, upper
// case, dashes as underscores.
func envName(flagName string) string {
	return "SYNCLANE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// applyEnv sets every flag not given on the command line from
// SYNCLANE_<NAME>. A variable that is set but empty counts as given, with
// the empty value (as `--flag ""` would): SYNCLANE_JWT_SECRET= is refused
// rather than taken for "no secret", and an empty number is an error.
func applyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		key := envName(f.Name)
		if v, ok := lookup(key); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s: %w", key, e)
			}
		}
	})
	return err
}

// givenFlags returns the flags set on the command line or through the
// environment.
func givenFlags(fs *flag.FlagSet) map[string]bool {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	return given
}

// printFlags lists fs's flags like flag.PrintDefaults, each with its
// environment variable.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if typ != "" {
			line += " " + typ
		}
		fmt.Fprintf(w, "%s\n    \t%s", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
		switch f.DefValue {
		case "", "0", "false", "0s", "[]":
		default:
			if typ == "string" {
				fmt.Fprintf(w, " (default %q)", f.DefValue)
			} else {
				fmt.Fprintf(w, " (default %v)", f.DefValue)
			}
		}
		fmt.Fprintf(w, "\n    \tenv %s\n", envName(f.Name))
	})
}

func serve(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	var c serveConfig
	fs := flag.NewFlagSet("synclane serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	serveFlags(fs, &c)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: synclane serve [flags]\n\n"+
			"Every flag can also be set through the environment variable shown under it\n"+
			"(SYNCLANE_<FLAG>, upper case, dashes as underscores); flags win. A variable\n"+
			"that is set but empty counts as given with an empty value.\n\n")
		printFlags(stderr, fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "synclane serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if err := applyEnv(fs, lookup); err != nil {
		fmt.Fprintln(stderr, "synclane:", err)
		return 2
	}
	c.blobs.lookup = lookup
	given := givenFlags(fs)
	if err := c.validate(given); err != nil {
		fmt.Fprintln(stderr, "synclane:", err)
		return 2
	}
	c.devAuth = c.useDevAuth(given)
	log, err := c.logging.newLogger(c.logLevel, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "synclane:", err)
		return 2
	}
	defer log.Sync() //nolint:errcheck
	if err := runServer(ctx, c, log, stdout); err != nil {
		log.Error("synclane stopped with an error", zap.Error(err))
		if held := (*datadir.HeldError)(nil); errors.As(err, &held) || errors.Is(err, storage.ErrSchemaChanged) || errors.Is(err, sqlite.ErrLayout) || errors.Is(err, sqlite.ErrRespreadPending) || errors.Is(err, errRestorePending) || errors.Is(err, errJoinRefused) {
			fmt.Fprintln(stderr, "synclane serve:", err) // for the operator, not only the log
		}
		if errors.Is(err, sqlite.ErrFileCount) {
			// --sqlite-files against the directory's own K: a configuration
			// error, exit 2 like a bad flag (the message names respread).
			fmt.Fprintln(stderr, "synclane serve:", err)
			return 2
		}
		if re := (*engine.ReadinessError)(nil); errors.As(err, &re) && re.Phase == engine.PhaseSchemaCompile {
			// A schema that does not compile is a configuration error:
			// exit 2, like a bad flag, before any storage is touched.
			fmt.Fprintln(stderr, "synclane serve:", err)
			return 2
		}
		return 1
	}
	return 0
}

// schemaFileError prefixes a schema error with its file and, when Parse
// located it, "file:line:column: " as compilers do.
func schemaFileError(file string, err error) error {
	if pe := (*schema.PositionError)(nil); errors.As(err, &pe) {
		return fmt.Errorf("%s:%d:%d: %w", file, pe.Line, pe.Column, pe.Err)
	}
	return fmt.Errorf("%s: %w", file, err)
}

func schemaSource(file string) ([]byte, error) {
	if file == "" {
		return []byte(schema.Demo), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read schema: %w", err)
	}
	return b, nil
}

// store is the storage backend serve and the maintenance commands open:
// its roles, and the PostgreSQL store when it is one (the segment store,
// the blob store and the commit feed then share its database).
type store struct {
	storage.Backend
	pg  *postgres.Store // nil on SQLite; main's with --postgres-databases
	dir *sqlite.Dir     // nil on PostgreSQL
	// homes routes partitions to their databases with
	// --postgres-databases (nil otherwise).
	homes *homes.Homes
}

// feed is the commit feed of other processes' commits on PostgreSQL
// (every home's with --postgres-databases).
func (s store) feed() engine.CommitFeed {
	if s.homes != nil {
		return s.homes
	}
	return s.pg
}

// Close closes the backend.
func (s store) Close() error { return s.Lifecycle.Close() }

// openStore opens the backend c names (PostgreSQL with --postgres, else
// the SQLite file in the data directory) and returns it with its kind
// ("postgres" or "sqlite").
func openStore(ctx context.Context, c serveConfig, log *zap.Logger) (store, string, error) {
	if c.postgresURL != "" {
		opts := postgres.Options{Logger: log, MaxConns: int32(c.pgMaxConns), StatementTimeout: c.pgStatementTimeout}
		if c.cluster.enabled() {
			// A member paused or cut off inside a push transaction must
			// not hold its partition's row lock (and keep the new owner's
			// claim waiting) for longer than its lease plus a second.
			opts.IdleInTransactionTimeout = c.cluster.leaseTTL + time.Second
			// Nothing listens in cluster mode (an owner tells its
			// followers itself), and a NOTIFY serializes the commits of
			// the whole database.
			opts.DisableNotify = true
		}
		pg, err := postgres.Open(ctx, c.postgresURL, opts)
		if err != nil {
			return store{}, "postgres", err
		}
		if len(c.homes.list) > 0 {
			h, err := openHomes(ctx, c, pg, opts, log) // homes.go
			if err != nil {
				return store{}, "postgres", err
			}
			return store{Backend: h.Backend(), pg: pg, homes: h}, "postgres", nil
		}
		return store{Backend: pg.Backend(), pg: pg}, "postgres", nil
	}
	if c.maintenanceLease != 0 && c.maintenanceLease < time.Second {
		return store{}, "", fmt.Errorf("--maintenance-lease %s: must be at least 1s", c.maintenanceLease)
	}
	if err := os.MkdirAll(c.data, 0o750); err != nil {
		return store{}, "", fmt.Errorf("create data directory: %w", err)
	}
	d, err := sqlite.OpenDir(ctx, c.data, sqlite.DirOptions{Options: sqlite.Options{Logger: log, MaintenanceLease: c.maintenanceLease},
		Files: c.sqliteFiles.n, FilesExplicit: c.sqliteFiles.set})
	if err != nil {
		return store{}, "sqlite", err
	}
	return store{Backend: d.Backend(), dir: d}, "sqlite", nil
}

// openSegments opens the segment store next to the data: tables
// synclane_segment_objects and synclane_segment_publications of the
// shared PostgreSQL database, or the SQLite file segments.db in the data
// directory. The engine closes it.
func openSegments(ctx context.Context, c serveConfig, st store) (segstore.Store, error) {
	if st.pg != nil {
		return pgseg.Open(ctx, st.pg.Pool())
	}
	return sqlitefile.Open(ctx, filepath.Join(c.data, "segments.db"))
}

// builtinMergers is the crdt merger registry of serve and the maintenance
// commands: the yjs-doc merger (SPEC §5.10).
func builtinMergers() map[string]partition.Merger {
	return map[string]partition.Merger{yjs.CRDTType: yjs.Merger{}}
}

// checkMergers refuses a schema whose crdt column names a crdtType this
// binary cannot merge (SPEC §5.10.1), before any storage is touched.
func checkMergers(s *schema.Schema) error {
	if err := partition.CheckMergers(s, builtinMergers()); err != nil {
		return fmt.Errorf("%w (synclane merges crdtType %q only)", err, yjs.CRDTType)
	}
	return nil
}

func runServer(ctx context.Context, c serveConfig, log *zap.Logger, stdout io.Writer) error {
	src, err := schemaSource(c.schemaFile)
	if err != nil {
		return err
	}
	// The schema is compiled before storage is touched: a bad schema leaves
	// no database behind.
	probe, err := schema.Parse(src)
	if err != nil {
		return &engine.ReadinessError{Phase: engine.PhaseSchemaCompile, Cause: schemaFileError(c.schemaFile, err)}
	}
	if err := checkMergers(probe); err != nil {
		return &engine.ReadinessError{Phase: engine.PhaseSchemaCompile, SchemaVersion: probe.Version, Cause: fmt.Errorf("%s: %w", c.schemaFile, err)}
	}
	// One server per data directory: the lock is held until exit and
	// taken before anything in the directory is opened (the blob store's
	// open sweeps its .tmp).
	lock, err := lockDataDir(&c, serveCommand)
	if err != nil {
		return err
	}
	defer lock.Release() //nolint:errcheck
	if c.postgresURL == "" {
		if err := checkRestorePending(c.data); err != nil {
			return err
		}
	}
	st, backend, err := openStore(ctx, c, log)
	if err != nil {
		return fmt.Errorf("open storage: %w", err)
	}
	defer st.Close()
	decls := make([]storage.CheckpointDeclaration, len(c.checkpoints))
	for i, ref := range c.checkpoints {
		decls[i] = storage.CheckpointDeclaration{Partition: ref.Partition, Name: ref.Name, SchemaVersion: probe.Version}
	}
	sch, err := engine.EnsureReady(ctx, src, st.Lifecycle, decls)
	if err != nil {
		var re *engine.ReadinessError
		if !errors.As(err, &re) || !re.Gated() {
			return err
		}
		log.Warn("serving behind a closed gate: a pending backfill checkpoint was not declared by this process; requests get 503 sync.schema_not_ready until it is activated", zap.Error(err))
	}

	var authn auth.Authenticator
	var resolver engine.ScopeResolver
	var controls testcontrol.Controls
	segs, err := openSegments(ctx, c, st)
	if err != nil {
		return fmt.Errorf("open segment store: %w", err)
	}
	cfg := engine.Config{Schema: sch, Backend: st.Backend, Logger: log,
		MaxOperations: c.maxOps, MaxCascadeOperations: c.maxCascadeOps, WireVersions: c.wireVersions.versions, IdleTimeout: c.idleTimeout, Checkpoints: decls, Retention: c.retention.engineConfig(),
		Segments:  segments.Options{Store: segs, Images: sqliteimage.Builder{}, TTL: c.segmentTTL, InlineMaxBytes: int(c.inlineSegmentMaxBytes)},
		Reactions: c.reactions.engineConfig()}
	c.segQuota.apply(&cfg.Segments)
	if c.inlineSegmentMaxBytes == 0 {
		cfg.Segments.InlineMaxBytes = -1 // nothing inline when the client accepts refs
	}
	cfg.Mergers = builtinMergers()
	if cfg.Blobs, err = openBlobs(ctx, c, st, log); err != nil {
		return fmt.Errorf("open blob store: %w", err)
	}
	// In cluster mode the listener is bound first: the member registers
	// its address, and the engine needs the membership.
	var ln net.Listener
	var mem *member
	if c.cluster.enabled() {
		if ln, err = net.Listen("tcp", c.listen); err != nil {
			return err
		}
		defer ln.Close()
		if mem, err = joinCluster(ctx, c.cluster, "http://"+ln.Addr().String(), log); err != nil {
			return err
		}
		defer mem.close()
		cfg.Cluster = mem.engineConfig(c.cluster)
	} else if st.pg != nil {
		cfg.Feed = st.feed() // other processes' commits (PostgreSQL LISTEN/NOTIFY)
	}
	switch {
	case !c.devAuth:
		var stopAuth func()
		if authn, stopAuth, err = tokenAuth(ctx, &c, log); err != nil { // jwks.go
			return err
		}
		defer stopAuth()
		// A token's scopes claim is the resolver's answer: one naming a
		// variable the schema does not declare is a bad token (401), not
		// a bad request (SPEC §3.2's sync.invalid_subscription).
		authn, resolver = auth.DeclaredGrants(authn, sch.DeclaresVar), auth.GrantsResolver
		if c.jwtAllowNoExp {
			log.Warn("--jwt-allow-no-exp: tokens without an exp claim are accepted and never expire")
		}
	case c.testControl:
		controls = c.testControls(&cfg, sch) // testcontrol.go
		authn, resolver = auth.DevAuth{}, controls.Resolver
		log.Warn("test-control surface enabled under /_test/: development authentication, and no actor holds any scope until PUT /_test/allowed-scopes sets it")
	default:
		authn, resolver = auth.DevAuth{}, engine.AllowAll(sch)
		log.Warn("development authentication: the actor comes from header x-actor and every scope is allowed; pass --jwt-secret in production")
	}
	if c.devAuth && !loopback(c.listen) {
		log.Warn("--dev-auth-non-loopback: development authentication on a non-loopback address; anyone who reaches it is any actor", zap.String("listen", c.listen))
	}
	cfg.Resolver = resolver
	bodies := bodybudget.New(bodybudget.Options{Limit: c.maxInflightBody}) // POST /sync and socket rounds share it
	hubOpts := realtime.Options{Auth: authn, Logger: log.Named("realtime"), MaxConnections: c.maxWebsockets,
		MaxDeltaBytes: int(c.maxDeltaBytes), MaxPresenceBytes: int(c.maxPresenceBytes), MaxRequestBytes: c.maxBody, BodyBudget: bodies,
		RoundTimeout: c.readTimeout} // a socket round's request arrives within the time a POST /sync body must
	c.conn.hubOptions(&hubOpts)
	var relay *peer.Relay
	if mem != nil {
		// Realtime across members: the hub follows the partitions it holds
		// sockets of at their owners, which relay commits, registrations
		// and presence (the follow links dial with HTTP/1.1 upgrades).
		relay = peer.NewRelay(peer.RelayConfig{Self: mem.self, Membership: mem.members, Secret: mem.secret,
			MaxSeq: func(ctx context.Context, p string) (int64, error) {
				info, err := st.Log.ReadPartition(ctx, p)
				return info.MaxCommitSeq, err
			},
			HTTPClient: &http.Client{}, Logger: log.Named("relay")})
		hubOpts.Cluster = relay
	}
	hub := realtime.New(hubOpts)
	hub.Hooks(&cfg) // commits (this process's and, on PostgreSQL, the others') fan out to sockets
	if relay != nil {
		relay.SetHub(hub)
		relay.Hooks(&cfg) // and, in cluster mode, to the members following the partition
	}
	var publicURL atomic.Value // set once the listener is bound
	publicURL.Store(c.publicURL)
	cfg.PublicURL = func() string { return publicURL.Load().(string) } // blob upload URLs; signed segment URLs below
	if c.signedURLTTL > 0 {
		key := []byte(c.signedURLKey)
		if len(key) == 0 {
			key = make([]byte, 32)
			if _, err := rand.Read(key); err != nil {
				return fmt.Errorf("signed URL key: %w", err)
			}
			log.Warn("signed segment URLs use a random per-process key; processes sharing a database need --signed-url-key")
		}
		cfg.SignedURLs = segstore.NewSigner(key, c.signedURLTTL, cfg.Now)
		cfg.PublicURL = func() string { return publicURL.Load().(string) }
		controls.Signer = cfg.SignedURLs
	}
	if err := c.configureLeases(&cfg, log); err != nil { // lease.go
		return err
	}
	c.admin.engineConfig(&cfg)
	stopTracing, err := c.tracing.configure(ctx, &cfg, log) // tracing.go
	if err != nil {
		return err
	}
	defer stopTracing() // (runs after eng.Close: the last spans are flushed)
	eng, err := engine.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer eng.Close()
	if relay != nil {
		relay.Start()
		defer relay.Close() // (runs after hub.Close, before eng.Close)
	}
	hub.Start(eng)
	defer hub.Close() // (runs before eng.Close)
	controls.Engine = eng

	var peerHandler *peer.Handler
	if mem != nil {
		peerHandler = peer.NewHandler(eng, peer.HandlerOptions{Secret: mem.secret, MaxBody: c.maxBody,
			WriteTimeout: c.writeTimeout, Logger: log.Named("peer")})
	}
	mux := httpsync.NewMux(eng, httpsync.MuxOptions{
		Options: httpsync.Options{Auth: authn, MaxBodyBytes: c.maxBody, BodyBudget: bodies, Logger: log, WriteTimeout: c.writeTimeout, ReadTimeout: c.readTimeout,
			Observer: c.admin.observer()},
		Mount:      c.mount,
		Ready:      eng.Ready,
		Realtime:   hub,
		Registerer: serveRegistry(),
		Collectors: append(metricCollectors(hub, eng, relay, &c.conn, st.homes), peerCollectors(mem, peerHandler)...),
		CORS:       c.cors.policy,
	})
	if c.testControl {
		mux.Handle("/_test/", testcontrol.Handler(controls))
	}
	if c.demoEnabled() {
		h := demo.Handler(c.mount)
		for _, p := range demo.Routes {
			mux.Handle(p, h)
		}
	}
	if mem != nil {
		mux.Handle(peer.FollowPath, relay)
		mux.Handle(peer.Prefix, peerHandler)
	} else if ln, err = net.Listen("tcp", c.listen); err != nil {
		return err
	}
	if c.debugListen != "" {
		stop, err := serveDebug(c.debugListen, log)
		if err != nil {
			return fmt.Errorf("--debug-listen: %w", err)
		}
		defer stop()
	}
	srv := &http.Server{Handler: c.logging.handler(mux, log),
		// A request must arrive whole within ReadTimeout (headers within
		// at most 10s of it); an answer must keep flowing (the sync
		// handler renews its deadline as bytes go out, every other route
		// has WriteTimeout in all).
		ReadHeaderTimeout: min(10*time.Second, c.readTimeout), ReadTimeout: c.readTimeout,
		WriteTimeout: c.writeTimeout, IdleTimeout: c.httpIdleTimeout,
		ErrorLog: zap.NewStdLog(log.Named("http"))}
	if mem != nil {
		// Members call each other over HTTP/2 without TLS (h2c, prior
		// knowledge) on this listener; clients keep HTTP/1.1 (or h2c).
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	ln = c.conn.wrap(ln, srv, c.maxWebsockets, log) // --max-connections
	mount := strings.TrimRight(c.mount, "/")
	if c.publicURL == "" {
		publicURL.Store("http://" + ln.Addr().String() + mount)
	}
	log.Info("synclane serving", zap.String("addr", ln.Addr().String()), zap.String("sync", mount+"/sync"), zap.String("realtime", mount+"/realtime"),
		zap.String("storage", backend), zap.Int32("schema_version", sch.Version), zap.Int("tables", len(sch.Tables)))
	if c.demoEnabled() {
		log.Info("demo app (an example client; --demo=false turns it off)", zap.String("url", "http://"+ln.Addr().String()+"/"))
	}
	// The first stdout line is machine-readable: harnesses started with
	// --listen 127.0.0.1:0 read the real port from it. Logs go to stderr.
	c.admin.homes = st.homes
	adminURL, stopAdmin, err := startAdmin(c.admin, eng, hub, mem, log)
	if err != nil {
		return err
	}
	defer stopAdmin() // (runs before eng.Close)
	fmt.Fprintf(stdout, "{\"listening\":%q%s}\n", "http://"+ln.Addr().String(), adminURL)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// Drain: first unready (load balancers stop sending) while still
	// serving, then stop accepting and let in-flight requests finish.
	mux.Drain()
	if mem != nil {
		// Hand the partitions off before the listener closes: stop owning
		// them and stop their actors after their queued jobs (under this
		// member's ownership generation, so those jobs commit and the
		// client records are written back), then leave the membership:
		// the others claim the partitions at once. Meanwhile the requests
		// for them wait (they are retried until this member has left), so
		// the wait is bounded well within the move timeout; an actor still
		// busy past it is fenced out by the new owner's claim. Requests
		// still arriving here are forwarded to the new owners.
		hctx, hcancel := context.WithTimeout(context.Background(), min(c.shutdownTimeout, c.cluster.moveTimeout/2))
		eng.Handoff(hctx)
		hcancel()
		mem.leave(log)
	}
	// The drain delay gives whoever holds a connection (a load balancer's
	// keep-alive, a client, a realtime socket) the time to see /readyz
	// 503 and go elsewhere; with no connection open there is no one to
	// tell, so the process stops at once (an idle dev server's Ctrl-C).
	if open := c.conn.listener.Stats().Open; open == 0 {
		log.Info("no open connection: no drain delay", zap.Duration("drain_delay", c.drainDelay))
	} else {
		log.Info("draining: /readyz answers 503, still serving until the drain delay ends", zap.Duration("drain_delay", c.drainDelay),
			zap.Int("open_connections", open))
		select {
		case err := <-errc:
			return err
		case <-time.After(c.drainDelay):
		}
	}
	log.Info("shutting down: listener closed, waiting for in-flight requests", zap.Duration("timeout", c.shutdownTimeout))
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("shutdown timeout passed with requests in flight: closing their connections", zap.Error(err))
		_ = srv.Close()
	}
	if peerHandler != nil {
		// Member frames connections are hijacked: Shutdown does not see
		// them. Their calls in flight get what is left of the timeout.
		peerHandler.Close(sctx)
	}
	// Realtime sockets are not HTTP requests any more: close them (1001).
	hub.Close()
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("synclane stopped")
	return nil
}
