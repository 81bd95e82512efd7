package httpsync_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
)

// failingGateStore is a memory store whose gate read fails the way a
// database driver does, once down is set.
type failingGateStore struct {
	*memory.Store
	down atomic.Bool
}

// Backend gives the engine the store with the failing Checkpoints role.
func (s *failingGateStore) Backend() storage.Backend {
	b := s.Store.Backend()
	b.Checkpoints = s
	return b
}

func (s *failingGateStore) ReadServeGate(ctx context.Context, p string, running int32) (storage.ServeGate, error) {
	if s.down.Load() {
		return storage.ServeGate{}, errors.New(`failed to connect to host=db-7.internal user=synclane_rw database=prod: password authentication failed`)
	}
	return s.Store.ReadServeGate(ctx, p, running)
}

// TestReadyzHidesStorageErrors: the unauthenticated readiness probe
// answers 503 with the error code only, never the storage driver's text.
func TestReadyzHidesStorageErrors(t *testing.T) {
	sch := schema.MustDemo()
	st := &failingGateStore{Store: memory.New()}
	eng, err := engine.New(context.Background(), engine.Config{Schema: sch, Backend: st.Backend(), Resolver: engine.AllowAll(sch)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	srv := httptest.NewServer(httpsync.NewMux(eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{}}, Ready: eng.Ready}))
	t.Cleanup(srv.Close)
	get := func() (int, string) {
		res, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if st, b := get(); st != http.StatusOK {
		t.Fatalf("healthy store: HTTP %d %q", st, b)
	}
	st.down.Store(true)
	code, b := get()
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(b, "not ready: sync.") {
		t.Errorf("failing store: HTTP %d %q, want 503 \"not ready: <code>\"", code, b)
	}
	if strings.Contains(b, "db-7.internal") || strings.Contains(b, "synclane_rw") {
		t.Errorf("the readiness probe answers the storage driver's error: %q", b)
	}
}
