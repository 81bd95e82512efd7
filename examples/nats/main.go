// Command nats serves synclane's sync protocol over NATS request/reply
// (package natssync): an engine on embedded SQLite, the demo todos schema,
// requests on subject <prefix>.sync and a commit notification per
// partition on <prefix>.commits.<partition>.
//
//	nats-server -a 127.0.0.1 -p 4222 &
//	go run ./examples/nats                         # development auth: x-actor, x-partition headers
//	go run ./examples/nats --jwt-secret s3cret     # production-style: Authorization: Bearer <HS256 JWT>
//
// With --jwt-secret the same authenticator as `synclane serve --jwt-secret`
// (transport/auth.JWTAuth) checks every message, through natssync.HTTPAuth:
// a token minted for the HTTP server works here unchanged.
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/examples/nats/natssync"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/transport/auth"
)

func main() {
	url := flag.String("nats", nats.DefaultURL, "NATS server URL")
	prefix := flag.String("prefix", "synclane", "subject prefix: requests on <prefix>.sync, notifications on <prefix>.commits.<partition>")
	data := flag.String("data", "", "data directory (default: a new temporary directory)")
	secret := flag.String("jwt-secret", "", "verify HS256 JWTs in the Authorization header (default: development auth)")
	flag.Parse()

	logger, _ := zap.NewProduction()
	defer logger.Sync() //nolint:errcheck
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, logger, *url, *prefix, *data, *secret); err != nil {
		log.Fatal(err)
	}
}

// run serves until ctx ends.
func run(ctx context.Context, logger *zap.Logger, url, prefix, data, secret string) error {
	nc, err := nats.Connect(url, nats.Name("synclane"), nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	if data == "" {
		if data, err = os.MkdirTemp("", "synclane-nats-"); err != nil {
			return err
		}
	}
	store, err := sqlite.Open(ctx, filepath.Join(data, "synclane.db"), sqlite.Options{Logger: logger})
	if err != nil {
		return err
	}
	defer store.Close()

	sch := schema.MustDemo()
	var authn natssync.Authenticator = natssync.DevAuth{}
	resolver := engine.AllowAll(sch)
	if secret != "" {
		authn = natssync.HTTPAuth{Auth: auth.JWTAuth{Secret: []byte(secret)}}
		resolver = auth.GrantsResolver // the token's scopes claim
	}
	notifier := natssync.NewNotifier(nc, prefix+".commits", logger)
	cfg := engine.Config{Schema: sch, Backend: store.Backend(), Resolver: resolver, Logger: logger}
	cfg.Extensions = append(cfg.Extensions, notifier) // engine.New installs its hook
	eng, err := engine.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer eng.Close()
	srv, err := natssync.New(nc, eng, natssync.Options{Subject: prefix + ".sync", Auth: authn, Logger: logger})
	if err != nil {
		return err
	}

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); notifier.Run(ctx) }()
	defer wg.Wait() // the notifier ends with ctx, before eng.Close
	logger.Info("synclane over NATS", zap.String("nats", url), zap.String("requests", prefix+".sync"),
		zap.String("notifications", prefix+".commits.<partition>"), zap.String("data", data), zap.Bool("jwt", secret != ""))
	if err := srv.Serve(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
