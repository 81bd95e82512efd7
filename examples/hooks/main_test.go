package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
)

// fakeMailer records sends; it fails the first one, so the reaction is
// retried.
type fakeMailer struct {
	mu    sync.Mutex
	calls int
	sent  []string
}

func (m *fakeMailer) Send(_ context.Context, key, to, subject, _ string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	if m.calls == 1 {
		return context.DeadlineExceeded
	}
	m.sent = append(m.sent, to+" "+subject)
	return nil
}

func TestHooksExample(t *testing.T) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "app.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	mailer := &fakeMailer{}
	eng, err := newEngine(ctx, store, mailer, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	mux := http.NewServeMux()
	mux.Handle("POST /api/sync", httpsync.NewHandler(eng, httpsync.Options{Auth: auth.DevAuth{}}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	codec := ssp2.NewRowCodec(schema.MustDemo().Table("todos").Columns)
	c := &httpsync.Client{URL: srv.URL + "/api/sync", ClientID: "ada-phone", Header: http.Header{"X-Actor": {"ada"}}}
	// push sends a wire-v3 upsert of the columns of row that present
	// holds (nil: every column, a whole row).
	push := func(ccid string, row ssp2.Row, present ssp2.ColumnSet, base *int64) *ssp2.PushResult {
		t.Helper()
		payload, err := codec.AppendSparse(nil, row, present, 0)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := c.Push(ctx, &ssp2.PushCommit{ClientCommitID: ccid, Operations: []ssp2.Operation{
			{Table: "todos", RowID: row[0].(string), Op: ssp2.OpUpsert, BaseVersion: base, Payload: payload}}})
		if err != nil {
			t.Fatal(err)
		}
		return rs[0]
	}
	if pr := push("k1", ssp2.Row{"t1", "home", "", false, int64(0), int64(0)}, nil, nil); pr.Status != ssp2.CommitRejected || pr.Results[0].Code != "todos.title_required" {
		t.Fatalf("untitled todo: %+v", pr)
	}
	if pr := push("k2", ssp2.Row{"t1", "home", "water plants", false, int64(0), int64(0)}, nil, nil); pr.Status != ssp2.CommitApplied {
		t.Fatalf("new todo: %+v", pr)
	}
	// Completing is a patch of done alone: the validator sees the merged
	// row, so the mail still names the stored title.
	one := int64(1)
	done := ssp2.NewColumnSet(6)
	done.Add(0)
	done.Add(3)
	if pr := push("k3", ssp2.Row{"t1", nil, nil, true, nil, nil}, done, &one); pr.Status != ssp2.CommitApplied {
		t.Fatalf("completing: %+v", pr)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mailer.mu.Lock()
		sent, calls := append([]string(nil), mailer.sent...), mailer.calls
		mailer.mu.Unlock()
		if len(sent) == 1 {
			if sent[0] != "ada@example.com Done: water plants" || calls != 2 {
				t.Fatalf("sent %v after %d calls, want one mail after a retry", sent, calls)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no mail sent (%d calls)", calls)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
