package etcdtest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// gateway posts body to etcd's JSON gateway at path and decodes the answer
// into out.
func gateway(t *testing.T, s *Server, path string, body, out any) error {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.Endpoint+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	return json.NewDecoder(resp.Body).Decode(out)
}

// TestStartStopRestart: the server answers on a loopback port that is not
// etcd's default, stops answering at Stop, and after Restart answers again
// on the same endpoint with the data written before the stop.
func TestStartStopRestart(t *testing.T) {
	s := Start(t)
	if !strings.HasPrefix(s.Endpoint, "http://127.0.0.1:") || strings.HasSuffix(s.Endpoint, ":2379") {
		t.Fatalf("endpoint %q: want a loopback URL off the default port", s.Endpoint)
	}
	key, val := base64.StdEncoding.EncodeToString([]byte("/etcdtest/k")), base64.StdEncoding.EncodeToString([]byte("v1"))
	var put map[string]any
	if err := gateway(t, s, "/v3/kv/put", map[string]string{"key": key, "value": val}, &put); err != nil {
		t.Fatalf("put: %v", err)
	}
	if _, ok := put["header"]; !ok {
		t.Fatalf("put answered %v", put)
	}

	s.Stop()
	if err := s.healthy(context.Background()); err == nil {
		t.Fatal("etcd still answers after Stop")
	}
	s.Stop() // a second Stop does nothing

	s.Restart(t)
	var got struct {
		Kvs []struct {
			Value string `json:"value"`
		} `json:"kvs"`
	}
	if err := gateway(t, s, "/v3/kv/range", map[string]string{"key": key}, &got); err != nil {
		t.Fatalf("range after restart: %v", err)
	}
	if len(got.Kvs) != 1 || got.Kvs[0].Value != val {
		t.Fatalf("after restart the key reads %+v, want value %q", got.Kvs, val)
	}
}

// TestRestartEmpty: after RestartEmpty the server answers on the same
// endpoint without the data written before.
func TestRestartEmpty(t *testing.T) {
	s := Start(t)
	key := base64.StdEncoding.EncodeToString([]byte("/etcdtest/k"))
	var put map[string]any
	if err := gateway(t, s, "/v3/kv/put", map[string]string{"key": key, "value": key}, &put); err != nil {
		t.Fatalf("put: %v", err)
	}
	s.RestartEmpty(t)
	var got struct {
		Header map[string]any `json:"header"`
		Kvs    []any          `json:"kvs"`
	}
	if err := gateway(t, s, "/v3/kv/range", map[string]string{"key": key}, &got); err != nil {
		t.Fatalf("range after restart: %v", err)
	}
	if got.Header == nil || len(got.Kvs) != 0 {
		t.Fatalf("after RestartEmpty the range answered %+v, want no key", got)
	}
}

// TestTwoServers: two servers started side by side get distinct ports.
func TestTwoServers(t *testing.T) {
	a, b := Start(t), Start(t)
	if a.Endpoint == b.Endpoint {
		t.Fatalf("both servers on %s", a.Endpoint)
	}
	for _, s := range []*Server{a, b} {
		if err := s.healthy(context.Background()); err != nil {
			t.Fatalf("%s: %v", s.Endpoint, err)
		}
	}
}
