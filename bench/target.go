package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/retention"
	"github.com/synclane/synclane/engine/segments"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/segstore"
	"github.com/synclane/synclane/storage/segstore/pgseg"
	"github.com/synclane/synclane/storage/segstore/sqlitefile"
	"github.com/synclane/synclane/storage/segstore/sqliteimage"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
)

// Mode is how the harness reaches the server under test.
type Mode string

// Modes.
const (
	// ModeInproc calls engine.Engine.Sync directly.
	ModeInproc Mode = "inproc"
	// ModeLoopback serves the engine over HTTP on 127.0.0.1 inside the
	// harness and drives it through real sockets.
	ModeLoopback Mode = "http"
	// ModeURL drives an external SSP2 server at --url.
	ModeURL Mode = "url"
)

// EngineOpts are the engine settings a case varies.
type EngineOpts struct {
	DisableGroupCommit bool
	IdleTimeout        time.Duration
	// Schema is the served schema (default: the demo todos schema).
	Schema *schema.Schema
	// PruneBatch is retention.Options.BatchCommits (0: the default).
	PruneBatch int
	// ServeSegments stores segments as `synclane serve` does (a SQLite
	// file next to a SQLite or memory store, the PostgreSQL table for
	// PostgreSQL) instead of the engine's default in-memory store.
	ServeSegments bool
	// Wrap, when set, wraps the loopback HTTP handler (the server child
	// process adds its probe endpoints).
	Wrap func(eng *engine.Engine, h http.Handler) http.Handler
}

// Target is one system under test: a fresh store and engine (in-process or
// loopback HTTP), or an external server.
type Target struct {
	Mode   Mode
	Store  string
	Engine *engine.Engine // nil in ModeURL
	// Prefix makes partition names unique to this target, so runs against a
	// long-lived external server never see each other's data.
	Prefix string

	rt      roundTripper
	cleanup []func()
	// dbPath is the SQLite store's file ("" for other stores).
	dbPath string
	// pg is the PostgreSQL store (nil for other stores).
	pg *postgres.Store
	// pid is the server child's process id (0: no child).
	pid int
}

// Client returns a new logical client.
func (t *Target) Client(actor, partition, clientID string) *Client {
	return &Client{rt: t.rt, id: engine.Identity{ActorID: actor, Partition: t.Prefix + partition}, clientID: clientID}
}

// Close stops the engine, the HTTP server and the store and deletes the
// store's data, in reverse order of creation.
func (t *Target) Close() {
	for i := len(t.cleanup) - 1; i >= 0; i-- {
		t.cleanup[i]()
	}
	t.cleanup = nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// openTarget builds a target for cfg's mode on the named store backend.
func openTarget(ctx context.Context, cfg *Config, store string, eo EngineOpts) (*Target, error) {
	t := &Target{Mode: cfg.Mode, Store: store, Prefix: "bench-" + randHex(4) + "-"}
	if cfg.Mode == ModeURL {
		t.Store = "remote"
		t.rt = httpRT{url: syncURL(cfg.URL), hc: newHTTPClient()}
		return t, nil
	}
	st, err := openStore(ctx, cfg, store, t)
	if err != nil {
		t.Close()
		return nil, err
	}
	sch := eo.Schema
	if sch == nil {
		sch = schema.MustDemo()
	}
	ecfg := engine.Config{Schema: sch, Backend: st, Segments: segments.Options{Images: sqliteimage.Builder{}}, DisableGroupCommit: eo.DisableGroupCommit,
		IdleTimeout: eo.IdleTimeout, Retention: retention.Options{BatchCommits: eo.PruneBatch}}
	ecfg.Resolver = engine.AllowAll(ecfg.Schema)
	tp, err := benchTracing(cfg.Tracing) // tracing.go
	if err != nil {
		t.Close()
		return nil, err
	}
	if tp != nil {
		ecfg.Tracing = tp
		t.cleanup = append(t.cleanup, func() { _ = tp.Shutdown(context.Background()) })
	}
	if eo.ServeSegments {
		if ecfg.Segments.Store, err = openServeSegments(ctx, cfg, t); err != nil {
			t.Close()
			return nil, err
		}
	}
	eng, err := engine.New(ctx, ecfg)
	if err != nil {
		t.Close()
		return nil, err
	}
	t.Engine = eng
	t.cleanup = append(t.cleanup, func() { _ = eng.Close() })
	if cfg.Mode == ModeInproc {
		t.rt = inprocRT{eng: eng}
		return t, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Close()
		return nil, err
	}
	var h http.Handler = httpsync.NewMux(eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{}}})
	if eo.Wrap != nil {
		h = eo.Wrap(eng, h)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	hc := newHTTPClient()
	t.cleanup = append(t.cleanup, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		hc.CloseIdleConnections()
	})
	t.rt = httpRT{url: "http://" + ln.Addr().String() + "/sync", hc: hc}
	return t, nil
}

