package httpsync_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/cors"
	"github.com/synclane/synclane/transport/httperr"
	"github.com/synclane/synclane/transport/httpsync"
)

// Error bodies quote at most a bounded part of the input they refuse: a
// 900 KB segment id, a 10 KB Origin, blob id, content type or encoding
// each get an answer of at most 2 KiB that names the input's length.
func TestErrorBodiesAreBounded(t *testing.T) {
	s := startBlobServer(t, backends(t)[0], false)
	policy, err := cors.New(cors.Options{Origins: []string{"https://app.example"}})
	if err != nil {
		t.Fatal(err)
	}
	upgraded := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusSwitchingProtocols) })
	srv := httptest.NewServer(httpsync.NewMux(s.eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{}}, CORS: policy,
		Realtime: upgraded}))
	t.Cleanup(srv.Close)
	huge := strings.Repeat("a", 900<<10)
	long := "https://" + strings.Repeat("o", 10<<10) + ".example"
	blobID := "sha256:" + strings.Repeat("f", 10<<10)
	for _, c := range []struct {
		name   string
		method string
		path   string
		header map[string]string
		status int
	}{
		{"segment id", http.MethodGet, "/segments/" + huge, map[string]string{"X-Syncular-Scopes": "{}"}, http.StatusNotFound},
		{"preflight origin", http.MethodOptions, "/sync", map[string]string{"Origin": long, "Access-Control-Request-Method": "POST"}, http.StatusForbidden},
		{"upgrade origin", http.MethodGet, "/realtime?clientId=c", map[string]string{"Origin": long, "Upgrade": "websocket", "Connection": "Upgrade"}, http.StatusForbidden},
		{"blob id (PUT)", http.MethodPut, "/blobs/" + blobID, nil, http.StatusBadRequest},
		{"blob id (GET)", http.MethodGet, "/blobs/" + blobID, nil, 0},
		{"content type", http.MethodPost, "/sync", map[string]string{"Content-Type": strings.Repeat("t", 10<<10)}, http.StatusUnsupportedMediaType},
		{"content encoding", http.MethodPost, "/sync", map[string]string{"Content-Type": httpsync.ContentType, "Content-Encoding": strings.Repeat("e", 10<<10)}, http.StatusBadRequest},
	} {
		req, err := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Actor", "alice")
		req.Header.Set("X-Partition", "team")
		for k, v := range c.header {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var e httperr.Body
		if json.Unmarshal(b, &e) != nil || e.Code == "" || (c.status != 0 && res.StatusCode != c.status) {
			t.Fatalf("%s: HTTP %d %.300s, want %d and a protocol error", c.name, res.StatusCode, b, c.status)
		}
		t.Logf("%s: HTTP %d, %d-byte body: %s", c.name, res.StatusCode, len(b), e.Message)
		if len(b) > 2<<10 {
			t.Errorf("%s: the error body is %d bytes", c.name, len(b))
		}
	}
}
