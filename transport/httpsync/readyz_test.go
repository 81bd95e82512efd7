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

// With a Mount the protocol routes move under it and /healthz, /readyz and
// /metrics stay at the root (as MuxOptions.Mount documents).
func TestMountKeepsProbesAtTheRoot(t *testing.T) {
	sch := schema.MustDemo()
	eng, err := engine.New(context.Background(), engine.Config{Schema: sch, Backend: memory.New().Backend(), Resolver: engine.AllowAll(sch)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	srv := httptest.NewServer(httpsync.NewMux(eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{}}, Mount: "/api/"}))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/healthz", http.StatusOK},
		{"GET", "/readyz", http.StatusOK},
		{"GET", "/metrics", http.StatusOK},
		{"GET", "/api/healthz", http.StatusNotFound},
		{"GET", "/api/readyz", http.StatusNotFound},
		{"GET", "/api/metrics", http.StatusNotFound},
		{"POST", "/sync", http.StatusNotFound},
		{"POST", "/api/sync", http.StatusUnsupportedMediaType}, // routed: the handler wants the SSP2 content type
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != tc.want {
			t.Errorf("%s %s under Mount /api/: %d, want %d", tc.method, tc.path, res.StatusCode, tc.want)
		}
	}
}
