package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/transport/httpsync"
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
	maxBody                                                           int64
	pgMaxConns                                                        int
	pgStatementTimeout, shutdownTimeout, idleTimeout                  time.Duration
	maxOps                                                            int

	// Test-control surface (--test-control) and its start options.
	testControl bool
	clockMs     int64
	// Options of features that are not implemented yet: accepted and
	// validated so a harness can pass them, without effect (logged).
	inlineSegmentMaxBytes, maxDeltaBytes, maxPresenceBytes int64
	segmentTTL, signedURLTTL, leaseTTL                     time.Duration
}

func serveFlags(fs *flag.FlagSet, c *serveConfig) {
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8787", "address to listen on")
	fs.StringVar(&c.data, "data", "./synclane-data", "data directory of the embedded SQLite database")
	fs.StringVar(&c.schemaFile, "schema", "", "schema JSON file (default: the built-in demo schema, table todos)")
	fs.StringVar(&c.mount, "mount", "/", "path prefix of the sync routes")
	fs.StringVar(&c.jwtSecret, "jwt-secret", "", "HS256 secret: authenticate with JWTs (sub, partition, scopes claims) instead of development headers")
	fs.StringVar(&c.postgresURL, "postgres", "", "PostgreSQL URL: store data in PostgreSQL instead of embedded SQLite")
	fs.IntVar(&c.pgMaxConns, "pg-max-conns", 16, "PostgreSQL connection pool size")
	fs.DurationVar(&c.pgStatementTimeout, "pg-statement-timeout", 30*time.Second, "PostgreSQL statement timeout")
	fs.Int64Var(&c.maxBody, "max-body", httpsync.DefaultMaxBodyBytes, "maximum decompressed request body in bytes")
	fs.IntVar(&c.maxOps, "max-operations", 500, "maximum push operations per request")
	fs.DurationVar(&c.idleTimeout, "idle-timeout", 2*time.Minute, "passivate partition actors idle this long")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long SIGTERM waits for in-flight requests")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.Var(&c.checkpoints, "checkpoint", "PARTITION/NAME of a backfill checkpoint this process declares at its schema version (repeatable, or comma-separated)")
	fs.BoolVar(&c.testControl, "test-control", false, "serve the test-only control surface under /_test/ (only with development auth on a loopback address)")
	fs.Int64Var(&c.clockMs, "clock-ms", -1, "with --test-control: run on a virtual clock starting at this Unix time in ms, moved only by POST /_test/clock/advance")
	fs.Int64Var(&c.inlineSegmentMaxBytes, "inline-segment-max-bytes", 256<<10, "largest rows segment sent inline (segments by reference: not implemented yet, no effect)")
	fs.Int64Var(&c.maxDeltaBytes, "max-delta-bytes", 0, "largest realtime delta (realtime: not implemented yet, no effect)")
	fs.Int64Var(&c.maxPresenceBytes, "max-presence-bytes", 16<<10, "largest presence payload (realtime: not implemented yet, no effect)")
	fs.DurationVar(&c.segmentTTL, "segment-ttl", 24*time.Hour, "segment lifetime (segments by reference: not implemented yet, no effect)")
	fs.DurationVar(&c.signedURLTTL, "signed-url-ttl", 0, "enable signed segment URLs with this lifetime (not implemented yet, no effect)")
	fs.DurationVar(&c.leaseTTL, "lease-ttl", 0, "enable auth leases with this lifetime (not implemented yet, no effect)")
}

// validate checks the configuration before anything touches storage.
func (c *serveConfig) validate() error {
	if c.testControl {
		if c.jwtSecret != "" {
			return errors.New("--test-control needs development authentication: it cannot be combined with --jwt-secret")
		}
		if !loopback(c.listen) {
			return fmt.Errorf("--test-control needs a loopback --listen address (127.0.0.1, [::1] or localhost), got %q", c.listen)
		}
	} else if c.clockMs >= 0 {
		return errors.New("--clock-ms needs --test-control")
	}
	for name, v := range map[string]int64{"inline-segment-max-bytes": c.inlineSegmentMaxBytes, "max-delta-bytes": c.maxDeltaBytes, "max-presence-bytes": c.maxPresenceBytes} {
		if v < 0 {
			return fmt.Errorf("--%s must not be negative", name)
		}
	}
	for name, v := range map[string]time.Duration{"segment-ttl": c.segmentTTL, "signed-url-ttl": c.signedURLTTL, "lease-ttl": c.leaseTTL} {
		if v < 0 {
			return fmt.Errorf("--%s must not be negative", name)
		}
	}
	return nil
}

// unimplemented lists the options given that have no effect yet.
func (c *serveConfig) unimplemented(fs *flag.FlagSet) []string {
	var out []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "inline-segment-max-bytes", "max-delta-bytes", "max-presence-bytes", "segment-ttl", "signed-url-ttl", "lease-ttl":
			out = append(out, "--"+f.Name)
		}
	})
	return out
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

// applyEnv sets every flag not given on the command line from SYNCLANE_<NAME>.
func applyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		key := "SYNCLANE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(key); v != "" {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s: %w", key, e)
			}
		}
	})
	return err
}

