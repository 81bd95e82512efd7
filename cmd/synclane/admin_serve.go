package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	adminsvc "github.com/synclane/synclane/engine/admin"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/engine/timeseries"
	"github.com/synclane/synclane/storage/postgres/homes"
	"github.com/synclane/synclane/transport/admin"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/realtime"
)

// adminTokenEnv sets --admin-token when the flag is not given (like every
// serve flag, applyEnv), so the token need not appear in the process list.
const adminTokenEnv = "SYNCLANE_ADMIN_TOKEN"

// adminConfig is serve's admin listener: --admin-listen, --admin-token,
// the event ring size and the slow request threshold.
type adminConfig struct {
	listen, token string
	ringSize      int
	slowRequest   time.Duration
	// series records the sync requests of the last hour for the console's
	// chart (engineConfig creates it with the admin listener; nil without).
	series *timeseries.Series
	// homes, with --postgres-databases, answers the admin API's partition
	// moves (POST /api/partitions/{p}/move, /api/partitions/rebalance).
	homes *homes.Homes
}

func adminListenFlags(fs *flag.FlagSet, c *adminConfig) {
	fs.StringVar(&c.listen, "admin-listen", "", "serve the admin API and web console on this address (off when empty); needs --admin-token")
	fs.StringVar(&c.token, "admin-token", "", fmt.Sprintf("bearer token of the admin API, at least %d bytes (default: $%s)", admin.MinTokenBytes, adminTokenEnv))
	fs.IntVar(&c.ringSize, "event-ring-size", events.DefaultSize, fmt.Sprintf("recent server events kept for the admin API (at most %d)", events.MaxSize))
	fs.DurationVar(&c.slowRequest, "slow-request", engine.DefaultSlowRequest, "sync requests slower than this are reported as request.slow events (negative: never)")
}

// validate fails closed: an admin listener without a strong token refuses
// to start.
func (c *adminConfig) validate() error {
	if c.ringSize <= 0 || c.ringSize > events.MaxSize {
		return fmt.Errorf("--event-ring-size must be in 1..%d, got %d", events.MaxSize, c.ringSize)
	}
	if c.listen == "" {
		return nil
	}
	if len(c.token) < admin.MinTokenBytes {
		return fmt.Errorf("--admin-listen needs --admin-token (or $%s) of at least %d bytes (e.g. openssl rand -hex 24)", adminTokenEnv, admin.MinTokenBytes)
	}
	return nil
}

// engineConfig turns the event ring on when the admin listener is.
func (c *adminConfig) engineConfig(cfg *engine.Config) {
	if c.listen == "" {
		return
	}
	cfg.Events = events.NewRing(c.ringSize, nil)
	cfg.SlowRequest = c.slowRequest
	c.series = timeseries.New(timeseries.Options{})
}

// observer is the sync handler's request observer: the series when the
// admin listener is on, nil (none) otherwise.
func (c *adminConfig) observer() httpsync.RequestObserver {
	if c.series == nil {
		return nil
	}
	return c.series
}

// startAdmin serves the admin API and console on their own listener when
// --admin-listen is set; stop ends event streams and shuts it down.
// firstLine is what serve adds to its first stdout line (`,"admin":URL`).
func startAdmin(c adminConfig, eng *engine.Engine, hub *realtime.Hub, mem *member, log *zap.Logger) (firstLine string, stop func(), err error) {
	if c.listen == "" {
		return "", func() {}, nil
	}
	svc, err := adminsvc.New(eng)
	if err != nil {
		return "", nil, fmt.Errorf("--admin-listen: %w", err)
	}
	svc.Register(adminsvc.Section{Name: "realtime", Stats: func(context.Context) (any, error) { return hub.Stats(), nil }})
	svc.RegisterPartition(adminsvc.PartitionSection{Name: "realtime sockets", Stats: func(_ context.Context, p string) (any, error) {
		return hub.Sessions(p), nil
	}})
	opts := admin.Options{Token: c.token, Logger: log.Named("admin"), Series: c.series}
	if mem != nil {
		opts.Cluster = func(ctx context.Context, p string) (any, error) { return mem.clusterView(ctx, eng, p) }
		opts.ClusterEvents = func(ctx context.Context, limit int) (any, error) { return mem.clusterEvents(ctx, eng, limit) }
	}
	if c.homes != nil {
		opts.MovePartition = func(ctx context.Context, p, to string) (any, error) {
			return movePartition(ctx, c.homes, p, to, 0, nil)
		}
		opts.Rebalance = func(ctx context.Context, limit int, dryRun bool) (any, error) {
			return rebalance(ctx, c.homes, limit, dryRun, log.Named("homes"))
		}
	}
	h, err := admin.New(svc, opts)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return "", nil, fmt.Errorf("--admin-listen: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute, ErrorLog: zap.NewStdLog(log.Named("admin.http"))}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("admin listener stopped", zap.Error(err))
		}
	}()
	log.Info("admin API and console serving", zap.String("addr", ln.Addr().String()))
	return fmt.Sprintf(",\"admin\":%q", "http://"+ln.Addr().String()), func() {
		h.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		<-done
	}, nil
}
