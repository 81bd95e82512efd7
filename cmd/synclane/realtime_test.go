package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/synclane/synclane/internal/promtext"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/realtime"
)

// synclane serve serves GET /realtime with --max-delta-bytes and
// --max-presence-bytes in effect, reports the sockets in /metrics, and
// closes them (1001) on shutdown.
func TestServeRealtime(t *testing.T) {
	base, stop := startServeStoppable(t, "--data", t.TempDir(), "--max-delta-bytes", "300", "--max-presence-bytes", "20")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hdr := http.Header{"X-Actor": {"ada"}}
	c := &httpsync.Client{URL: base + "/sync", ClientID: "b", Header: hdr}
	if _, err := c.Pull(ctx, ssp2.PullHeader{Accept: ssp2.AcceptInlineRows},
		&ssp2.Subscription{ID: "s", Table: "todos", Scopes: map[string][]string{"list_id": {"l1"}}, Cursor: -1}); err != nil {
		t.Fatal(err)
	}
	s, err := realtime.Dial(ctx, base+"/realtime", "b", realtime.DialOptions{Header: hdr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.CloseNow()
	if h := s.Hello(); h.ActorID != "ada" || h.ClientID != "b" {
		t.Fatalf("hello %+v", h)
	}
	if err := s.Publish(ctx, "list:l1", json.RawMessage(`{"name":"a long name"}`)); err != nil {
		t.Fatal(err)
	}
	ev, err := s.Next(ctx)
	if pe, ok := ev.(*ssp2.PresenceError); err != nil || !ok || pe.Error != ssp2.PresenceTooLarge {
		t.Fatalf("presence over --max-presence-bytes: %#v %v", ev, err)
	}
	if err := s.Ack(ctx, s.Hello().LatestCursor); err != nil {
		t.Fatal(err)
	}
	codec := ssp2.NewRowCodec(schema.MustDemo().Table("todos").Columns)
	row, _ := codec.AppendSparse(nil, ssp2.Row{"t1", "l1", strings.Repeat("x", 400), false, int64(1), int64(1)}, nil, 0)
	w := &httpsync.Client{URL: base + "/sync", ClientID: "w", Header: hdr}
	// The ack may not have been taken yet: then the answer is a catch-up
	// wake-up; either way the big commit is never a delta.
	if _, err := w.Push(ctx, &ssp2.PushCommit{ClientCommitID: "c1", Operations: []ssp2.Operation{{Table: "todos", RowID: "t1", Op: ssp2.OpUpsert, Payload: row}}}); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := ev.(*realtime.Delta); ok {
			t.Fatal("a delta over --max-delta-bytes was sent")
		}
		if wk, ok := ev.(*ssp2.Wake); ok {
			if wk.Reason != ssp2.WakeDeltaTooLarge && wk.Reason != ssp2.WakeCatchupRequired {
				t.Fatalf("wake %+v", wk)
			}
			break
		}
	}
	res, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !promtext.Has(body, "synclane_realtime_sockets 1") || !promtext.Has(body, `synclane_http_requests_total{route="realtime",status="101",code="none"} 1`) {
		t.Fatalf("metrics:\n%s", body)
	}
	if code := stop(); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	<-s.Done()
	var ce websocket.CloseError
	if !errors.As(s.Err(), &ce) || ce.Code != websocket.StatusGoingAway {
		t.Fatalf("socket at shutdown ended with %v, want 1001", s.Err())
	}
}