func newLogger(level string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, err
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(w), lvl)
	return zap.New(core), nil
}

func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var c serveConfig
	fs := flag.NewFlagSet("synclane serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	serveFlags(fs, &c)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: synclane serve [flags]\n\nEvery flag can also be set as SYNCLANE_<FLAG> (upper case, dashes as underscores), e.g. SYNCLANE_JWT_SECRET; flags win.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := applyEnv(fs, getenv); err != nil {
		fmt.Fprintln(stderr, "synclane:", err)
		return 2
	}
	if err := c.validate(); err != nil {
		fmt.Fprintln(stderr, "synclane:", err)
		return 2
	}
	log, err := newLogger(c.logLevel, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "synclane: --log-level:", err)
		return 2
	}
	defer log.Sync() //nolint:errcheck
	if names := c.unimplemented(fs); len(names) > 0 {
		log.Warn("options accepted without effect: their features are not implemented yet", zap.Strings("options", names))
	}
	if err := runServer(ctx, c, log, stdout); err != nil {
		log.Error("synclane stopped with an error", zap.Error(err))
		return 1
	}
	return 0
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

func openStore(ctx context.Context, c serveConfig, log *zap.Logger) (storage.Store, string, error) {
	if c.postgresURL != "" {
		st, err := postgres.Open(ctx, c.postgresURL, postgres.Options{Logger: log, MaxConns: int32(c.pgMaxConns), StatementTimeout: c.pgStatementTimeout})
		return st, "postgres", err
	}
	if err := os.MkdirAll(c.data, 0o750); err != nil {
		return nil, "", fmt.Errorf("create data directory: %w", err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(c.data, "synclane.db"), sqlite.Options{Logger: log})
	return st, "sqlite", err
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
		return &engine.ReadinessError{Phase: engine.PhaseSchemaCompile, Cause: fmt.Errorf("%s: %w", c.schemaFile, err)}
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
	sch, err := engine.EnsureReady(ctx, src, st, decls)
	if err != nil {
		var re *engine.ReadinessError
		if !errors.As(err, &re) || !re.Gated() {
			return err
		}
		log.Warn("serving behind a closed gate: a pending backfill checkpoint was not declared by this process; requests get 503 sync.schema_not_ready until it is activated", zap.Error(err))
	}

	var auth httpsync.Authenticator
	var resolver engine.ScopeResolver
	var controls testcontrol.Controls
	cfg := engine.Config{Schema: sch, Store: st, Logger: log,
		MaxOperations: c.maxOps, IdleTimeout: c.idleTimeout, Checkpoints: decls}
	if feed, ok := st.(engine.CommitFeed); ok {
		cfg.Feed = feed // other processes' commits (PostgreSQL LISTEN/NOTIFY)
	}
	switch {
	case c.jwtSecret != "":
		auth, resolver = httpsync.JWTAuth{Secret: []byte(c.jwtSecret)}, httpsync.GrantsResolver
	case c.testControl:
		controls = testcontrol.Controls{Store: testcontrol.WrapStore(st), Resolver: testcontrol.NewResolver()}
		if c.clockMs >= 0 {
			controls.Clock = testcontrol.NewClock(c.clockMs)
			cfg.Now = controls.Clock.Now
		}
		auth, resolver, cfg.Store = httpsync.DevAuth{}, controls.Resolver, controls.Store
		log.Warn("test-control surface enabled under /_test/: development authentication, and no actor holds any scope until PUT /_test/allowed-scopes sets it")
	default:
		auth, resolver = httpsync.DevAuth{}, engine.AllowAll(sch)
		log.Warn("development authentication: the actor comes from header x-actor and every scope is allowed; pass --jwt-secret in production")
	}
	cfg.Resolver = resolver
	eng, err := engine.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer eng.Close()
	controls.Engine = eng

	mux := httpsync.NewMux(eng, httpsync.MuxOptions{
		Options: httpsync.Options{Auth: auth, MaxBodyBytes: c.maxBody, Logger: log},
		Mount:   c.mount,
		Ready:   eng.Ready,
	})
	if c.testControl {
		mux.Handle("/_test/", testcontrol.Handler(controls))
	}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: zap.NewStdLog(log.Named("http"))}
	mount := strings.TrimRight(c.mount, "/")
	log.Info("synclane serving", zap.String("addr", ln.Addr().String()), zap.String("sync", mount+"/sync"),
		zap.String("storage", backend), zap.Int32("schema_version", sch.Version), zap.Int("tables", len(sch.Tables)))
	// The first stdout line is machine-readable: harnesses started with
	// --listen 127.0.0.1:0 read the real port from it. Logs go to stderr.
	fmt.Fprintf(stdout, "{\"listening\":%q}\n", "http://"+ln.Addr().String())

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: draining in-flight requests", zap.Duration("timeout", c.shutdownTimeout))
	mux.Drain()
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("shutdown deadline passed with requests in flight", zap.Error(err))
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("synclane stopped")
	return nil
}