// openServeSegments opens the segment store `synclane serve` would use
// for t's store (the engine closes it).
func openServeSegments(ctx context.Context, cfg *Config, t *Target) (segstore.Store, error) {
	if t.pg != nil {
		return pgseg.Open(ctx, t.pg.Pool())
	}
	dir := filepath.Dir(t.dbPath)
	if t.dbPath == "" {
		d, err := os.MkdirTemp(cfg.DataDir, "synclane-bench-segments-")
		if err != nil {
			return nil, err
		}
		t.cleanup = append(t.cleanup, func() { _ = os.RemoveAll(d) })
		dir = d
	}
	return sqlitefile.Open(ctx, filepath.Join(dir, "segments.db"))
}

// syncURL accepts a server base URL or the full sync endpoint.
func syncURL(u string) string {
	u = strings.TrimRight(u, "/")
	if strings.HasSuffix(u, "/sync") {
		return u
	}
	return u + "/sync"
}

// openStore opens a fresh, empty store, registers its removal and returns
// its roles.
func openStore(ctx context.Context, cfg *Config, kind string, t *Target) (storage.Backend, error) {
	kind, spec, _ := strings.Cut(kind, ":")
	switch kind {
	case "memory":
		st := memory.New()
		t.cleanup = append(t.cleanup, func() { _ = st.Close() })
		return st.Backend(), nil
	case "sqlite":
		files, err := sqliteFiles(spec)
		if err != nil {
			return storage.Backend{}, err
		}
		dir, err := os.MkdirTemp(cfg.DataDir, "synclane-bench-")
		if err != nil {
			return storage.Backend{}, err
		}
		t.cleanup = append(t.cleanup, func() { _ = os.RemoveAll(dir) })
		t.dbPath = filepath.Join(dir, sqlite.DirFileName)
		st, err := sqlite.OpenDir(ctx, dir, sqlite.DirOptions{Files: files})
		if err != nil {
			return storage.Backend{}, err
		}
		t.cleanup = append(t.cleanup, func() { _ = st.Close() })
		return st.Backend(), nil
	case "postgres":
		url := cfg.PostgresURL
		if url == "" {
			return storage.Backend{}, errors.New("--store postgres needs --postgres URL or SYNCLANE_TEST_POSTGRES")
		}
		name := "synclane_bench_" + randHex(8)
		if err := pgExec(ctx, url, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
			return storage.Backend{}, err
		}
		t.cleanup = append(t.cleanup, func() {
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := pgExec(dctx, url, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
				fmt.Fprintf(os.Stderr, "bench: drop schema %s: %v\n", name, err)
			}
		})
		st, err := postgres.Open(ctx, url, postgres.Options{Schema: name, MaxConns: int32(cfg.PGMaxConns), NotifyChannel: name})
		if err != nil {
			return storage.Backend{}, err
		}
		t.cleanup = append(t.cleanup, func() { _ = st.Close() })
		t.pg = st
		return st.Backend(), nil
	}
	return storage.Backend{}, fmt.Errorf("unknown store %q (sqlite, sqlite:K, postgres, memory)", kind)
}

// sqliteFiles reads K of a "sqlite:K" store ("" is the server's default,
// sqlite.DefaultDirFiles).
func sqliteFiles(spec string) (int, error) {
	if spec == "" {
		return sqlite.DefaultDirFiles, nil
	}
	k, err := strconv.Atoi(spec)
	if err != nil || k < 1 || k > sqlite.MaxDirFiles {
		return 0, fmt.Errorf("store sqlite:%s: want sqlite:K with K database files from 1 to %d", spec, sqlite.MaxDirFiles)
	}
	return k, nil
}

func pgExec(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("postgres: connect: %w", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("postgres: %s: %w", sql, err)
	}
	return nil
}
