package httpsync_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/reactions"
	"github.com/synclane/synclane/internal/promtext"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
)

// /metrics shows the reaction counters and the queue sizes: one reaction
// delivered, one dead-lettered after its single attempt.
func TestMetricsShowReactions(t *testing.T) {
	s := schema.MustDemo()
	eng, err := engine.New(context.Background(), engine.Config{Schema: s, Backend: memory.New().Backend(), Resolver: engine.AllowAll(s),
		Validators: map[string]engine.RowValidator{"todos": func(ctx context.Context, w *engine.RowWrite) error {
			return w.React(engine.Reaction{Name: "mail", Payload: []byte(w.RowID), MaxAttempts: 1})
		}},
		Reactions: reactions.Options{PollInterval: 5 * time.Millisecond, Handlers: map[string]reactions.Handler{
			"mail": func(ctx context.Context, r reactions.Stored) error {
				if string(r.Payload) == "bad" {
					return errors.New("bounced")
				}
				return nil
			}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	srv := httptest.NewServer(httpsync.NewMux(eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{}}}))
	t.Cleanup(srv.Close)
	c := &httpsync.Client{URL: srv.URL + "/sync", ClientID: "m", Header: http.Header{"X-Actor": {"ada"}}}
	codec := ssp2.NewRowCodec(s.Table("todos").Columns)
	for _, id := range []string{"good", "bad"} {
		payload, err := codec.AppendSparse(nil, ssp2.Row{id, "L", "t", false, int64(0), int64(0)}, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := c.Push(context.Background(), &ssp2.PushCommit{ClientCommitID: id, Operations: []ssp2.Operation{{Table: "todos", RowID: id, Op: ssp2.OpUpsert, Payload: payload}}})
		if err != nil || rs[0].Status != ssp2.CommitApplied {
			t.Fatalf("push %s: %v %+v", id, err, rs)
		}
	}
	want := []string{"synclane_reactions_delivered_total 1", "synclane_reactions_dead_lettered_total 1", "synclane_reactions_retried_total 0",
		"synclane_reactions_pending 0", "synclane_reactions_dead 1"}
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		missing := ""
		for _, w := range want {
			if !promtext.Has(b, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks %q:\n%s", missing, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
