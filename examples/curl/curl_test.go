// Package curl holds the request renderings README's curl walkthrough
// encodes with `go run ./cmd/ssp2 encode`; the test checks they get the
// answers README shows.
package curl

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/httpsync"
)

// post encodes the rendering in file as `ssp2 encode` does and sends it as
// README's curl does.
func post(t *testing.T, url, file string) (int, []byte) {
	t.Helper()
	rendering, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ssp2.ParseJSON(rendering)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	body, err := ssp2.Encode(m)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/vnd.syncular.sync.v2")
	req.Header.Set("X-Actor", "ada")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

func TestCurlWalkthrough(t *testing.T) {
	s := schema.MustDemo()
	eng, err := engine.New(context.Background(), engine.Config{Schema: s, Store: memory.New(), Resolver: engine.AllowAll(s)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	srv := httptest.NewServer(httpsync.NewMux(eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: httpsync.DevAuth{}}}))
	t.Cleanup(srv.Close)
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}

	// pull.json: the epoch handshake.
	status, b := post(t, srv.URL+"/sync", "pull.json")
	if status != 200 {
		t.Fatalf("pull.json: HTTP %d %s", status, b)
	}
	m, err := ssp2.DecodeResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := m.Frames[0].(*ssp2.RespHeader); !ok || !h.ResetRequired || len(h.LogEpoch) != 32 || len(m.Frames) != 1 {
		t.Fatalf("pull.json: not the epoch handshake: %+v", m.Frames)
	}

	// pull-unknown-table.json: the protocol's JSON error, as README shows it.
	status, b = post(t, srv.URL+"/sync", "pull-unknown-table.json")
	var e httpsync.ErrorBody
	if status != 400 || json.Unmarshal(b, &e) != nil || e.Code != "sync.unknown_table" {
		t.Fatalf("pull-unknown-table.json: HTTP %d %s", status, b)
	}
	if !bytes.Contains(readme, bytes.TrimSpace(b)) {
		t.Errorf("README does not show the answer to pull-unknown-table.json:\n%s", b)
	}
	for _, f := range []string{"examples/curl/pull.json", "examples/curl/pull-unknown-table.json", "%{http_code}"} {
		if !strings.Contains(string(readme), f) {
			t.Errorf("README's curl walkthrough does not use %s", f)
		}
	}
}
