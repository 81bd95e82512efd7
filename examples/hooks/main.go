// Command hooks shows host write hooks in an embedded synclane: a row
// validator with the host's own rejection code, a whole-commit validator
// reading the candidate state, and a durable reaction that sends an email
// through an interface after the commit.
//
//	go run ./examples/hooks
//
// The hooks run inside the push transaction; the reaction is stored with
// the commit and delivered at least once afterwards, even across a crash.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/reactions"
	"github.com/synclane/synclane/engine/segments"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage/segstore/sqliteimage"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
)

// Mailer sends email; production code would talk to an SMTP relay or an
// email API. Send must honour ctx and be safe to repeat (reactions are
// delivered at least once: use the reaction ID as an idempotency key).
type Mailer interface {
	Send(ctx context.Context, idempotencyKey, to, subject, body string) error
}

// logMailer "sends" by logging.
type logMailer struct{ log *zap.Logger }

func (m logMailer) Send(_ context.Context, key, to, subject, _ string) error {
	m.log.Info("email sent", zap.String("to", to), zap.String("subject", subject), zap.String("key", key))
	return nil
}

// maxOpenTodos is the commit validator's limit per list.
const maxOpenTodos = 50

// doneMail is the payload of the "todo-done-mail" reaction.
type doneMail struct {
	TodoID string `json:"todoId"`
	Title  string `json:"title"`
	Actor  string `json:"actor"`
}

// hooks returns the engine configuration of the example's hooks.
func hooks(mailer Mailer) (map[string]engine.RowValidator, engine.CommitValidator, reactions.Options) {
	validators := map[string]engine.RowValidator{
		"todos": func(ctx context.Context, w *engine.RowWrite) error {
			if w.Row == nil {
				return nil // deletes are always fine
			}
			title, _ := w.Row[2].(string)
			if title == "" {
				return &engine.Rejection{Code: "todos.title_required", Message: "a todo needs a title",
					Details: &engine.RejectionDetails{FieldPaths: []string{"title"}, Reason: "empty"}}
			}
			// Completing a todo mails its author, after the commit.
			wasDone := w.Stored != nil && w.Stored.Values[3] == true
			if w.Row[3] == true && !wasDone {
				payload, _ := json.Marshal(doneMail{TodoID: w.RowID, Title: title, Actor: w.ActorID})
				return w.React(engine.Reaction{Name: "todo-done-mail", Payload: payload, MaxAttempts: 5})
			}
			return nil
		},
	}
	commitValidator := func(ctx context.Context, c *engine.CommitView) error {
		for _, op := range c.Ops {
			if op.Row == nil {
				continue
			}
			list, _ := op.Row[1].(string)
			rows, err := c.ScanRows(ctx, engine.ScanQuery{Table: "todos", Scopes: map[string][]string{"list_id": {list}}, Limit: maxOpenTodos + 1})
			if err != nil {
				return err
			}
			if len(rows) > maxOpenTodos {
				return &engine.Rejection{Code: "todos.list_full", Message: "a list holds at most 50 todos", OpIndex: op.OpIndex,
					Details: &engine.RejectionDetails{References: map[string]string{"list": list}}}
			}
		}
		return nil
	}
	reactions := reactions.Options{Handlers: map[string]reactions.Handler{
		"todo-done-mail": func(ctx context.Context, r reactions.Stored) error {
			var m doneMail
			if err := json.Unmarshal(r.Payload, &m); err != nil {
				return err // retried, then dead-lettered: visible in Engine.Reactions().List
			}
			key := fmt.Sprintf("reaction-%d", r.ID) // stable across attempts
			return mailer.Send(ctx, key, m.Actor+"@example.com", "Done: "+m.Title, "Nice work.")
		},
	}}
	return validators, commitValidator, reactions
}

func newEngine(ctx context.Context, store *sqlite.Store, mailer Mailer, logger *zap.Logger) (*engine.Engine, error) {
	s := schema.MustDemo()
	validators, commitValidator, reactions := hooks(mailer)
	return engine.New(ctx, engine.Config{Schema: s, Backend: store.Backend(), Resolver: engine.AllowAll(s), Logger: logger, Segments: segments.Options{Images: sqliteimage.Builder{}},
		Validators: validators, CommitValidator: commitValidator, Reactions: reactions})
}

func main() {
	logger, _ := zap.NewProduction()
	defer logger.Sync() //nolint:errcheck
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "synclane-hooks-")
	if err != nil {
		log.Fatal(err)
	}
	store, err := sqlite.Open(ctx, filepath.Join(dir, "app.db"), sqlite.Options{Logger: logger})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	eng, err := newEngine(ctx, store, logMailer{logger}, logger)
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()
	mux := http.NewServeMux()
	mux.Handle("POST /api/sync", httpsync.NewHandler(eng, httpsync.Options{Auth: auth.DevAuth{}, Logger: logger}))
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 30 * time.Second, WriteTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	logger.Info("synclane with hooks on http://127.0.0.1:8080/api/sync (development auth: header x-actor)")
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}
